//! `credit report`: the structure of the three documents, no external references, a stable JSON
//! schema, and the threshold exit codes.

use crate::util::{fixture, json, stderr, Run};

const FIGURES: &[&str] = &[
    "success",
    "lengths",
    "step_groups",
    "graph_distance",
    "distributions",
    "scatter",
    "by_position",
    "credit_table",
    "psc_weight",
];

fn report(run: &Run, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "report".to_string(),
        fixture("real/textworld.jsonl").display().to_string(),
        "--out".into(),
        "rep".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    run.credit(&args)
}

#[test]
fn report_has_every_section_and_figure_and_no_external_references() {
    let run = Run::new();
    let out = report(&run, &["--format", "json"]);
    let v = json(&out);
    assert_eq!(v["figures"], FIGURES.len());
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    for section in [
        "id=\"logs\"",
        "id=\"compare\"",
        "id=\"figures\"",
        "id=\"parameters\"",
    ] {
        assert!(html.contains(section), "report.html lacks {section}");
    }
    for id in FIGURES {
        assert!(
            html.contains(&format!("id=\"fig-{id}\"")),
            "report.html lacks figure {id}"
        );
        assert!(
            run.path(&format!("rep/figures/{id}.png")).exists(),
            "no {id}.png"
        );
        assert!(
            run.path(&format!("rep/figures/{id}.svg")).exists(),
            "no {id}.svg"
        );
    }
    assert_eq!(
        html.matches("<svg").count(),
        FIGURES.len(),
        "every figure is inline SVG"
    );
    assert_eq!(
        html.matches("<figcaption>").count(),
        FIGURES.len(),
        "every figure has a caption"
    );
    // Self-contained: no scripts, stylesheets, external images or fonts.
    for forbidden in [
        "<script",
        "<link",
        "<img",
        "@import",
        "url(http",
        "src=\"http",
        "href=\"http",
    ] {
        assert!(
            !html.contains(forbidden),
            "report.html contains {forbidden}"
        );
    }
    let md = std::fs::read_to_string(run.path("rep/report.md")).unwrap();
    for id in FIGURES {
        assert!(
            md.contains(&format!("(figures/{id}.png)")),
            "report.md lacks {id}"
        );
    }
    assert!(md.contains("Invalid actions that receive positive credit"));
}

#[test]
fn summary_json_schema_is_stable() {
    let run = Run::new();
    assert!(report(&run, &[]).status.success());
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    let mut keys: Vec<&String> = s.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["analyze", "checks", "compare", "figures", "headline", "metadata", "schema"]
    );
    assert_eq!(s["schema"], "credit-report/1");
    let mut headline: Vec<&String> = s["headline"].as_object().unwrap().keys().collect();
    headline.sort();
    assert_eq!(
        headline,
        [
            "degenerate_group_share",
            "degenerate_step_share",
            "graph_non_progress_share_in_successes",
            "graph_progress_share_in_failures",
            "groups",
            "invalid_action_rate",
            "invalid_positive_share",
            "invalid_positive_share_in_success",
            "rows",
            "singleton_cluster_share",
            "singleton_step_share",
            "success_rate",
            "trajectories"
        ]
    );
    assert_eq!(s["headline"]["rows"], 404);
    // The headline repeats numbers from the analyze section, in fractions.
    let pct = s["analyze"]["step_groups"]["overall"]["pct_steps"][0]
        .as_f64()
        .unwrap();
    assert!((s["headline"]["singleton_step_share"].as_f64().unwrap() - pct / 100.0).abs() < 1e-12);
    assert_eq!(s["headline"]["invalid_positive_share"]["mgr"], 0.0);
    assert_eq!(s["metadata"]["preset"], "paper");
    assert_eq!(s["figures"].as_array().unwrap().len(), FIGURES.len());
}

#[test]
fn thresholds_set_the_exit_code() {
    let run = Run::new();
    std::fs::write(
        run.path("pass.toml"),
        "[[rule]]\nkey = \"headline.invalid_positive_share.mgr\"\nmax = 0.0\n[[rule]]\nkey = \"headline.degenerate_group_share\"\nmax = 0.5\n",
    )
    .unwrap();
    let out = report(&run, &["--check", "pass.toml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // GRPO credits some invalid actions positively on this file (29.6%): a max of 0 fails.
    std::fs::write(run.path("fail.toml"), "[[rule]]\nname = \"GRPO never rewards invalid actions\"\nkey = \"headline.invalid_positive_share.grpo\"\nmax = 0.0\n").unwrap();
    let out = report(
        &run,
        &["--check", "fail.toml", "--baseline", "rep/summary.json"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    assert!(
        html.contains("checks failed")
            && html.contains("GRPO never rewards invalid actions")
            && html.contains("<th>baseline</th>")
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["checks"]["passed"], false);
    assert_eq!(s["checks"]["rules"][0]["passed"], false);
    assert!(s["checks"]["rules"][0]["baseline"].is_number());

    std::fs::write(
        run.path("typo.toml"),
        "[[rule]]\nkey = \"headline.nope\"\nmax = 1\n",
    )
    .unwrap();
    let out = report(&run, &["--check", "typo.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("headline.nope"));
}

#[test]
fn analyze_and_compare_draw_their_plots() {
    let run = Run::new();
    let input = fixture("real/sokoban.jsonl");
    let out = run.credit(["analyze", input.to_str().unwrap(), "--plots", "a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for id in ["success", "lengths", "step_groups", "graph_distance"] {
        assert!(
            run.path(&format!("a/{id}.png")).exists() && run.path(&format!("a/{id}.svg")).exists(),
            "{id}"
        );
    }
    let out = run.credit([
        "compare",
        input.to_str().unwrap(),
        "--methods",
        "grpo,proxmo",
        "--plots",
        "c",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    for id in [
        "distributions",
        "scatter",
        "by_position",
        "credit_table",
        "psc_weight",
    ] {
        assert!(run.path(&format!("c/{id}.png")).exists(), "{id}");
    }
}
