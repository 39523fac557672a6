//! `credit report`: the structure of the three documents, no external references, a stable JSON
//! schema, and the threshold exit codes.

use crate::util::{f, fixture, json, stderr, Run};

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

/// The report.html before its explorer, whose script and state graphs hold `<svg` too.
fn figures_part(html: &str) -> &str {
    &html[..html.find("<h2 id=\"explore\">").unwrap_or(html.len())]
}

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
        figures_part(&html).matches("<svg").count(),
        FIGURES.len(),
        "every figure is inline SVG"
    );
    assert_eq!(
        html.matches("<figcaption>").count(),
        FIGURES.len(),
        "every figure has a caption"
    );
    // Self-contained: no external scripts, stylesheets, images or fonts; the only scripts are the
    // explorer's data and its inline code (tests/explorer.rs).
    assert!(html.contains("<script type=\"application/json\" id=\"credit-explorer-data\">"));
    for forbidden in [
        "<script src",
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
    // report.md carries report.html's sections, the comparison among them.
    assert!(
        md.contains("## How the methods credit the same steps")
            && md.contains("invalid credited +")
    );
    // No `progress` or `segment` columns in these logs: no section, no figures for them.
    assert!(!html.contains("id=\"progress\"") && !md.contains("Progress and segments"));
    for id in PROGRESS_FIGURES {
        assert!(!run.path(&format!("rep/figures/{id}.png")).exists(), "{id}");
    }
}

const PROGRESS_FIGURES: &[&str] = &[
    "progress_by_position",
    "progress_cumulative",
    "progress_calibration",
    "segment_turns",
    "segment_reward_share",
];

fn assert_png(path: &std::path::Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a drawn PNG",
        path.display()
    );
}

#[test]
fn progress_and_segments_get_their_section_figures_and_headline() {
    let run = Run::new();
    let input = fixture("spec/progress-segments.jsonl");
    let out = run.credit([
        "report",
        input.to_str().unwrap(),
        "--out",
        "rep",
        "--format",
        "json",
    ]);
    assert_eq!(
        json(&out)["figures"],
        FIGURES.len() + PROGRESS_FIGURES.len()
    );
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    let md = std::fs::read_to_string(run.path("rep/report.md")).unwrap();
    let section = html
        .find("id=\"progress\"")
        .expect("report.html has no progress section");
    let md_section = md
        .find("## Progress and segments")
        .expect("report.md has no progress section");
    for id in PROGRESS_FIGURES {
        assert_png(&run.path(&format!("rep/figures/{id}.png")));
        let at = html
            .find(&format!("id=\"fig-{id}\""))
            .unwrap_or_else(|| panic!("no {id}"));
        assert!(at > section, "{id} is outside the section");
        assert!(
            html[at..]
                .split("</figure>")
                .next()
                .unwrap()
                .contains("<svg"),
            "{id}: no inline SVG"
        );
        let md_at = md
            .find(&format!("(figures/{id}.png)"))
            .unwrap_or_else(|| panic!("{id}"));
        assert!(md_at > md_section, "{id} is outside the Markdown section");
    }
    assert_eq!(
        figures_part(&html).matches("<svg").count(),
        FIGURES.len() + PROGRESS_FIGURES.len()
    );

    // By hand from the fixture (fixtures/README.md): R̂ = Σ ĉ_t per trajectory a..h is
    // [0.95, 1.05, 0.2, 0.9, 0.05, 0.9, 0.35, 0.05] against R = [1, 1, 0, 1, 0, 1, 0, 0].
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    let h = &s["headline"];
    let close = |key: &str, want: f64, tol: f64| {
        let got = f(&h[key]);
        assert!((got - want).abs() <= tol, "{key}: {got} vs {want}");
    };
    // Squared errors 0.0025 + 0.0025 + 0.04 + 0.01 + 0.0025 + 0.01 + 0.1225 + 0.0025 = 0.1925, / 8.
    close("progress_calibration_mse", 0.1925 / 8.0, 1e-12);
    // S_xy = 0.5 · (3.8 − 0.65) = 1.575, S_xx = 3.7925 − 8 · 0.55625² = 1.3171875, S_yy = 2.
    close(
        "progress_pearson",
        1.575 / (1.3171875f64 * 2.0).sqrt(),
        1e-9,
    );
    // Negative ĉ in successes: a's −0.05 and b's −0.10, of 5 + 6 + 4 + 5 = 20 steps.
    close("progress_negative_share_in_successes", 0.1, 1e-12);
    // r̂_first / Σ r̂: a 0.15, b 0.10, c 0.04/0.2, d 0.2, e 0.02/0.1, f 0.1, g 0.03/0.2, h 0.02/0.1.
    close("first_segment_share_before", 1.3 / 8.0, 1e-12);
    // z_k = exp((hindsight − policy)/(0.3 · n_tokens)) summed per segment, r̂_i·z_i normalised (L1),
    // computed in Python from the fixture's log-probs.
    close("first_segment_share_after", 0.204843, 1e-6);
    assert!(
        md.contains("| 16.2% → 20.5% |") && md.contains("| 10.0% (2 of 20) |"),
        "{md}"
    );
    assert!(html.contains("<td>0.0241</td>"));
}

#[test]
fn progress_headline_leaves_out_what_the_logs_cannot_give() {
    // spec/spa-hisr.jsonl: both trajectories succeed, so Pearson r of R̂ and R is undefined.
    let run = Run::new();
    let input = fixture("spec/spa-hisr.jsonl");
    let out = run.credit(["report", input.to_str().unwrap(), "--out", "rep"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    let h = &s["headline"];
    assert!(h.get("progress_pearson").is_none(), "{h}");
    // a: Σ ĉ = 0.95 against R = 1; b: Σ ĉ = 1.0 against R = 1: (0.0025 + 0) / 2.
    assert!((f(&h["progress_calibration_mse"]) - 0.00125).abs() < 1e-12);
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    assert!(html.contains("undefined (constant)"));
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
fn the_report_opens_with_its_parameters_and_contents_and_names_a_baseline_run_otherwise() {
    let run = Run::new();
    let out = report(&run, &["--preset", "verl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = report(&run, &["--baseline", "rep/summary.json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("no {s}"));
    // Contents, then the parameters, before any finding; no raw JSON at the end.
    assert!(at("<nav class=\"contents\"") < at("<h2 id=\"parameters\">Run with</h2>"));
    assert!(at("<h2 id=\"parameters\">") < at("<h2 id=\"logs\">"));
    assert!(
        html.contains("<li><a href=\"#compare\">How the methods credit the same steps</a></li>")
    );
    assert!(!html.contains("<pre>"));
    // Both runs' parameters, and a word on the preset that differs.
    assert!(html.contains("<th class=\"l\">this run</th><th class=\"l\">baseline</th>"));
    assert!(
        html.contains("The baseline ran with preset verl (this run paper)"),
        "{html}"
    );
    assert!(html.contains("invalid_penalty = 0.1") && html.contains("invalid_penalty = 0.0"));
    // A delta column beside the baseline's, in percentage points for shares.
    assert!(html.contains("<th>baseline</th><th>Δ</th>"));
    assert!(html.contains(" pp</td>"));
    let md = std::fs::read_to_string(run.path("rep/report.md")).unwrap();
    assert!(md.contains("- [Run with](#run-with)"), "{md}");
    // The agreement of pairs as a matrix: a row per method, a column per method.
    assert!(
        md.contains("|  | grpo | gigpo | proxmo | graphgpo | mgr |"),
        "{md}"
    );
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
            && html.contains("<th>Δ</th>")
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
fn single_turn_rules_on_step_groups_are_not_applicable() {
    // verl's single-turn dump: every rollout is one step, so the README's rule on singleton step
    // groups (1.0 > 0.4 there) neither passes nor fails; the other rules still decide.
    let run = Run::new();
    let out = run.credit(&[
        "report".to_string(),
        fixture("verl/with_uid").display().to_string(),
        "--preset".into(),
        "verl".into(),
        "--out".into(),
        "rep".into(),
        "--check".into(),
        fixture("thresholds.toml").display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // The result first (at a phone's width it must show without scrolling), why under the row.
    let lines: Vec<&str> = text.lines().collect();
    let rule = lines
        .iter()
        .position(|l| l.contains("`headline.singleton_step_share`"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(lines[rule].starts_with("  not applicable  "), "{text}");
    assert!(
        lines[rule + 1]
            .trim_start()
            .starts_with("single-turn logs: every rollout is one step"),
        "{text}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    let rules = s["checks"]["rules"].as_array().unwrap();
    assert_eq!(rules[0]["key"], "headline.singleton_step_share");
    // Out of the headline: no value beside the reason it means nothing.
    assert!(rules[0]["value"].is_null());
    assert!(rules[0]["passed"].is_null());
    assert!(rules[0]["not_applicable"].is_string());
    // "MGR never rewards an invalid action" no longer passes vacuously: no action is invalid
    // (no `valid` column), and MGR is not among the single-turn methods.
    assert_eq!(rules[1]["key"], "headline.invalid_positive_share.mgr");
    assert!(rules[1]["passed"].is_null());
    assert!(rules[1]["not_applicable"]
        .as_str()
        .unwrap()
        .contains("no action is invalid"));
    assert_eq!(rules[2]["passed"], true);
    assert_eq!(s["checks"]["passed"], true);
    let headline = &s["headline"];
    assert!(headline["not_applicable"]["headline.singleton_cluster_share"].is_string());
    for key in [
        "singleton_step_share",
        "singleton_cluster_share",
        "graph_progress_share_in_failures",
        "invalid_action_rate",
        "invalid_positive_share",
    ] {
        assert!(headline.get(key).is_none(), "{key} in the headline");
    }
    let md = std::fs::read_to_string(run.path("rep/report.md")).unwrap();
    assert!(md.contains("all checks passed (2 not applicable)"), "{md}");
    // The single-turn layout: which groups teach anything and rewards by group size, none of
    // the multi-turn figures; the headline has the zero-spread share instead of step groups.
    for figure in [
        "zero_std_groups",
        "reward_by_group_size",
        "success",
        "trends",
    ] {
        assert!(
            run.path(&format!("rep/figures/{figure}.png")).exists(),
            "{figure}"
        );
    }
    for figure in [
        "lengths",
        "step_groups",
        "graph_distance",
        "by_position",
        "credit_table",
    ] {
        assert!(
            !run.path(&format!("rep/figures/{figure}.png")).exists(),
            "{figure}"
        );
    }
    // 2 of the 9 groups got the same score on every rollout (read off the fixture's `score`s:
    // an all-1 group in 2.jsonl, an all-0 group in 3.jsonl).
    assert!((f(&s["headline"]["zero_std_group_share"]) - 2.0 / 9.0).abs() < 1e-12);
    assert!(md.contains("groups whose rewards all equal (single-turn)"));
    assert!(!md.contains("steps in singleton step groups"));

    // Multi-turn logs have step groups: the same rule applies and is decided.
    let run = Run::new();
    let rules = fixture("thresholds.toml").display().to_string();
    let out = report(&run, &["--check", &rules]);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    assert!(
        s["checks"]["rules"][0]["passed"].is_boolean(),
        "{}",
        stderr(&out)
    );
    assert!(s["headline"].get("not_applicable").is_none());
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
    for id in PROGRESS_FIGURES {
        assert!(!run.path(&format!("a/{id}.png")).exists(), "{id}");
    }
    let progress = fixture("spec/progress-segments.jsonl");
    let out = run.credit(["analyze", progress.to_str().unwrap(), "--plots", "p"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for id in PROGRESS_FIGURES {
        assert_png(&run.path(&format!("p/{id}.png")));
        let svg = std::fs::read_to_string(run.path(&format!("p/{id}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"), "{id}.svg");
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

#[test]
fn a_rule_on_the_logged_difference_holds_the_trainer_to_the_reference() {
    let run = Run::new();
    // verl-agent's GiGPO output logged as `advantages`, one row of it off by 0.5.
    let path = crate::compare::with_reference_gigpo(&run, "logged.jsonl", |rows| {
        rows[10]["advantages"] = (f(&rows[10]["advantages"]) + 0.5).into();
    });
    std::fs::write(
        run.path("gate.toml"),
        "[[rule]]\nkey = \"headline.logged_max_abs_diff.gigpo\"\nmax = 1e-4\n",
    )
    .unwrap();
    let out = run.credit([
        "report",
        &path,
        "--methods",
        "logged,gigpo",
        "--preset",
        "verl",
        "--explore-max",
        "0",
        "--out",
        "rep",
        "--check",
        "gate.toml",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("rep/summary.json")).unwrap())
            .unwrap();
    let diff = f(&s["headline"]["logged_max_abs_diff"]["gigpo"]);
    assert!((diff - 0.5).abs() < 1e-5, "{diff}");
    let first = &s["compare"]["logged"][0]["first"][0]["location"];
    assert_eq!(first.as_str().unwrap(), format!("{path}:11"));
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    assert!(html.contains("adv_logged") || html.contains("logged"));
}

#[test]
fn the_report_says_what_the_trainer_ran() {
    // verl-agent's GRPO (`grpo_cross_steps`) logged as `advantages` and held to GiGPO: the
    // section names GRPO under the verl preset as the trainer's configuration, and the explorer
    // picks the groups where logged departs.
    let run = Run::new();
    let path = crate::compare::with_reference(
        &run,
        "grpo.jsonl",
        "textworld.ref-pen01.jsonl",
        "grpo_cross_steps",
        |_| {},
    );
    let out = run.credit([
        "report",
        &path,
        "--methods",
        "logged,gigpo",
        "--preset",
        "verl",
        "--explore-max",
        "1",
        "--out",
        "rep",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = std::fs::read_to_string(run.path("rep/report.md")).unwrap();
    let section = &md[md.find("## Trainer vs reference").expect("the section")..];
    assert!(
        section.contains("configuration: logged = grpo, preset verl"),
        "{section}"
    );
    assert!(
        section.contains(&format!("{path}:1  trajectory")),
        "{section}"
    );
    let html = std::fs::read_to_string(run.path("rep/report.html")).unwrap();
    assert!(html.contains("Trainer vs reference"));
    assert!(html.contains("logged departs from gigpo"));
    assert!(html.contains("\"departs\":[\"gigpo\"]"));
}
