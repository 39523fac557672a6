//! `--against METHOD` (issue #53): every method scored against a reference, in `compare` and
//! `report`; the `oracle` method and a logged `oracle_advantage`.

use crate::util::{f, fixture, json, read_jsonl, stderr, stdout, Run};
use std::collections::{BTreeMap, BTreeSet};

const SCORES: [&str; 4] = ["spearman", "sign_accuracy", "leakage", "gradient_cosine"];

fn compare_json(run: &Run, log: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["compare", log, "--format", "json"];
    args.extend(extra);
    json(&run.credit(&args))
}

/// The share of rows whose (step position, state) holds ≥ 2 distinct actions, counted from the
/// raw log (no `iteration`: the whole log is one batch; a state is `anchor_obs`).
fn coverage_of(rows: &[serde_json::Value]) -> f64 {
    let mut steps: BTreeMap<&str, Vec<(i64, usize)>> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let traj = row["traj_uid"].as_str().unwrap();
        steps
            .entry(traj)
            .or_default()
            .push((row["step"].as_i64().unwrap(), i));
    }
    let mut position = vec![0usize; rows.len()];
    for list in steps.values_mut() {
        list.sort();
        for (t, &(_, i)) in list.iter().enumerate() {
            position[i] = t;
        }
    }
    let mut actions: BTreeMap<(usize, &str), BTreeSet<&str>> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let key = (position[i], row["anchor_obs"].as_str().unwrap());
        actions
            .entry(key)
            .or_default()
            .insert(row["action"].as_str().unwrap());
    }
    let covered = (0..rows.len())
        .filter(|&i| actions[&(position[i], rows[i]["anchor_obs"].as_str().unwrap())].len() >= 2)
        .count();
    covered as f64 / rows.len() as f64
}

#[test]
fn compare_against_oracle_scores_every_other_method() {
    let run = Run::new();
    for name in ["real/sokoban.jsonl", "real/textworld.jsonl"] {
        let log = fixture(name);
        let c = compare_json(
            &run,
            log.to_str().unwrap(),
            &["--methods", "grpo,gigpo", "--against", "oracle"],
        );
        let a = &c["against"];
        assert_eq!(a["method"], "oracle", "{name}");
        // The reference runs beside the methods, and is not scored against itself.
        assert_eq!(c["methods"], serde_json::json!(["grpo", "gigpo", "oracle"]));
        let scored: Vec<&String> = a["scores"].as_object().unwrap().keys().collect();
        assert_eq!(scored, ["gigpo", "grpo"], "{name}");
        let coverage = f(&a["coverage"]);
        assert!((0.0..=1.0).contains(&coverage), "{name}: {coverage}");
        let expected = coverage_of(&read_jsonl(&log));
        assert!(
            (coverage - expected).abs() < 1e-12,
            "{name}: coverage {coverage}, counted from the log {expected}"
        );
        for m in ["grpo", "gigpo"] {
            let s = &a["scores"][m];
            for score in SCORES {
                let x = f(&s[score]);
                let range = if matches!(score, "spearman" | "gradient_cosine") {
                    -1.0..=1.0
                } else {
                    0.0..=1.0
                };
                assert!(range.contains(&x), "{name} {m} {score} = {x}");
            }
        }
    }
}

#[test]
fn without_against_there_is_no_against_key() {
    let run = Run::new();
    let log = fixture("real/sokoban.jsonl");
    let c = compare_json(&run, log.to_str().unwrap(), &["--methods", "grpo,gigpo"]);
    assert!(c.get("against").is_none());
    assert_eq!(c["methods"], serde_json::json!(["grpo", "gigpo"]));
    let out = run.credit(["compare", log.to_str().unwrap(), "--methods", "grpo,gigpo"]);
    assert!(!stdout(&out).contains("against"), "{}", stdout(&out));
}

/// The textworld fixture with a simulator's ground truth equal to GiGPO's advantages (from
/// `credit advantages`, in input order).
fn log_with_truth(run: &Run, column: &str) -> std::path::PathBuf {
    let input = fixture("real/textworld.jsonl");
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "gigpo",
        "-o",
        "a.jsonl",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let adv = read_jsonl(&run.path("a.jsonl"));
    let mut rows = read_jsonl(&input);
    assert_eq!(adv.len(), rows.len());
    let mut text = String::new();
    for (row, a) in rows.iter_mut().zip(&adv) {
        row[column] = a["adv_gigpo"].clone();
        text.push_str(&serde_json::to_string(row).unwrap());
        text.push('\n');
    }
    let path = run.path("truth.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_logged_ground_truth_equal_to_a_method_scores_it_perfectly() {
    let run = Run::new();
    for column in ["oracle_advantage", "true_advantage"] {
        let log = log_with_truth(&run, column);
        let c = compare_json(
            &run,
            log.to_str().unwrap(),
            &["--methods", "grpo,gigpo", "--against", "oracle"],
        );
        let gigpo = &c["against"]["scores"]["gigpo"];
        assert!((f(&gigpo["spearman"]) - 1.0).abs() < 1e-12, "{gigpo}");
        assert_eq!(f(&gigpo["sign_accuracy"]), 1.0, "{gigpo}");
        assert_eq!(f(&gigpo["leakage"]), 0.0, "{gigpo}");
        assert!(
            (f(&gigpo["gradient_cosine"]) - 1.0).abs() < 1e-12,
            "{gigpo}"
        );
        // GRPO is not GiGPO: it ranks the steps otherwise.
        let grpo = &c["against"]["scores"]["grpo"];
        assert!(f(&grpo["spearman"]) < 0.99, "{grpo}");
        // Coverage is still counted from the keys, not from the logged column.
        let expected = coverage_of(&read_jsonl(&fixture("real/textworld.jsonl")));
        assert!((f(&c["against"]["coverage"]) - expected).abs() < 1e-12);
        let notes = c["metadata"]["notes"].to_string();
        assert!(notes.contains("logged `oracle_advantage`"), "{notes}");
    }
}

#[test]
fn compare_text_shows_the_scores_table() {
    let run = Run::new();
    let log = fixture("real/sokoban.jsonl");
    let out = run.credit([
        "compare",
        log.to_str().unwrap(),
        "--methods",
        "grpo,gigpo",
        "--against",
        "oracle",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let table = &text[text.find("against oracle (coverage ").expect(&text)..];
    assert!(
        table.contains("spearman  sign acc   leakage  grad cos"),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.trim_start().starts_with("gigpo ")),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.trim_start().starts_with("grpo ")),
        "{table}"
    );
}

#[test]
fn report_carries_the_scores_section_and_summary_key() {
    let run = Run::new();
    let log = fixture("real/textworld.jsonl");
    let out = run.credit([
        "report",
        log.to_str().unwrap(),
        "--methods",
        "grpo,gigpo",
        "--against",
        "oracle",
        "--explore-max",
        "2",
        "-o",
        "rep",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    let a = &summary["against"];
    assert_eq!(a["method"], "oracle");
    let coverage = f(&a["coverage"]);
    assert!((coverage - coverage_of(&read_jsonl(&log))).abs() < 1e-12);
    for m in ["grpo", "gigpo"] {
        for score in SCORES {
            assert!(a["scores"][m][score].is_number(), "{m} {score}: {a}");
        }
    }
    let figures: Vec<&str> = summary["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(figures.contains(&"against"), "{figures:?}");
    assert!(run.path("rep/figures/against.png").exists());
    let md = std::fs::read_to_string(run.path("rep/report.md")).unwrap();
    let section = &md[md.find("## Scores against oracle").expect("the section")..];
    assert!(section.contains("| method | Spearman ρ | sign accuracy | leakage | gradient cosine |"));
    assert!(section.contains("| gigpo |") && section.contains("| grpo |"));
    // The explorer colours by `oracle` as by any method.
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    assert!(html.contains(r#""methods":["grpo","gigpo","oracle"]"#));
    assert!(html.contains("<h2 id=\"against\">"), "no section heading");
}

#[test]
fn a_gate_on_a_score() {
    let run = Run::new();
    std::fs::write(
        run.path("rules.toml"),
        "[[rule]]\nkey = \"against.scores.gigpo.sign_accuracy\"\nmin = 1.01\n",
    )
    .unwrap();
    let log = fixture("real/textworld.jsonl");
    let out = run.credit([
        "report",
        log.to_str().unwrap(),
        "--methods",
        "gigpo",
        "--against",
        "oracle",
        "--explore-max",
        "0",
        "--check",
        "rules.toml",
        "-o",
        "rep",
    ]);
    // A sign accuracy is at most 1: the rule fails, and says so by the exit code.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[test]
fn an_unknown_reference_lists_the_methods() {
    let run = Run::new();
    let log = fixture("real/sokoban.jsonl");
    for command in ["compare", "report"] {
        let mut args = vec![command, log.to_str().unwrap(), "--against", "nosuch"];
        if command == "report" {
            args.extend(["-o", "rep"]);
        }
        let out = run.credit(&args);
        assert_eq!(out.status.code(), Some(2), "{command}");
        let err = stderr(&out);
        assert!(err.contains("--against: unknown method `nosuch`"), "{err}");
        assert!(err.contains("gigpo") && err.contains("oracle"), "{err}");
        assert!(!run.path("rep").exists());
    }
}

#[test]
fn oracle_gamma_is_set_by_name() {
    let run = Run::new();
    let log = fixture("real/textworld.jsonl");
    let gamma = |extra: &[&str]| {
        let mut args = vec!["--methods", "oracle"];
        args.extend(extra);
        let c = compare_json(&run, log.to_str().unwrap(), &args);
        f(&c["metadata"]["params"]["oracle"]["gamma"])
    };
    assert_eq!(gamma(&[]), 1.0);
    assert_eq!(gamma(&["--set", "oracle.gamma=0.5"]), 0.5);
    // The step returns' --gamma leaves the reference alone.
    assert_eq!(gamma(&["--gamma", "0.5"]), 1.0);
    let out = run.credit([
        "compare",
        log.to_str().unwrap(),
        "--methods",
        "oracle",
        "--set",
        "oracle.gamma=2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`oracle.gamma` = 2 is out of range [0, 1]"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn spa_s_weighting_note_fires_on_short_trajectories() {
    // Trajectories of 1, 2 and 3 steps: two of them short.
    let run = Run::new();
    let rows = [
        ("a", 0, "S", "x", 1.0),
        ("b", 0, "S", "y", 0.0),
        ("b", 1, "T", "x", 0.0),
        ("c", 0, "S", "x", 0.0),
        ("c", 1, "T", "y", 0.0),
        ("c", 2, "U", "x", 1.0),
    ];
    let text: String = rows
        .iter()
        .map(|(traj, step, obs, action, reward)| {
            let row = serde_json::json!({"group_id": "g", "traj_id": traj, "step": step,
                "obs": obs, "action": action, "reward": reward});
            format!("{row}\n")
        })
        .collect();
    std::fs::write(run.path("short.jsonl"), text).unwrap();
    let notes = |extra: &[&str]| {
        let mut args = vec!["--methods", "grpo,spa", "--set", "spa.variant=mean"];
        args.extend(extra);
        let c = compare_json(&run, "short.jsonl", &args);
        c["metadata"]["notes"].to_string()
    };
    let fired = notes(&["--preset", "verl", "--against", "oracle"]);
    assert!(
        fired.contains("spa: 2 of 3 trajectories have 1–2 steps"),
        "{fired}"
    );
    // Not without --against, nor without the weighting (the paper's preset).
    assert!(!notes(&["--preset", "verl"]).contains("1–2 steps"));
    assert!(!notes(&["--against", "oracle"]).contains("1–2 steps"));
}

#[test]
fn the_readme_s_example_is_what_the_command_prints() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let command =
        "$ credit compare fixtures/real/textworld.jsonl --methods grpo,gigpo,hgpo --against oracle";
    let start = readme.find(command).expect("the README's example");
    let block = &readme[start..];
    let block = &block[..block.find("```").unwrap()];
    let args: Vec<&str> = command.split_whitespace().skip(2).collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(&args)
        .current_dir(repo)
        .output()
        .unwrap();
    let printed = stdout(&out);
    for line in block.lines().skip(1).filter(|l| *l != "…" && !l.is_empty()) {
        assert!(
            printed.lines().any(|p| p == line),
            "README line {line:?} not printed:\n{printed}"
        );
    }
}
