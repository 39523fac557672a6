//! `credit analyze` on the real fixtures, against numbers worked out here directly from the raw
//! JSON (not through credit's code).

use crate::util::{f, fixture, json, read_jsonl, stderr, stdout, Run};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Independent expectations from the raw rows of one file.
struct Expected {
    rows: usize,
    groups: usize,
    trajectories: usize,
    success_rate: f64,
    invalid_rate: f64,
    singleton_steps_pct: f64,
    singleton_clusters_pct: f64,
    clusters: usize,
    all_fail_groups: usize,
    all_success_groups: usize,
}

fn expected(name: &str) -> Expected {
    let rows = read_jsonl(&fixture(&format!("real/{name}")));
    let mut trajs: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut clusters: HashMap<(String, String), usize> = HashMap::new();
    let mut invalid = 0;
    for r in &rows {
        let (g, t) = (
            r["uid"].as_str().unwrap().to_string(),
            r["traj_uid"].as_str().unwrap().to_string(),
        );
        let won = r["won"].as_bool().unwrap()
            || r.get("success").and_then(|s| s.as_bool()).unwrap_or(false);
        let e = trajs.entry(t).or_insert((g.clone(), false));
        e.1 |= won;
        if !r["is_action_valid"].as_bool().unwrap() {
            invalid += 1;
        }
        *clusters
            .entry((g, r["anchor_obs"].as_str().unwrap().to_string()))
            .or_default() += 1;
    }
    let groups: BTreeSet<&String> = trajs.values().map(|(g, _)| g).collect();
    let mut per_group: BTreeMap<&String, (usize, usize)> = BTreeMap::new();
    for (g, s) in trajs.values() {
        let e = per_group.entry(g).or_default();
        e.0 += 1;
        e.1 += *s as usize;
    }
    let singletons = clusters.values().filter(|&&c| c == 1).count();
    Expected {
        rows: rows.len(),
        groups: groups.len(),
        trajectories: trajs.len(),
        success_rate: trajs.values().filter(|(_, s)| *s).count() as f64 / trajs.len() as f64,
        invalid_rate: invalid as f64 / rows.len() as f64,
        singleton_steps_pct: 100.0 * singletons as f64 / rows.len() as f64,
        singleton_clusters_pct: 100.0 * singletons as f64 / clusters.len() as f64,
        clusters: clusters.len(),
        all_fail_groups: per_group
            .values()
            .filter(|(n, s)| *s == 0 && *n > 0)
            .count(),
        all_success_groups: per_group.values().filter(|(n, s)| s == n).count(),
    }
}

fn check(name: &str, documented: (usize, usize, usize)) {
    let run = Run::new();
    let s = json(&run.credit([
        "analyze",
        fixture(&format!("real/{name}")).to_str().unwrap(),
        "--format",
        "json",
    ]));
    let e = expected(name);
    // The counts the data README documents, and the ones derived above, agree with credit's.
    assert_eq!((e.rows, e.groups, e.trajectories), documented);
    assert_eq!(s["rows"], e.rows);
    assert_eq!(s["groups"], e.groups);
    assert_eq!(s["trajectories"], e.trajectories);
    assert!((f(&s["success"]["overall"]) - e.success_rate).abs() < 1e-12);
    assert!((f(&s["invalid_actions"]["rate"]) - e.invalid_rate).abs() < 1e-12);
    assert_eq!(s["step_groups"]["overall"]["clusters"], e.clusters);
    assert!((f(&s["step_groups"]["overall"]["pct_steps"][0]) - e.singleton_steps_pct).abs() < 1e-9);
    assert!(
        (f(&s["step_groups"]["overall"]["pct_clusters"][0]) - e.singleton_clusters_pct).abs()
            < 1e-9
    );
    assert_eq!(s["degenerate"]["all_fail_groups"], e.all_fail_groups);
    assert_eq!(s["degenerate"]["all_success_groups"], e.all_success_groups);
    assert_eq!(s["rollouts_per_group"]["single_rollout_groups"], 0);
    assert_eq!(s["padding_duplicates"], 0);
}

#[test]
fn textworld_numbers() {
    // ../shared/data/README.md: 404 rows, 3 groups, 24 trajectories (13 won).
    check("textworld.jsonl", (404, 3, 24));
    let run = Run::new();
    let s = json(&run.credit([
        "analyze",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--format",
        "json",
    ]));
    assert!((f(&s["success"]["overall"]) - 13.0 / 24.0).abs() < 1e-12);
    assert!(
        !s["success"]["per_task"].as_array().unwrap().is_empty(),
        "per-task success from the `game` column"
    );
}

#[test]
fn sokoban_numbers() {
    // ../shared/data/README.md: 1,078 rows, 8 groups, 64 trajectories.
    check("sokoban.jsonl", (1078, 8, 64));
}

#[test]
fn directory_reads_every_file() {
    let run = Run::new();
    let s = json(&run.credit([
        "analyze",
        fixture("real").to_str().unwrap(),
        "--format",
        "json",
    ]));
    assert_eq!(s["files"], 2);
    assert_eq!(s["rows"], 404 + 1078);
    assert_eq!(s["groups"], 3 + 8);
}

#[test]
fn text_report_fits_a_screen() {
    let run = Run::new();
    let out = run.credit(["analyze", fixture("real/textworld.jsonl").to_str().unwrap()]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("404 rows") && text.contains("3 groups") && text.contains("24 trajectories"),
        "{text}"
    );
    assert!(text.contains("% of steps") && text.contains("% of clusters"));
    assert!(text.lines().count() < 60, "{text}");
}

#[test]
fn every_format_reads_the_same_rows() {
    // gzip, zstd, Parquet, episode-per-line and a renamed producer with a mapping file all hold
    // the textworld fixture; each must give the plain file's summary.
    let run = Run::new();
    let plain = json(&run.credit([
        "analyze",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--format",
        "json",
    ]));
    let variants: Vec<Vec<String>> = vec![
        vec![fixture("formats/textworld.jsonl.gz").display().to_string()],
        vec![fixture("formats/textworld.jsonl.zst").display().to_string()],
        vec![fixture("formats/textworld.parquet").display().to_string()],
        vec![fixture("formats/textworld.episodes.jsonl")
            .display()
            .to_string()],
        vec![
            fixture("formats/textworld.renamed.jsonl")
                .display()
                .to_string(),
            "--schema".into(),
            fixture("formats/map.toml").display().to_string(),
        ],
    ];
    for args in variants {
        let mut all = vec!["analyze".to_string(), "--format".into(), "json".into()];
        all.extend(args.clone());
        let s = json(&run.credit(&all));
        for key in [
            "rows",
            "groups",
            "trajectories",
            "success",
            "invalid_actions",
            "step_groups",
            "degenerate",
            "length",
        ] {
            assert_eq!(s[key], plain[key], "{key} differs for {args:?}");
        }
    }
}

#[test]
fn padding_duplicates_are_dropped_and_counted() {
    let run = Run::new();
    let rows = std::fs::read_to_string(fixture("real/textworld.jsonl")).unwrap();
    let first_two: Vec<&str> = rows.lines().take(2).collect();
    let padded = format!("{rows}{}\n{}\n", first_two[0], first_two[1]);
    std::fs::write(run.path("padded.jsonl"), padded).unwrap();
    let s = json(&run.credit(["analyze", "padded.jsonl", "--format", "json"]));
    assert_eq!(s["rows"], 404);
    assert_eq!(s["padding_duplicates"], 2);
}

#[test]
fn project_file_supplies_default_inputs() {
    let run = Run::new();
    std::fs::write(
        run.path("credit.toml"),
        format!(
            "inputs = [{:?}]\n",
            fixture("real/sokoban.jsonl").display().to_string()
        ),
    )
    .unwrap();
    let s = json(&run.credit(["analyze", "--format", "json"]));
    assert_eq!(s["rows"], 1078);
}

#[test]
fn the_state_comes_from_anchor_obs_and_analyze_says_so() {
    // `obs` (each step's feedback) beside `anchor_obs`: the state is `anchor_obs`, `obs` becomes the
    // policy's text, and both the JSON and the text say which column fed what.
    let run = Run::new();
    let input = fixture("formats/sokoban.with-obs.jsonl");
    let s = json(&run.credit(["analyze", input.to_str().unwrap(), "--format", "json"]));
    let plain = json(&run.credit([
        "analyze",
        fixture("real/sokoban.jsonl").to_str().unwrap(),
        "--format",
        "json",
    ]));
    assert_eq!(s["step_groups"], plain["step_groups"]);
    assert_eq!(s["graph"], plain["graph"]);
    let uses = s["columns"].as_array().unwrap();
    let of = |field: &str| uses.iter().find(|u| u["field"] == field).unwrap().clone();
    assert_eq!(of("obs")["column"], "anchor_obs");
    assert_eq!(of("obs")["also"][0]["column"], "obs");
    assert_eq!(of("obs")["also"][0]["outcome"], "feeds policy_obs");
    assert_eq!(of("policy_obs")["column"], "obs");
    assert_eq!(of("group_id")["column"], "uid");
    let text = stdout(&run.credit(["analyze", input.to_str().unwrap()]));
    assert!(
        text.contains("state (obs) ← anchor_obs; obs also present: feeds policy_obs"),
        "{text}"
    );
    assert!(text.contains("policy text (policy_obs) ← obs"), "{text}");
    // The report's header says the same.
    let out = run.path("report");
    let r = run.credit([
        "report",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", crate::util::stderr(&r));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("state (obs) ← anchor_obs"), "report header");
    assert!(
        html.contains("state (obs) ← anchor_obs; obs also present: feeds policy_obs"),
        "report header"
    );
}

/// `credit` with ingest's windows shrunk to nothing: every unit closes as early as it can.
fn tiny_windows(run: &Run, args: &[&str]) -> std::process::Output {
    run.credit_tiny_windows(args)
}

#[test]
fn window_sizes_do_not_change_any_number() {
    // Streaming in many small windows (and, for a log whose groups interleave, the second exact
    // pass) gives what one window holding the whole log gives: the same analyze JSON, the same
    // advantages in the same order.
    let run = Run::new();
    for name in [
        "real/textworld.jsonl",
        "real/sokoban.jsonl",
        "formats/textworld.parquet",
        "formats/sokoban.interleaved.jsonl",
    ] {
        let input = fixture(name);
        let input = input.to_str().unwrap();
        let analyze = ["analyze", input, "--format", "json"];
        let mut whole = json(&run.credit(analyze));
        let mut small = json(&tiny_windows(&run, &analyze));
        let notes = small["notes"].to_string();
        assert_eq!(
            notes.contains("read the logs twice"),
            name.contains("interleaved"),
            "{name}: {notes}"
        );
        whole.as_object_mut().unwrap().remove("notes");
        small.as_object_mut().unwrap().remove("notes");
        assert_eq!(whole, small, "{name}: analyze");
        for (out, windows) in [("whole.jsonl", false), ("small.jsonl", true)] {
            // Every method these logs can feed (hisr needs segment rewards they do not have).
            let args = [
                "advantages",
                input,
                "--methods",
                "all,spa",
                "--set",
                "spa.variant=random",
                "--preset",
                "verl",
                "-o",
                out,
            ];
            let out = if windows {
                tiny_windows(&run, &args)
            } else {
                run.credit(args)
            };
            assert!(
                out.status.success(),
                "{name}: {}",
                crate::util::stderr(&out)
            );
        }
        let (a, b) = (
            std::fs::read_to_string(run.path("whole.jsonl")).unwrap(),
            std::fs::read_to_string(run.path("small.jsonl")).unwrap(),
        );
        assert_eq!(a, b, "{name}: advantages");
    }
    // The interleaved log is the sokoban log in another row order: the same numbers per row, up
    // to the last bits of sums taken over the rows in another order.
    let per_row = |name: &str| {
        let input = fixture(name);
        let out = run.path("o.jsonl");
        let s = run.credit([
            "advantages",
            input.to_str().unwrap(),
            "--methods",
            "all",
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(s.status.success());
        let mut rows = crate::util::read_jsonl(&out);
        rows.sort_by_key(|r| {
            (
                r["traj_id"].as_str().unwrap().to_string(),
                r["step"].as_i64(),
            )
        });
        rows
    };
    let (plain, interleaved) = (
        per_row("real/sokoban.jsonl"),
        per_row("formats/sokoban.interleaved.jsonl"),
    );
    assert_eq!(plain.len(), interleaved.len());
    for (a, b) in plain.iter().zip(&interleaved) {
        for (key, x) in a.as_object().unwrap() {
            match (x.as_f64(), b[key].as_f64()) {
                (Some(x), Some(y)) => {
                    assert!((x - y).abs() <= 1e-9 * (1.0 + x.abs()), "{key}: {x} vs {y}")
                }
                _ => assert_eq!(x, &b[key], "{key}"),
            }
        }
    }
}

/// `--similarity`: the cluster counts and singleton shares at each threshold are those of
/// verl-agent's own `build_step_group` (the step-group sizes in the reference files), and nothing
/// is computed without the flag.
#[test]
fn similarity_table_matches_verl_agent_groups() {
    let run = Run::new();
    let mut expected: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for name in ["textworld", "sokoban"] {
        let rows = read_jsonl(&fixture(&format!(
            "reference/{name}.gigpo-similarity-ref.jsonl"
        )));
        for tag in ["sim095", "sim090", "sim080"] {
            let groups: BTreeSet<String> = rows
                .iter()
                .map(|r| r[format!("{tag}_group")].to_string())
                .collect();
            let singletons = rows
                .iter()
                .filter(|r| r[format!("{tag}_group_size")] == 1)
                .count();
            let e = expected.entry(tag.to_string()).or_default();
            e.0 += groups.len();
            e.1 += singletons;
            e.2 += rows.len();
        }
    }
    let out = run.credit([
        "analyze",
        fixture("real").to_str().unwrap(),
        "--similarity=0.95,0.9,0.8",
        "--format",
        "json",
    ]);
    let got = json(&out);
    let table = got["step_groups"]["similarity"].as_array().unwrap();
    assert_eq!(table.len(), 3);
    for (row, (tag, theta)) in
        table
            .iter()
            .zip([("sim095", 0.95), ("sim090", 0.9), ("sim080", 0.8)])
    {
        let (clusters, singletons, steps) = expected[tag];
        assert_eq!(f(&row["threshold"]), theta);
        assert_eq!(row["overall"]["clusters"], clusters, "{tag}");
        assert_eq!(row["overall"]["steps"], steps, "{tag}");
        let pct = f(&row["overall"]["pct_steps"][0]);
        assert!(
            (pct - 100.0 * singletons as f64 / steps as f64).abs() < 1e-9,
            "{tag}: {pct}% singleton steps, reference {singletons} of {steps}"
        );
    }
    let plain = json(&run.credit([
        "analyze",
        fixture("real").to_str().unwrap(),
        "--format",
        "json",
    ]));
    assert_eq!(plain["step_groups"]["similarity"], serde_json::json!([]));
    let bad = run.credit([
        "analyze",
        fixture("real").to_str().unwrap(),
        "--similarity=1",
    ]);
    assert_eq!(bad.status.code(), Some(2));
}

/// Flags pasted from the other commands (issue #55): `--preset` and `--set hisr.…` choose how the
/// segment statistics segment the logs; `--methods` is refused, pointing at `compare`.
#[test]
fn analyze_takes_the_method_flags_and_refuses_methods() {
    let run = Run::new();
    let logs = fixture("real").display().to_string();
    let o = run.credit([
        "analyze",
        &logs,
        "--preset",
        "verl",
        "--set",
        "hisr.segments=rule",
    ]);
    assert!(o.status.success(), "{}", crate::util::stderr(&o));
    let o = run.credit(["analyze", &logs, "--methods", "grpo,gigpo"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        crate::util::stderr(&o).contains("`credit compare --methods grpo,gigpo` compares them"),
        "{}",
        crate::util::stderr(&o)
    );
}

/// No path given outside a project (issue #55): the error says no logs were named and how to name
/// them, instead of `logs: no such file`.
#[test]
fn no_logs_named_outside_a_project_says_how_to_name_them() {
    let run = Run::new();
    let o = run.credit(["analyze"]);
    assert_eq!(o.status.code(), Some(2));
    let err = crate::util::stderr(&o);
    assert!(
        err.contains("no logs named, and ./logs (read when none are) does not exist"),
        "{err}"
    );
}

/// Counts are written in the singular where they are one (`1 file`, `0 groups`, never
/// `group(s)`), and a long run's per-iteration lines are the first and last few with how many
/// were left out.
#[test]
fn counts_read_as_words_and_a_long_run_stays_a_screen() {
    let run = Run::new();
    let out = run.credit(["analyze", fixture("real/textworld.jsonl").to_str().unwrap()]);
    assert!(stdout(&out).starts_with("1 file, 404 rows, 3 groups, 24 trajectories\ncolumns: "));
    assert!(stdout(&out).contains("; 0 groups with a single rollout\n"));
    let mut log = String::new();
    for iteration in 0..300 {
        for traj in 0..2 {
            let reward = (iteration + traj) % 2;
            for step in 0..2 {
                log.push_str(&format!(
                    "{{\"iteration\": {iteration}, \"group_id\": \"g\", \"traj_id\": \"t{iteration}-{traj}\", \"step\": {step}, \"obs\": \"s{step}\", \"reward\": {}}}\n",
                    if step == 1 { reward } else { 0 }
                ));
            }
        }
    }
    std::fs::write(run.path("long.jsonl"), log).unwrap();
    let out = run.credit(["analyze", "long.jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("1 file, 1200 rows, 300 iterations, 300 groups, 600 trajectories\n"),
        "{text}"
    );
    assert!(
        text.contains("… 290 more iterations (all of them: --format json)"),
        "{text}"
    );
    assert!(!text.contains("\n    150 "), "{text}");
    assert!(text.lines().count() < 60, "{text}");
}
