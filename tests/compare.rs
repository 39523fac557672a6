//! `credit compare`: the structure of the comparison and numbers checked independently.

use crate::util::{f, fixture, json, read_jsonl, stderr, stdout, Run};

#[test]
fn compare_reports_every_section() {
    let run = Run::new();
    let out = run.credit([
        "compare",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--methods",
        "grpo,gigpo,proxmo,mgr",
        "--format",
        "json",
    ]);
    let c = json(&out);
    assert_eq!(c["methods"].as_array().unwrap().len(), 4);
    assert_eq!(c["pairwise"].as_array().unwrap().len(), 6);
    for m in ["grpo", "gigpo", "proxmo", "mgr"] {
        assert_eq!(c["distributions"][m]["n"], 404);
        assert_eq!(c["cells"][m].as_array().unwrap().len(), 4);
        assert_eq!(c["invalid_credit"][m]["invalid_steps"], 27);
    }
    // MGR never credits an invalid action positively (spec-mgr.md §1.5 guarantee).
    assert_eq!(
        f(&c["invalid_credit"]["mgr"]["invalid_positive_share"]),
        0.0
    );
    assert_eq!(c["metadata"]["preset"], "paper");
}

#[test]
fn invalid_positive_share_matches_the_advantages_file() {
    // Work out GRPO's share of invalid actions with positive credit from `credit advantages`'s output
    // and the raw `is_action_valid` flags, and compare with `credit compare`.
    let run = Run::new();
    let input = fixture("real/sokoban.jsonl");
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "grpo",
        "-o",
        "a.jsonl",
    ]);
    assert!(out.status.success());
    let adv = read_jsonl(&run.path("a.jsonl"));
    let raw = read_jsonl(&input);
    let invalid: Vec<usize> = (0..raw.len())
        .filter(|&i| !raw[i]["is_action_valid"].as_bool().unwrap())
        .collect();
    let positive = invalid
        .iter()
        .filter(|&&i| f(&adv[i]["adv_grpo"]) > 0.0)
        .count();
    let c = json(&run.credit([
        "compare",
        input.to_str().unwrap(),
        "--methods",
        "grpo,gigpo",
        "--format",
        "json",
    ]));
    assert_eq!(c["invalid_credit"]["grpo"]["invalid_steps"], invalid.len());
    assert!(
        (f(&c["invalid_credit"]["grpo"]["invalid_positive_share"])
            - positive as f64 / invalid.len() as f64)
            .abs()
            < 1e-12
    );
}

#[test]
fn text_output_names_the_sections() {
    let run = Run::new();
    let out = run.credit(["compare", fixture("real/textworld.jsonl").to_str().unwrap()]);
    assert!(out.status.success());
    let text = stdout(&out);
    for section in [
        "distribution of per-step credit",
        "agreement over steps",
        "invalid actions that receive positive credit",
        "by step position",
        "per task",
    ] {
        assert!(text.contains(section), "missing {section}:\n{text}");
    }
}

#[test]
fn the_run_says_its_methods_preset_and_settings() {
    let run = Run::new();
    let sokoban = fixture("real/sokoban.jsonl").display().to_string();
    // verl-agent's columns under the default preset: one line says which ran, a note what
    // `--preset verl` changes.
    let out = run.credit([
        "compare",
        &sokoban,
        "--set",
        "gigpo.omega=0.5",
        "--gamma",
        "0.9",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(
            "methods: grpo, gigpo, proxmo (preset paper; gamma = 0.9, gigpo.omega = 0.5)\n"
        ),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out)
        .contains("`paper` is the default preset; these logs have verl-agent's columns"));
    // A chosen preset needs no note.
    let out = run.credit(["compare", &sokoban, "--preset", "paper"]);
    assert!(stdout(&out).starts_with("methods: grpo, gigpo, proxmo (preset paper)\n"));
    assert!(!stderr(&out).contains("default preset"), "{}", stderr(&out));
}

#[test]
fn single_turn_logs_default_to_the_outcome_estimators_and_their_sections() {
    // verl's one-row-per-rollout dump: GiGPO and GraphGPO would equal GRPO by construction (ρ = 1
    // in every pair), so compare runs GRPO's family and verl's outcome estimators, and leaves out
    // what single-turn logs cannot have (invalid actions without a `valid` column, step positions).
    let run = Run::new();
    let input = fixture("verl/with_uid/rollout_data_dir");
    let out = run.credit(["compare", input.to_str().unwrap(), "--preset", "verl"]);
    let text = stdout(&out);
    assert!(
        text.starts_with("methods: grpo, drgrpo, rloo, grpo_passk, opo, gpg, reinforce_plus_plus, reinforce_plus_plus_baseline, gdpo (preset verl)"),
        "{text}"
    );
    assert!(
        text.contains("mean credit by trajectory outcome\n"),
        "{text}"
    );
    for absent in [
        "invalid actions that receive positive credit",
        "mean credit by step position",
        "success/inval",
        "-0.000",
        "gigpo",
    ] {
        assert!(!text.contains(absent), "{absent}: {text}");
    }
    // Named methods still run as named; multi-turn logs keep their defaults.
    let out = run.credit([
        "compare",
        input.to_str().unwrap(),
        "--methods",
        "grpo,gigpo",
    ]);
    assert!(stdout(&out).starts_with("methods: grpo, gigpo (preset paper)"));
    let out = run.credit(["compare", fixture("real/textworld.jsonl").to_str().unwrap()]);
    let text = stdout(&out);
    assert!(text.starts_with("methods: grpo, gigpo, proxmo (preset paper)"));
    assert!(text.contains("invalid actions that receive positive credit"));
    assert!(text.contains("mean credit by step position"));
}

#[test]
fn per_task_means_that_are_zero_by_construction_are_said_once() {
    // Under `--preset verl` GRPO's credit sums to 0 in every group, so every task's mean is 0:
    // one line says so instead of a column of zeros.
    let run = Run::new();
    let out = run.credit([
        "compare",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--preset",
        "verl",
        "--methods",
        "grpo,gigpo",
    ]);
    let text = stdout(&out);
    let per_task = &text[text
        .find("per task: mean credit")
        .expect("a per-task section")..];
    assert!(
        per_task.contains("0 in every task by construction"),
        "{per_task}"
    );
    assert!(
        !per_task.contains("grpo 0.000") && !per_task.contains("grpo -0.000"),
        "{per_task}"
    );
}

#[test]
fn help_shows_each_commands_default_methods() {
    let run = Run::new();
    for (command, default) in [
        ("advantages", "else all]"),
        ("compare", "else grpo,gigpo,proxmo; on single-turn logs (verl's one row per rollout) grpo,drgrpo,rloo,grpo_passk,opo,gpg,reinforce_plus_plus,reinforce_plus_plus_baseline,gdpo]"),
        ("report", "else grpo,gigpo,proxmo,graphgpo,mgr; on single-turn logs"),
    ] {
        let help = stdout(&run.credit([command, "--help"]));
        let methods = help.split("--methods <LIST>").nth(1).unwrap_or_default();
        let methods = &methods[..methods.find("--preset").unwrap_or(methods.len())];
        let flat = methods.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(default), "{command}: {flat}");
        assert!(help.contains("else paper"), "{command}");
    }
    // `graph` colours by one method: `--methods` is not offered, and refused if given.
    let graph_help = stdout(&run.credit(["graph", "--help"]));
    assert!(!graph_help.contains("--methods") && graph_help.contains("--color-by"));
    let out = run.credit([
        "graph",
        &fixture("real/sokoban.jsonl").display().to_string(),
        "--methods",
        "grpo",
        "--out",
        "g",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("use `--color-by METHOD`, not `--methods grpo`"));
    assert!(!run.path("g").exists());
}

/// `real/textworld.jsonl` with an `advantages` column holding what verl-agent's
/// `compute_gigpo_outcome_advantage` computed for the same rows (`reference/textworld.ref-pen01.jsonl`,
/// the `verl` preset's penalty 0.1), with `edit` applied to the rows first.
pub(crate) fn with_reference_gigpo(
    run: &Run,
    name: &str,
    edit: impl FnOnce(&mut [serde_json::Value]),
) -> String {
    with_reference(
        run,
        name,
        "textworld.ref-pen01.jsonl",
        "gigpo_mean_std_norm",
        edit,
    )
}

/// `real/textworld.jsonl` with an `advantages` column holding column `column` of
/// `reference/<file>` (what verl-agent computed for the same rows), with `edit` applied.
pub(crate) fn with_reference(
    run: &Run,
    name: &str,
    file: &str,
    column: &str,
    edit: impl FnOnce(&mut [serde_json::Value]),
) -> String {
    let mut rows = read_jsonl(&fixture("real/textworld.jsonl"));
    let reference = read_jsonl(&fixture(&format!("reference/{file}")));
    for (row, r) in rows.iter_mut().zip(&reference) {
        assert_eq!(row["traj_uid"], r["traj_uid"]);
        assert_eq!(row["step"], r["step"]);
        row["advantages"] = r[column].clone();
    }
    edit(&mut rows);
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    let path = run.path(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn logged_reference_advantages_match_verl_gigpo() {
    let run = Run::new();
    let path = with_reference_gigpo(&run, "logged.jsonl", |_| {});
    let args = [
        "compare",
        &path,
        "--methods",
        "logged,gigpo",
        "--preset",
        "verl",
    ];
    let c = json(&run.credit(args.iter().chain(&["--format", "json"])));
    let check = &c["logged"][0];
    assert_eq!(check["method"], "gigpo");
    // The reference computed in float32: its rounding, nothing more.
    assert!(f(&check["max_abs_diff"]) < 1e-6, "{check}");
    assert_eq!(check["rows_beyond"], 0);
    assert_eq!(check["rows"], 404);
    assert!(check["first"].as_array().unwrap().is_empty());
    let out = run.credit(args);
    assert!(out.status.success());
    assert!(stdout(&out).contains("0 of 404"), "{}", stdout(&out));
}

#[test]
fn logged_departures_are_named_by_file_and_line() {
    let run = Run::new();
    // One row changed (line 11), and two rows of one group swapped: step 0 of the first
    // trajectory (line 1) and of the next trajectory of its group.
    let mut swapped = 0;
    let path = with_reference_gigpo(&run, "perturbed.jsonl", |rows| {
        rows[10]["advantages"] = (f(&rows[10]["advantages"]) + 0.5).into();
        let other = (1..rows.len())
            .find(|&i| {
                rows[i]["uid"] == rows[0]["uid"]
                    && rows[i]["traj_uid"] != rows[0]["traj_uid"]
                    && rows[i]["step"] == 0
            })
            .unwrap();
        let first = rows[0]["advantages"].clone();
        rows[0]["advantages"] = rows[other]["advantages"].clone();
        rows[other]["advantages"] = first;
        swapped = other;
    });
    let swapped_line = swapped + 1;
    let args = [
        "compare",
        &path,
        "--methods",
        "logged,gigpo",
        "--preset",
        "verl",
    ];
    let c = json(&run.credit(args.iter().chain(&["--format", "json"])));
    let check = &c["logged"][0];
    assert_eq!(check["rows_beyond"], 3);
    assert!((f(&check["max_abs_diff"]) - 0.5).abs() < 1e-5, "{check}");
    let lines: Vec<String> = check["first"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["location"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        lines,
        [
            format!("{path}:1"),
            format!("{path}:11"),
            format!("{path}:{swapped_line}")
        ]
    );
    let text = stdout(&run.credit(args));
    assert!(text.contains("3 of 404"), "{text}");
    assert!(text.contains(&format!("{path}:11  trajectory")), "{text}");
}

#[test]
fn a_trainer_without_the_penalty_is_named_by_its_setting() {
    // verl-agent's GiGPO run with penalty 0 (`reference/textworld.ref.jsonl`), held to the verl
    // preset's 0.1: every row is off, and the search names the one setting apart.
    let run = Run::new();
    let path = with_reference(
        &run,
        "p0.jsonl",
        "textworld.ref.jsonl",
        "gigpo_mean_std_norm",
        |_| {},
    );
    let args = [
        "compare",
        &path,
        "--methods",
        "logged,gigpo",
        "--preset",
        "verl",
    ];
    let c = json(&run.credit(args.iter().chain(&["--format", "json"])));
    let check = &c["logged"][0];
    assert!(check["rows_beyond"].as_u64().unwrap() > 0, "{check}");
    let found = &check["configuration"];
    assert_eq!(found["method"], "gigpo");
    assert_eq!(found["preset"], "verl");
    assert_eq!(
        found["settings"],
        serde_json::json!({"invalid_penalty": 0.0})
    );
    // The reference's float32 rounding, nothing more.
    assert!(f(&found["max_abs_diff"]) < 1e-5, "{found}");
    assert_eq!(found["reproduces"], true);
    let patterns = check["patterns"].as_array().unwrap();
    let rows: u64 = patterns.iter().map(|p| p["rows"].as_u64().unwrap()).sum();
    assert_eq!(rows, check["rows_beyond"].as_u64().unwrap());
    let text = stdout(&run.credit(args));
    assert!(
        text.contains("configuration: logged = gigpo, preset verl, `gigpo.invalid_penalty=0.0`"),
        "{text}"
    );
}

#[test]
fn logged_without_the_column_names_the_accepted_ones() {
    let run = Run::new();
    let out = run.credit([
        "compare",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--methods",
        "logged,gigpo",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = crate::util::stderr(&out);
    assert!(err.contains("`advantage` (or advantages, adv)"), "{err}");
    assert!(stdout(&out).is_empty());
}
