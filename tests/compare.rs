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
fn help_shows_each_commands_default_methods() {
    let run = Run::new();
    for (command, default) in [
        ("advantages", "else all]"),
        ("compare", "else grpo,gigpo,proxmo]"),
        ("report", "else grpo,gigpo,proxmo,graphgpo,mgr]"),
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
