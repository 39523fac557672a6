//! Every bad-input fixture (`fixtures/bad/`): exit 2, a message naming file, line or row, and
//! column, and no output written. `--lenient` skips and counts instead.

use crate::util::{fixture, json, stderr, Run};

/// (fixture, what stderr must contain: the location and the expectation)
const CASES: &[(&str, &[&str])] = &[
    (
        "malformed-json.jsonl",
        &["malformed-json.jsonl:2:", "malformed JSON"],
    ),
    (
        "missing-column.jsonl",
        &[
            "missing-column.jsonl:1 (traj_id)",
            "traj_uid",
            "missing required column",
        ],
    ),
    (
        "wrong-type.jsonl",
        &[
            "wrong-type.jsonl:2:",
            "(reward)",
            "expected a finite number",
            "\"n/a\"",
        ],
    ),
    (
        "nan-reward.jsonl",
        &["nan-reward.jsonl:3:", "(reward)", "NaN"],
    ),
    (
        "infinite-reward.jsonl",
        &["infinite-reward.jsonl:4:", "(reward)", "Infinity"],
    ),
    (
        "duplicate-step.jsonl",
        &[
            "duplicate-step.jsonl:3 (step)",
            "duplicate step 1 of trajectory `a`",
            "duplicate-step.jsonl:2",
        ],
    ),
    (
        "step-gap.jsonl",
        &["step-gap.jsonl:3 (step)", "step 2 is missing"],
    ),
    (
        "trajectory-in-two-groups.jsonl",
        &[
            "trajectory-in-two-groups.jsonl:5 (group_id)",
            "group `g2`",
            "group `g1`",
        ],
    ),
    (
        "invalid-utf8.jsonl",
        &["invalid-utf8.jsonl:2:", "invalid UTF-8"],
    ),
    ("empty.jsonl", &["empty.jsonl", "no step rows found"]),
    (
        "verl-rollout-dump.jsonl",
        &[
            "verl-rollout-dump.jsonl:1 (group_id)",
            "rollout dump",
            "`group_id`",
            "`traj_id`",
            "uid",
        ],
    ),
    (
        "wrong-type.parquet",
        &[
            "wrong-type.parquet:row 0 (reward)",
            "expected a finite number",
        ],
    ),
    (
        "nan-reward.parquet",
        &["nan-reward.parquet:row 1 (reward)", "NaN"],
    ),
    (
        "conflicting-rewards.jsonl",
        &[
            "conflicting-rewards.jsonl:3:",
            "(rewards)",
            "`rewards` = 0.5 but `reward` = 1",
            "--schema",
        ],
    ),
    (
        "decimal-reward.parquet",
        &[
            "decimal-reward.parquet (reward)",
            "Decimal",
            "store it as a number",
        ],
    ),
    (
        "negative-step.jsonl",
        &[
            "negative-step.jsonl:4:",
            "(step)",
            "expected a step ≥ 0, got -1",
        ],
    ),
    (
        "overflowing-rewards.jsonl",
        &["overflow", "group `g1`", "rescale the rewards"],
    ),
    (
        "huge-rewards.jsonl",
        &["grpo_std", "is inf", "rescale the rewards"],
    ),
    (
        "conflicting-episode-rewards.parquet",
        &[
            "conflicting-episode-rewards.parquet:row 4 (score)",
            "`score` = 1 but `episode_rewards` = 0",
            "--schema",
        ],
    ),
    (
        "trajectory-in-two-iterations.jsonl",
        &[
            "trajectory-in-two-iterations.jsonl:2 (iteration)",
            "trajectory `a` of group `g1` has iteration 1 here (from step 1) but iteration 0 at",
            "trajectory-in-two-iterations.jsonl:1 (from step 0)",
        ],
    ),
    (
        "episode-reward-changes.jsonl",
        &[
            "episode-reward-changes.jsonl:3 (episode_rewards)",
            "trajectory `a` has episode reward 0 here but 1 at",
            "episode-reward-changes.jsonl:1:",
        ],
    ),
    (
        "episode-reward-changes.parquet",
        &[
            "episode-reward-changes.parquet:row 2 (episode_rewards)",
            "trajectory `a` has episode reward 0 here but 1 at",
            "episode-reward-changes.parquet:row 0:",
        ],
    ),
    (
        "bom-mid-file.jsonl",
        &[
            "bom-mid-file.jsonl:4:1:",
            "a byte-order mark starts this line (files joined with `cat`?)",
        ],
    ),
    (
        "utf16.jsonl",
        &["utf16.jsonl: looks like UTF-16 (little-endian, by its byte-order mark): convert it to UTF-8 (iconv -f UTF-16 -t UTF-8"],
    ),
    (
        "utf16-no-bom.jsonl",
        &["utf16-no-bom.jsonl: looks like UTF-16 (big-endian, without a byte-order mark)"],
    ),
    (
        "gzip-zero-padding.jsonl.gz",
        &["gzip-zero-padding.jsonl.gz: the gzip stream ends in 512 bytes of zero padding after its last member"],
    ),
];

#[test]
fn every_bad_input_is_located_and_writes_nothing() {
    for (name, needles) in CASES {
        let run = Run::new();
        let input = fixture(&format!("bad/{name}"));
        let out = run.credit([
            "advantages",
            input.to_str().unwrap(),
            "--methods",
            "grpo",
            "-o",
            "out.parquet",
        ]);
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{name}: exit {:?}, stderr {err}",
            out.status.code()
        );
        for needle in *needles {
            assert!(
                err.contains(needle),
                "{name}: stderr lacks {needle:?}:\n{err}"
            );
        }
        assert!(!err.contains("panicked"), "{name}: {err}");
        let left: Vec<_> = std::fs::read_dir(run.dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{name}: something was written: {left:?}");
    }
}

#[test]
fn lenient_skips_and_counts_per_reason() {
    // (fixture, expected skip counts). A skipped row leaves a gap in its trajectory, so the rest of
    // that trajectory is skipped too (its returns could not be computed).
    let cases: &[(&str, &[(&str, u64)])] = &[
        (
            "wrong-type.jsonl",
            &[("wrong type", 1), ("gap in step numbering", 2)],
        ),
        ("nan-reward.jsonl", &[("NaN or infinite number", 1)]),
        ("step-gap.jsonl", &[("gap in step numbering", 3)]),
        ("duplicate-step.jsonl", &[("duplicate (traj_id, step)", 1)]),
        ("conflicting-rewards.jsonl", &[("columns that disagree", 1)]),
        (
            "malformed-json.jsonl",
            &[("malformed JSON", 1), ("gap in step numbering", 2)],
        ),
        (
            "trajectory-in-two-iterations.jsonl",
            &[("trajectory in two iterations", 2)],
        ),
        (
            "episode-reward-changes.jsonl",
            &[("episode reward that changes within a trajectory", 3)],
        ),
    ];
    for (name, counts) in cases {
        let run = Run::new();
        let input = fixture(&format!("bad/{name}"));
        let out = run.credit([
            "analyze",
            input.to_str().unwrap(),
            "--lenient",
            "--format",
            "json",
        ]);
        let s = json(&out);
        let skipped = s["skipped"].as_object().unwrap();
        assert_eq!(skipped.len(), counts.len(), "{name}: {skipped:?}");
        for (reason, n) in *counts {
            assert_eq!(skipped[*reason], *n, "{name}: {reason}");
        }
        let total: u64 = counts.iter().map(|c| c.1).sum();
        assert_eq!(
            s["rows"].as_u64().unwrap() + total,
            crate::util::read_lines(&input),
            "{name}"
        );
        assert!(stderr(&out).contains("--lenient skipped"), "{name}");
    }
}

#[test]
fn unknown_method_and_parameter_are_errors() {
    let run = Run::new();
    let input = fixture("real/textworld.jsonl");
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "nope",
        "-o",
        "o.parquet",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown method `nope`"));
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "gigpo",
        "--set",
        "gigpo.omgea=1",
        "-o",
        "o.parquet",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown parameter `gigpo.omgea`") && stderr(&out).contains("omega"),
        "{}",
        stderr(&out)
    );
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "gigpo",
        "-o",
        "o.txt",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(".parquet, .jsonl or .csv"));
    assert!(std::fs::read_dir(run.dir.path()).unwrap().next().is_none());
}

/// A misspelt `--set` key or method is answered with the closest name.
#[test]
fn unknown_names_suggest_the_closest() {
    let run = Run::new();
    let input = fixture("real/textworld.jsonl");
    let input = input.to_str().unwrap();
    let out = run.credit(["analyze", input, "--set", "gigpo.gama=0.9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).trim_end().ends_with(
            "unknown parameter `gigpo.gama` (known: eps, gamma, invalid_penalty, mode, omega, penalty_mode, similarity, stats_over, std_ddof); did you mean `gigpo.gamma`?"
        ),
        "{}",
        stderr(&out)
    );
    let out = run.credit(["compare", input, "--methods", "grpo,gipgo"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .trim_end()
            .ends_with("`all` or `verl`); did you mean `gigpo`?"),
        "{}",
        stderr(&out)
    );
}

/// A log lacking several required columns: one error names them all, the columns the log has,
/// and a `--schema` file mapping the closest; a mapping written the other way round is said so.
#[test]
fn missing_columns_are_named_at_once_with_a_schema_to_map_them() {
    let run = Run::new();
    let input = fixture("formats/textworld.renamed.jsonl");
    let input = input.to_str().unwrap();
    let out = run.credit(["analyze", input]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for expected in [
        "textworld.renamed.jsonl:1 (group_id): missing required columns `group_id` (or uid, group, task_uid, index), `traj_id` (or traj_uid, traj_index, episode_id, trajectory_id), `step` (or step_idx, step_id, turn, t), `reward` (or rewards, step_reward, r); the columns present: ",
        "task_group, turn_index",
        "map other names onto them with `--schema map.toml`, e.g. (the closest names: check them):\n    task_group = \"group_id\"\n",
        "\n    turn_index = \"step\"\n    env_reward = \"reward\"\n",
    ] {
        assert!(err.contains(expected), "{expected}\n{err}");
    }
    std::fs::write(run.path("map.toml"), "group_id = \"task_group\"\n").unwrap();
    let out = run.credit(["analyze", input, "--schema", "map.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("column mapping `group_id = \"task_group\"` is reversed: a pair is the log's column, then credit's (write `task_group = \"group_id\"`)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_column_mapping_settles_disagreeing_columns() {
    // `rewards = "reward"` makes `rewards` the step reward: `reward` is then not read, so its
    // different value on line 3 is no longer a conflict, and the report says so.
    let run = Run::new();
    std::fs::write(run.path("map.toml"), "rewards = \"reward\"\n").unwrap();
    let input = fixture("bad/conflicting-rewards.jsonl");
    let out = run.credit([
        "analyze",
        input.to_str().unwrap(),
        "--schema",
        "map.toml",
        "--format",
        "json",
    ]);
    let s = json(&out);
    assert_eq!(s["rows"], 5);
    let reward = s["columns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["field"] == "reward")
        .unwrap();
    assert_eq!(reward["column"], "rewards");
    assert_eq!(reward["also"][0]["column"], "reward");
    assert_eq!(reward["also"][0]["outcome"], "not used");
    assert!(reward["also"][0]["why"]
        .as_str()
        .unwrap()
        .contains("column mapping"));
}

#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    // `credit analyze … --format json | head -c 100`: the reader goes away after 100 bytes.
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args([
            "analyze",
            fixture("real").to_str().unwrap(),
            "--format",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn the_output_never_replaces_an_input() {
    let run = Run::new();
    let log = run.path("log.jsonl");
    std::fs::copy(fixture("real/textworld.jsonl"), &log).unwrap();
    let before = std::fs::read(&log).unwrap();
    let out = run.credit([
        "advantages",
        "log.jsonl",
        "--methods",
        "grpo",
        "-o",
        "log.jsonl",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("log.jsonl: is the input log.jsonl; credit never writes over"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read(&log).unwrap(),
        before,
        "the input is unchanged"
    );
    let names: Vec<String> = std::fs::read_dir(run.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["log.jsonl".to_string()], "nothing else written");
}

#[cfg(unix)]
#[test]
fn directory_walks_skip_loops_links_and_special_files() {
    // A symlink loop, a link to `/`, a FIFO and the same file through a link: each file is read
    // once, nothing outside the folder, no hang.
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::copy(fixture("real/textworld.jsonl"), logs.join("a.jsonl")).unwrap();
    std::os::unix::fs::symlink(&logs, logs.join("loop")).unwrap();
    std::os::unix::fs::symlink("/", logs.join("root")).unwrap();
    std::os::unix::fs::symlink(logs.join("a.jsonl"), logs.join("b.jsonl")).unwrap();
    let fifo = logs.join("pipe.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    let out = run.credit(["analyze", "logs", "--format", "json"]);
    let s = json(&out);
    assert_eq!(s["rows"], 404, "one copy of the file");
    assert_eq!(s["padding_duplicates"], 0);
    let notes = s["notes"].to_string();
    assert!(notes.contains("link to a directory"), "{notes}");
    assert!(notes.contains("same file"), "{notes}");
    if made.is_ok_and(|s| s.success()) {
        assert!(notes.contains("not a regular file"), "{notes}");
        // A FIFO given directly is an error, not a hang.
        let out = run.credit(["analyze", fifo.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).contains("not a regular file"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn numeric_flags_and_settings_are_checked() {
    let run = Run::new();
    let input = fixture("real/textworld.jsonl");
    let input = input.to_str().unwrap();
    let out = run.credit(["analyze", input, "--success-threshold", "nan"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--success-threshold"),
        "{}",
        stderr(&out)
    );
    // A setting for a method that does not run is checked all the same.
    let out = run.credit([
        "advantages",
        input,
        "--methods",
        "grpo",
        "--set",
        "gigpo.omega=abc",
        "-o",
        "o.parquet",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("gigpo.omega=abc"), "{}", stderr(&out));
    assert!(std::fs::read_dir(run.dir.path()).unwrap().next().is_none());
}

#[test]
fn ids_given_as_numbers_and_strings_are_noted() {
    let run = Run::new();
    let input = fixture("formats/mixed-id-kinds.jsonl");
    let s = json(&run.credit(["analyze", input.to_str().unwrap(), "--format", "json"]));
    assert_eq!(s["groups"], 1);
    assert!(
        s["notes"]
            .to_string()
            .contains("`group_id` is a number on some rows and a string on others"),
        "{}",
        s["notes"]
    );
}

#[test]
fn a_byte_order_mark_is_read_and_decimals_nobody_reads_are_ignored() {
    let run = Run::new();
    for name in ["formats/bom.jsonl", "formats/decimal-unused.parquet"] {
        let s = json(&run.credit([
            "analyze",
            fixture(name).to_str().unwrap(),
            "--format",
            "json",
        ]));
        assert_eq!(s["rows"], 5, "{name}");
    }
}

#[test]
fn json_errors_are_json() {
    let run = Run::new();
    let input = fixture("bad/wrong-type.jsonl");
    let out = run.credit(["analyze", input.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(2));
    let e: serde_json::Value = serde_json::from_str(stderr(&out).trim()).expect("one JSON object");
    assert_eq!(e["error"]["location"]["line"], 2);
    assert_eq!(e["error"]["location"]["field"], "reward");
    assert_eq!(e["error"]["reason"], "wrong_type");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("expected a finite number"));
}

#[test]
fn a_bad_check_key_leaves_the_old_report_whole() {
    let run = Run::new();
    let input = fixture("real/textworld.jsonl");
    let input = input.to_str().unwrap();
    let out = run.credit(["report", input, "--out", "rep"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let before = std::fs::read(run.path("rep/report.html")).unwrap();
    let figure = run.path("rep/figures/success.png");
    let figure_before = std::fs::read(&figure).unwrap();
    std::fs::write(
        run.path("t.toml"),
        "[[rule]]\nkey = \"headline.nope\"\nmax = 1\n",
    )
    .unwrap();
    let sokoban = fixture("real/sokoban.jsonl");
    let out = run.credit([
        "report",
        sokoban.to_str().unwrap(),
        "--out",
        "rep",
        "--check",
        "t.toml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("headline.nope"), "{}", stderr(&out));
    assert_eq!(std::fs::read(run.path("rep/report.html")).unwrap(), before);
    assert_eq!(std::fs::read(&figure).unwrap(), figure_before);
    let hidden: Vec<_> = std::fs::read_dir(run.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "temporaries left: {hidden:?}");
}

#[cfg(unix)]
#[test]
fn an_interrupted_run_leaves_no_temporaries() {
    // SIGTERM in the middle of writing: the hidden temporary is removed, the output never
    // appears.
    let run = Run::new();
    let log = run.path("big.jsonl");
    let rows = std::fs::read_to_string(fixture("real/sokoban.jsonl")).unwrap();
    let mut text = String::new();
    for i in 0..150 {
        text.push_str(
            &rows
                .replace("\"uid\": \"", &format!("\"uid\": \"{i}-"))
                .replace("\"traj_uid\": \"", &format!("\"traj_uid\": \"{i}-")),
        );
    }
    std::fs::write(&log, text).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args([
            "advantages",
            "big.jsonl",
            "--methods",
            "all",
            "-o",
            "out.jsonl",
        ])
        .current_dir(run.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let names: Vec<String> = std::fs::read_dir(run.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    if status.success() {
        // It finished first: the output and its metadata are both there.
        assert!(
            names.contains(&"out.jsonl".to_string())
                && names.contains(&"out.jsonl.meta.json".to_string())
        );
    } else {
        assert_eq!(status.code(), Some(143), "exit as SIGTERM asks");
        assert!(
            !names.iter().any(|n| n.starts_with('.')),
            "temporaries left: {names:?}"
        );
        assert!(!names.contains(&"out.jsonl".to_string()), "{names:?}");
    }
}

// ---- Issue #24, second part: flags that would divide by zero, text that Graphviz cannot read,
// a method named twice, thresholds no value could meet, model folders that are not there. ----

/// Runs `credit ARGS`, expects exit 2, and returns stderr.
fn fails_with_2(run: &Run, args: &[&str]) -> String {
    let out = run.credit(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

#[test]
fn train_flags_out_of_range_are_refused_naming_the_flag() {
    let run = Run::new();
    let log = fixture("real/textworld.jsonl");
    let log = log.to_str().unwrap();
    for (command, flag, value, expected) in [
        (
            "progress",
            "--buckets",
            "0",
            "`--buckets 0`: must lie in 1..=1048576",
        ),
        (
            "sprm",
            "--buckets",
            "0",
            "`--buckets 0`: must lie in 1..=1048576",
        ),
        (
            "progress",
            "--buckets",
            "2000000",
            "`--buckets 2000000`: must lie in",
        ),
        (
            "progress",
            "--hidden",
            "0",
            "`--hidden 0`: must lie in 1..=4096",
        ),
        (
            "progress",
            "--batch-size",
            "0",
            "`--batch-size 0`: must be at least 1",
        ),
        (
            "progress",
            "--epochs",
            "0",
            "`--epochs 0`: must be at least 1",
        ),
        (
            "progress",
            "--lr",
            "nan",
            "`--lr NaN`: must be a positive number",
        ),
        (
            "progress",
            "--dropout",
            "nan",
            "`--dropout NaN`: must lie in [0, 1)",
        ),
    ] {
        let err = fails_with_2(&run, &["train", command, log, "--out", "m", flag, value]);
        assert!(err.contains(expected), "{command} {flag} {value}: {err}");
    }
    for (flag, value, expected) in [
        (
            "--batch-size",
            "0",
            "`--batch-size` and `--grad-accum` must be at least 1",
        ),
        (
            "--grad-accum",
            "0",
            "`--batch-size` and `--grad-accum` must be at least 1",
        ),
        (
            "--max-prompt-tokens",
            "0",
            "`--max-prompt-tokens 0`: must be at least 1",
        ),
        (
            "--max-samples",
            "0",
            "`--max-samples 0`: must be at least 1",
        ),
        ("--clip-eps", "nan", "`--clip-eps` must be in (0, 1)"),
        ("--kl-coef", "inf", "`--kl-coef` must be ≥ 0"),
    ] {
        let err = fails_with_2(
            &run,
            &[
                "train", "policy", log, "--method", "grpo", "--model", "nowhere", "--out", "o",
                flag, value,
            ],
        );
        assert!(err.contains(expected), "policy {flag} {value}: {err}");
    }
}

#[test]
fn model_flags_name_a_missing_or_unfit_folder() {
    let run = Run::new();
    let log = fixture("real/textworld.jsonl");
    let log = log.to_str().unwrap();
    let policy = |model: &str| {
        fails_with_2(
            &run,
            &[
                "train", "policy", log, "--method", "grpo", "--model", model, "--out", "o",
            ],
        )
    };
    assert!(
        policy("nowhere").contains("`--model nowhere`: no such folder"),
        "{}",
        policy("nowhere")
    );
    std::fs::create_dir(run.path("empty")).unwrap();
    let err = policy("empty");
    assert!(
        err.contains("`--model empty`: not a model folder: no config.json, no tokenizer.json, no *.safetensors (a Hugging Face model folder holds config.json, tokenizer.json and the *.safetensors weights)"),
        "{err}"
    );
    std::fs::write(run.path("file"), "").unwrap();
    assert!(policy("file").contains("`--model file`: not a folder"));
    let err = fails_with_2(
        &run,
        &[
            "train",
            "progress",
            log,
            "--out",
            "m",
            "--backbone",
            "nowhere",
        ],
    );
    assert!(
        err.contains("`--backbone nowhere`: no such folder"),
        "{err}"
    );
}

#[test]
fn a_method_named_twice_gives_its_column_once() {
    let run = Run::new();
    let log = fixture("real/textworld.jsonl");
    let header = |methods: &str, out: &str| {
        let o = run.credit([
            "advantages",
            log.to_str().unwrap(),
            "--methods",
            methods,
            "-o",
            out,
        ]);
        assert!(o.status.success(), "--methods {methods}: {}", stderr(&o));
        let csv = std::fs::read_to_string(run.path(out)).unwrap();
        csv.lines().next().unwrap().to_string()
    };
    assert_eq!(header("all,grpo", "twice.csv"), header("all", "once.csv"));
    assert_eq!(
        header("grpo,dr_grpo,grpo,drgrpo", "aliases.csv"),
        header("grpo,drgrpo", "two.csv")
    );
}

#[test]
fn thresholds_no_value_could_meet_are_refused_at_parse_time() {
    let run = Run::new();
    let log = fixture("real/textworld.jsonl");
    for (bounds, expected) in [
        (
            "max = nan",
            "bad.toml:4:7: rule `rows` (key `headline.rows`): `max = NaN` must be a finite number",
        ),
        (
            "max = inf",
            "bad.toml:4:7: rule `rows` (key `headline.rows`): `max = inf` must be a finite number",
        ),
        (
            "min = 2.0\nmax = 1.0",
            "bad.toml:4:7: rule `rows` (key `headline.rows`): `min = 2` is above `max = 1`",
        ),
    ] {
        std::fs::write(
            run.path("bad.toml"),
            format!("[[rule]]\nname = \"rows\"\nkey = \"headline.rows\"\n{bounds}\n"),
        )
        .unwrap();
        let err = fails_with_2(
            &run,
            &[
                "report",
                log.to_str().unwrap(),
                "--check",
                "bad.toml",
                "--out",
                "rep",
            ],
        );
        assert!(err.contains(expected), "{bounds}: {err}");
        assert!(!run.path("rep").exists(), "{bounds}: a report was written");
    }
}

/// A log of one group whose id holds a NUL and a megabyte of text, with control characters,
/// quotes and backslashes in its states and actions.
fn write_hostile_log(path: &std::path::Path) -> String {
    let id = format!("g\u{0}{}end", "x".repeat(1 << 20));
    let mut text = String::new();
    for (traj, won) in [("a", true), ("b", false)] {
        for step in 0..3 {
            let row = serde_json::json!({
                "uid": id,
                "traj_uid": traj,
                "step": step,
                "anchor_obs": format!("room {step}\u{0}\u{7} \"quoted\" \\N back\nslash {}", "y".repeat(5000)),
                "action": format!("say \"hi\\\" \u{1b}[31m {}", "z".repeat(3000)),
                "reward": if won && step == 2 { 1.0 } else { 0.0 },
                "is_action_valid": true,
            });
            text.push_str(&row.to_string());
            text.push('\n');
        }
    }
    std::fs::write(path, text).unwrap();
    id
}

#[test]
fn dot_text_is_escaped_and_abridged() {
    let run = Run::new();
    write_hostile_log(&run.path("hostile.jsonl"));
    let out = run.credit(["graph", "hostile.jsonl", "--out", "g", "--format", "json"]);
    let v = json(&out);
    let dot_file = v["written"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .find(|p| p.ends_with(".dot"))
        .unwrap()
        .to_string();
    let dot = std::fs::read_to_string(run.path(&dot_file)).unwrap();
    assert!(dot.len() < 20_000, "{} bytes of DOT", dot.len());
    assert!(
        !dot.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the DOT"
    );
    assert!(dot.contains("group g␀xxx") && dot.contains("…"), "{dot}");
    assert!(dot.contains("\\\"quoted\\\" \\\\N"), "{dot}");
}

#[test]
fn graphviz_failures_name_the_drawing_and_the_group() {
    // A `dot` that answers `-V` and fails on every graph, as Graphviz does on input it cannot
    // read.
    let run = Run::new();
    let bin = run.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("dot");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = -V ] && exit 0\necho 'Error: <stdin>: syntax error in line 3 near x' >&2\necho 'second line' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args([
            "graph",
            fixture("real/textworld.jsonl").to_str().unwrap(),
            "--top",
            "1",
            "--out",
            "g",
        ])
        .env("PATH", path)
        .current_dir(run.dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("drawing the state graph of group `")
            && err.contains("Graphviz `dot -Tsvg` failed: Error: <stdin>: syntax error in line 3 near x; second line"),
        "{err}"
    );
}

// ---- Issue #24: no input is taken silently (duplicate keys, empty episodes, schema entries
// that feed nothing, non-finite settings, folders of other file types). ----

/// Writes `text` as `name` in the run's folder and returns its path as text.
fn write_log(run: &Run, name: &str, text: &str) -> String {
    let path = run.path(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Runs `credit analyze` on `args` and returns (exit code, stderr).
fn analyze(run: &Run, args: &[&str]) -> (Option<i32>, String) {
    let out = run.credit(std::iter::once("analyze").chain(args.iter().copied()));
    (out.status.code(), stderr(&out))
}

const GOOD_ROWS: &str = concat!(
    r#"{"group_id": "g", "traj_id": "a", "step": 0, "reward": 1.0}"#,
    "\n",
    r#"{"group_id": "g", "traj_id": "b", "step": 0, "reward": 0.0}"#,
    "\n",
);

#[test]
fn a_duplicate_key_is_located_and_lenient_skips_it() {
    let run = Run::new();
    let log = write_log(
        &run,
        "dup.jsonl",
        &format!(
            "{GOOD_ROWS}{}\n",
            r#"{"group_id": "g", "traj_id": "c", "step": 0, "reward": 1.0, "reward": 0.0}"#
        ),
    );
    let (code, err) = analyze(&run, &[&log]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("dup.jsonl:3:61 (reward): duplicate key `reward`"),
        "{err}"
    );
    let out = run.credit(["analyze", &log, "--lenient", "--format", "json"]);
    let s = json(&out);
    assert_eq!(s["skipped"]["duplicate key"], 1, "{s}");
    assert_eq!(s["rows"], 2);
}

#[test]
fn an_episode_with_no_steps_is_located_and_lenient_skips_it() {
    let run = Run::new();
    let log = write_log(
        &run,
        "episodes.jsonl",
        concat!(
            r#"{"group_id": "g", "traj_id": "a", "steps": [{"step": 0, "reward": 1.0}]}"#,
            "\n",
            r#"{"group_id": "g", "traj_id": "b", "steps": []}"#,
            "\n",
        ),
    );
    let (code, err) = analyze(&run, &[&log]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("episodes.jsonl:2:44 (steps): an episode with no steps"),
        "{err}"
    );
    let out = run.credit(["analyze", &log, "--lenient", "--format", "json"]);
    assert_eq!(json(&out)["skipped"]["episode with no steps"], 1);
}

#[test]
fn a_schema_entry_for_a_column_no_log_has_is_an_error() {
    let run = Run::new();
    let log = write_log(
        &run,
        "log.jsonl",
        concat!(
            r#"{"uid": "g", "my_group": "h", "traj_id": "a", "step": 0, "reward": 1.0}"#,
            "\n"
        ),
    );
    let schema = write_log(&run, "map.toml", "my_grop = \"group_id\"\n");
    let (code, err) = analyze(&run, &[&log, "--schema", &schema]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "map.toml: column mapping `my_grop = \"group_id\"`: no log has a column `my_grop`"
        ),
        "{err}"
    );
    assert!(err.contains("did you mean `my_group`?"), "{err}");
    // Top-level pairs beside a [columns] table would be ignored.
    let both = write_log(
        &run,
        "both.toml",
        "my_group = \"group_id\"\n[columns]\nuid = \"traj_id\"\n",
    );
    let (code, err) = analyze(&run, &[&log, "--schema", &both]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("both.toml: `my_group` is outside the `[columns]` table"),
        "{err}"
    );
}

#[test]
fn non_finite_and_out_of_range_settings_name_the_key_and_the_range() {
    let run = Run::new();
    let log = write_log(&run, "log.jsonl", GOOD_ROWS);
    for (args, needle) in [
        (
            &["--methods", "gigpo", "--set", "gigpo.similarity=nan"][..],
            "`gigpo.similarity` = NaN is out of range (0, 1)",
        ),
        (
            &["--methods", "gigpo", "--set", "gigpo.omega=inf"][..],
            "`gigpo.omega` = inf is out of range [0, ∞)",
        ),
        (
            &["--gamma", "1.5"][..],
            "`gamma` = 1.5 is out of range [0, 1]",
        ),
    ] {
        let mut all = vec!["advantages", log.as_str(), "-o", "o.jsonl"];
        all.extend_from_slice(args);
        let out = run.credit(&all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_folder_of_other_file_types_names_them() {
    let run = Run::new();
    let dir = run.path("logs");
    std::fs::create_dir(&dir).unwrap();
    for name in ["a.csv", "b.txt", "c.csv", "d.csv"] {
        std::fs::write(dir.join(name), "x\n").unwrap();
    }
    let (code, err) = analyze(&run, &[dir.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no log files: credit reads .jsonl, .ndjson, .json or .parquet"),
        "{err}"
    );
    assert!(
        err.contains("the 4 files found are not: ")
            && err.contains("a.csv")
            && err.contains("and 1 more"),
        "{err}"
    );
}

#[test]
fn a_duplicate_trajectory_in_parquet_is_reported_as_in_jsonl() {
    use polars::prelude::*;
    let run = Run::new();
    // Trajectory `a` twice in group `g`: steps 0, 1 and again 0, 1 with other rewards.
    let mut frame = df!(
        "group_id" => ["g", "g", "g", "g", "g", "g"],
        "traj_id" => ["a", "a", "a", "a", "b", "b"],
        "step" => [0i64, 1, 0, 1, 0, 1],
        "reward" => [1.0f64, 1.0, 0.0, 0.0, 0.5, 0.5]
    )
    .unwrap();
    let path = run.path("dup.parquet");
    ParquetWriter::new(std::fs::File::create(&path).unwrap())
        .finish(&mut frame)
        .unwrap();
    let (code, err) = analyze(&run, &[path.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("dup.parquet:row 2 (step): duplicate step 0 of trajectory `a` (first at ")
            && err.contains("dup.parquet:row 0"),
        "{err}"
    );
}

/// A fixture's lines, without their line breaks.
fn fixture_lines(name: &str) -> Vec<String> {
    std::fs::read_to_string(fixture(name))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn lines_deep_in_a_log_are_named_at_any_chunk_size() {
    // Each chunk's parser numbers its own lines and blocks are renumbered once in order (the
    // reader does not count them): a problem far into the second file of a run is named by its
    // line however the files are cut, whether the parser rejects the line or the assembler its
    // row.
    let lines = fixture_lines("real/sokoban.jsonl");
    // (line, what replaces it or none for the step before again with another action, what the
    // error names)
    let cases = [
        (700, Some("{\"uid\": "), "b.jsonl:700:"),
        (900, None, "b.jsonl:900 (step)"),
    ];
    for (at, replacement, needle) in cases {
        let run = Run::new();
        std::fs::create_dir(run.path("logs")).unwrap();
        std::fs::copy(fixture("real/textworld.jsonl"), run.path("logs/a.jsonl")).unwrap();
        let mut bad = lines.clone();
        match replacement {
            Some(line) => bad[at - 1] = line.to_string(),
            None => bad.insert(
                at - 1,
                lines[at - 2].replace("\"action\": \"", "\"action\": \"x"),
            ),
        }
        std::fs::write(run.path("logs/b.jsonl"), bad.join("\n") + "\n").unwrap();
        for chunk_bytes in ["3000", "65536", "4194304"] {
            let out = run.credit_with(["analyze", "logs"], &[("CREDIT_CHUNK_BYTES", chunk_bytes)]);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{chunk_bytes}: {err}");
            assert!(err.contains(needle), "{chunk_bytes}: {needle:?} in {err}");
        }
    }
}

#[test]
fn many_small_files_read_as_one_task_keep_their_rows_and_lines() {
    // The reader gathers files smaller than a chunk into one task: the same summary as when each
    // file is a task of its own (chunks smaller than every file), and a bad line still named by
    // its file and line, whether the task holds it with other files or alone.
    let lines = fixture_lines("real/sokoban.jsonl");
    let write_parts = |run: &Run, bad: Option<(usize, usize)>| {
        std::fs::create_dir(run.path("logs")).unwrap();
        for (k, part) in lines.chunks(20).enumerate() {
            let mut part = part.to_vec();
            if let Some((_, line)) = bad.filter(|&(file, _)| file == k) {
                part[line - 1] = "{\"uid\": ".to_string();
            }
            std::fs::write(
                run.path(&format!("logs/part-{k:03}.jsonl")),
                part.join("\n") + "\n",
            )
            .unwrap();
        }
    };
    let analyze = |run: &Run, chunk_bytes: &str, lenient: bool| {
        let mut args = vec!["analyze", "logs", "--format", "json"];
        if lenient {
            args.push("--lenient");
        }
        run.credit_with(args, &[("CREDIT_CHUNK_BYTES", chunk_bytes)])
    };
    // 54 files of 7–17 KB: gathered by the default 4 MiB chunks, each alone at 4 KB.
    let run = Run::new();
    write_parts(&run, None);
    let gathered = json(&analyze(&run, "4194304", false));
    assert_eq!(gathered["rows"], 1078, "{gathered}");
    assert_eq!(gathered, json(&analyze(&run, "4096", false)));
    let bad = Run::new();
    write_parts(&bad, Some((17, 5)));
    for chunk_bytes in ["4194304", "4096"] {
        let out = analyze(&bad, chunk_bytes, false);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{chunk_bytes}: {err}");
        assert!(err.contains("part-017.jsonl:5:"), "{chunk_bytes}: {err}");
    }
    // Skipped, the line leaves a gap in its trajectory's steps: the rest of it goes too.
    let skipped = json(&analyze(&bad, "4194304", true));
    assert_eq!(skipped["skipped"]["malformed JSON"], 1, "{skipped}");
    assert_eq!(skipped, json(&analyze(&bad, "4096", true)));
}

// ---------------------------------------------------------------------------------------------
// Issue #50: files that change while they are read, settings files that are not files, narrow
// Parquet integers.
// ---------------------------------------------------------------------------------------------

/// Runs credit with `env`, killing it after `seconds` (a hang is a failure, not a stuck test).
fn credit_within(
    run: &Run,
    args: &[&str],
    env: &[(&str, &str)],
    seconds: u64,
) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(args)
        .current_dir(run.dir.path())
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(seconds) {
            child.kill().unwrap();
            panic!("credit {args:?} still ran after {seconds} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_log_truncated_while_it_is_read_is_an_error() {
    // The reader pauses after the log's first chunk (`CREDIT_TEST_PAUSE_READER`), the log is cut
    // short (emptied, as copytruncate does, or cut mid-line), and the read goes on: exit 2 with a
    // message naming the file and both sizes, never a signal, and nothing written.
    let line = fixture_lines("real/textworld.jsonl");
    let text = (line.join("\n") + "\n").repeat(4);
    for (cut, command) in [(0, "analyze"), (70_000, "advantages"), (70_000, "report")] {
        let run = Run::new();
        std::fs::write(run.path("log.jsonl"), &text).unwrap();
        std::fs::create_dir(run.path("hook")).unwrap();
        let mut args = vec![command, "log.jsonl"];
        match command {
            "advantages" => args.extend(["--methods", "grpo", "-o", "out.parquet"]),
            "report" => args.extend(["-o", "report"]),
            _ => {}
        }
        let hook = run.path("hook");
        let env = [
            ("CREDIT_CHUNK_BYTES", "65536"),
            ("CREDIT_TEST_PAUSE_READER", hook.to_str().unwrap()),
        ];
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
            .args(&args)
            .current_dir(run.dir.path())
            .envs(env)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while !hook.join("paused").exists() {
            assert!(
                start.elapsed().as_secs() < 60,
                "{command}: the reader never paused"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let log = std::fs::OpenOptions::new()
            .write(true)
            .open(run.path("log.jsonl"))
            .unwrap();
        log.set_len(cut).unwrap();
        std::fs::write(hook.join("resume"), "").unwrap();
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command}, cut to {cut}: {err}");
        assert!(
            err.contains(&format!(
                "log.jsonl: truncated while being read: it had {} bytes when credit listed it and has {cut} now",
                text.len()
            )),
            "{command}, cut to {cut}: {err}"
        );
        let mut left: Vec<String> = std::fs::read_dir(run.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["hook", "log.jsonl"],
            "{command}: something was written"
        );
    }
}

#[cfg(unix)]
#[test]
fn settings_files_that_are_not_regular_files_are_refused() {
    // A FIFO given as `--schema` or `--check` is refused before it is opened (opening it would
    // wait for a writer forever); so is a folder.
    let run = Run::new();
    let fifo = run.path("pipe.toml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("no mkfifo: skipped");
        return;
    }
    std::fs::create_dir(run.path("folder.toml")).unwrap();
    let input = fixture("real/textworld.jsonl");
    let input = input.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["analyze", input, "--schema", "pipe.toml"],
            "pipe.toml: is not a regular file (a FIFO): give the path of a file",
        ),
        (
            &["report", input, "-o", "r", "--check", "pipe.toml"],
            "pipe.toml: is not a regular file (a FIFO): give the path of a file",
        ),
        (
            &["analyze", input, "--schema", "folder.toml"],
            "folder.toml: is not a regular file (a directory)",
        ),
        (
            &["report", input, "-o", "r", "--check", "folder.toml"],
            "folder.toml: is not a regular file (a directory)",
        ),
    ];
    for (args, message) in cases {
        let out = credit_within(&run, args, &[], 60);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(!run.path("r").exists(), "{args:?}: a report was written");
    }
}

#[test]
fn narrow_integer_parquet_columns_are_read_as_numbers() {
    // `step` uint8, `reward` int16, `is_action_valid` uint16, `iteration` int8: the rows the
    // same log gives as JSONL.
    let run = Run::new();
    let jsonl = [
        (0, "a", 0, 0),
        (0, "a", 1, 0),
        (0, "a", 2, 1),
        (0, "b", 0, 0),
        (0, "b", 1, 0),
    ]
    .map(|(it, t, step, reward)| {
        format!(r#"{{"uid": "g1", "traj_uid": "{t}", "step": {step}, "reward": {reward}, "is_action_valid": 1, "iteration": {it}}}"#)
    });
    std::fs::write(run.path("same.jsonl"), jsonl.join("\n") + "\n").unwrap();
    let parquet = fixture("formats/narrow-ints.parquet");
    let analyze = |input: &str| {
        let mut s = json(&run.credit(["analyze", input, "--format", "json"]));
        s.as_object_mut().unwrap().remove("files");
        s.as_object_mut().unwrap().remove("columns");
        s
    };
    let read = analyze(parquet.to_str().unwrap());
    assert_eq!(read["rows"], 5, "{read}");
    assert_eq!(read, analyze("same.jsonl"));
}

/// An interrupted run removes the output folder it created when nothing was written there yet,
/// and says so: `credit graph` is stopped by SIGINT while it reads (the reader paused after its
/// first chunk, `CREDIT_TEST_PAUSE_READER`), after it opened `g/`.
#[cfg(unix)]
#[test]
fn an_interrupted_run_removes_the_folder_it_created() {
    let line = fixture_lines("real/textworld.jsonl");
    let run = Run::new();
    std::fs::write(run.path("log.jsonl"), (line.join("\n") + "\n").repeat(4)).unwrap();
    std::fs::create_dir(run.path("hook")).unwrap();
    let hook = run.path("hook");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(["graph", "log.jsonl", "-o", "g"])
        .current_dir(run.dir.path())
        .envs([
            ("CREDIT_CHUNK_BYTES", "65536"),
            ("CREDIT_TEST_PAUSE_READER", hook.to_str().unwrap()),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !hook.join("paused").exists() {
        assert!(start.elapsed().as_secs() < 60, "the reader never paused");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        run.path("g").is_dir(),
        "the folder is open while the logs are read"
    );
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "removed {}, which this run created: nothing was written there",
            std::path::absolute(run.path("g")).unwrap().display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(!run.path("g").exists());
}
