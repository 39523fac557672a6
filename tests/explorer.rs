//! `credit report`'s explorer: the embedded data is valid JSON with no raw `<`, bounded by
//! `--explore-max`, holds the named group, the same advantages and parts as `credit advantages`
//! and graph nodes that exist in its SVG; the choice does not depend on the window size; and the
//! per-iteration trends figure appears where the logs have iterations.

use crate::util::{fixture, json, read_jsonl, stderr, Run};
use serde_json::Value;
use std::collections::HashMap;

const METHODS: &str = "grpo,gigpo,proxmo,graphgpo,mgr";
const OPEN: &str = "<script type=\"application/json\" id=\"credit-explorer-data\">";

/// The explorer's data in a report.html, parsed (serde_json reads the `\u003c` escapes back).
fn explorer_data(html: &str) -> Value {
    let start = html
        .find(OPEN)
        .expect("report.html embeds the explorer's data")
        + OPEN.len();
    let text = &html[start..start + html[start..].find("</script>").unwrap()];
    assert!(!text.contains('<'), "a raw `<` in the explorer's data");
    serde_json::from_str(text).expect("the explorer's data is JSON")
}

/// The same number (or both null), whichever way each writer spells it.
fn same(shown: &Value, written: &Value, what: &str) {
    assert_eq!(
        shown.as_f64(),
        written.as_f64(),
        "{what}: {shown} vs {written}"
    );
    assert!(shown.is_number() || shown.is_null(), "{what}: {shown}");
}

fn report(run: &Run, out: &str, extra: &[&str]) -> (String, Value) {
    let mut args = vec![
        "report".to_string(),
        fixture("real").display().to_string(),
        "--preset".into(),
        "verl".into(),
        "--methods".into(),
        METHODS.into(),
        "--out".into(),
        out.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let output = run.credit(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let html = std::fs::read_to_string(run.path(&format!("{out}/report.html"))).unwrap();
    let data = explorer_data(&html);
    (html, data)
}

#[test]
fn report_embeds_the_chosen_groups_with_the_advantages_credit_advantages_writes() {
    let run = Run::new();
    let (html, data) = report(
        &run,
        "rep",
        &["--explore", "sokoban-easy-seed6", "--explore-max", "5"],
    );

    // The page's parts in the order explorer.js expects, heading outside the container.
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    let order = [
        at("<h2 id=\"explore\">"),
        at("<style>/* credit report explorer"),
        at(OPEN),
        at("<div id=\"explorer\"></div>"),
        at("<script>/* credit report explorer"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert!(html.contains("href=\"#explore\""));

    let methods: Vec<&str> = METHODS.split(',').collect();
    assert_eq!(data["methods"], serde_json::json!(methods));
    assert_eq!(data["default_method"], "graphgpo");
    for m in &methods {
        assert!(data["scale"][m].as_f64().unwrap() > 0.0, "scale of {m}");
    }
    let groups = data["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 5, "--explore-max 5 on 11 groups");
    assert_eq!(groups[0]["id"], "sokoban-easy-seed6");
    assert!(groups[0]["why"]
        .as_str()
        .unwrap()
        .contains("named with --explore"));
    let mut ids: Vec<&str> = groups.iter().map(|g| g["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), groups.len(), "a group is embedded once");
    for reason in [
        "methods disagree",
        "singleton-heavy",
        "failed, yet progress",
    ] {
        assert!(
            groups
                .iter()
                .any(|g| g["why"].as_str().unwrap().contains(reason)),
            "no group chosen for `{reason}`"
        );
    }

    // Every embedded step against `credit advantages` on the same logs and methods.
    let out = run.credit([
        "advantages",
        fixture("real").to_str().unwrap(),
        "--preset",
        "verl",
        "--methods",
        METHODS,
        "-o",
        "adv.jsonl",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: HashMap<(String, i64), Value> = read_jsonl(&run.path("adv.jsonl"))
        .into_iter()
        .map(|r| {
            let key = (
                r["traj_id"].as_str().unwrap().to_string(),
                r["step"].as_i64().unwrap(),
            );
            (key, r)
        })
        .collect();
    let graphviz = std::process::Command::new("dot")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    // The task is TextWorld's `game`; the Sokoban logs have none.
    let games: HashMap<String, String> = read_jsonl(&fixture("real/textworld.jsonl"))
        .into_iter()
        .map(|r| {
            let game = r["game"].as_str().unwrap().to_string();
            (r["traj_uid"].as_str().unwrap().to_string(), game)
        })
        .collect();
    let mut steps = 0;
    for g in groups {
        let rate = g["success_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&rate));
        assert!(g["iteration"].is_null(), "no iterations in these logs");
        let svg = &g["svg"];
        assert_eq!(svg.is_string(), graphviz, "svg only with Graphviz");
        for t in g["trajectories"].as_array().unwrap() {
            let traj_steps = t["steps"].as_array().unwrap();
            assert_eq!(t["length"], traj_steps.len());
            for s in traj_steps {
                let row = &rows[&(
                    t["id"].as_str().unwrap().to_string(),
                    s["step"].as_i64().unwrap(),
                )];
                assert_eq!(row["group_id"], g["id"]);
                assert_eq!(
                    games.get(t["id"].as_str().unwrap()).map(String::as_str),
                    g["task"].as_str()
                );
                for m in &methods {
                    same(&s["adv"][m], &row[format!("adv_{m}")], &format!("adv_{m}"));
                    for (part, value) in s["parts"][m].as_object().into_iter().flatten() {
                        same(value, &row[format!("{m}_{part}")], &format!("{m}_{part}"));
                    }
                }
                assert!(s["parts"]["gigpo"]["step"].is_number());
                assert!(s["action"].is_string() && s["obs"].is_string());
                let node = s["node"].as_str().unwrap();
                if let Some(svg) = svg.as_str() {
                    assert!(svg.starts_with("<svg"));
                    assert!(
                        svg.contains(&format!("<g id=\"{node}\" class=\"node\">")),
                        "node {node} is not in the graph"
                    );
                }
                steps += 1;
            }
        }
    }
    assert!(steps > 100, "{steps} steps");

    // The Markdown points at the explorer; summary.json keeps its schema.
    let md = std::fs::read_to_string(run.path("rep/report.md")).unwrap();
    assert!(md.contains("[Explore 5 groups](report.html#explore)"));
}

#[test]
fn the_choice_does_not_depend_on_window_sizes() {
    let run = Run::new();
    let (_, whole) = report(&run, "a", &["--explore-max", "4"]);
    // Tiny windows: every group is its own window, so the floors and lists do the choosing.
    let mut args = vec![
        "report".to_string(),
        fixture("real").display().to_string(),
        "--preset".into(),
        "verl".into(),
        "--methods".into(),
        METHODS.into(),
        "--out".into(),
        "b".into(),
        "--explore-max".into(),
        "4".into(),
    ];
    args.push("--format".into());
    args.push("json".into());
    let out = run.credit_tiny_windows(&args);
    json(&out);
    let html = std::fs::read_to_string(run.path("b/report.html")).unwrap();
    assert_eq!(explorer_data(&html), whole);
    assert_eq!(whole["groups"].as_array().unwrap().len(), 4);
}

#[test]
fn explore_options_are_checked() {
    let run = Run::new();
    let input = fixture("real/textworld.jsonl");
    let out = run.credit([
        "report",
        input.to_str().unwrap(),
        "--out",
        "r",
        "--explore",
        "nope",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no group `nope`"), "{}", stderr(&out));
    assert!(!run.path("r").exists(), "nothing is written");

    // --explore-max 0: no explorer, no script.
    let out = run.credit([
        "report",
        input.to_str().unwrap(),
        "--out",
        "r",
        "--explore-max",
        "0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(run.path("r/report.html")).unwrap();
    assert!(!html.contains("<script") && !html.contains("id=\"explore\""));
}

#[test]
fn logs_with_iterations_get_the_trends_figure() {
    let run = Run::new();
    let input = fixture("verl/with_uid/rollout_data_dir");
    // One-step groups of four: no ranks, no singleton states, no failed group with progress; the
    // named group comes first, then the groups whose rewards differ (7 of 9).
    let out = run.credit([
        "report",
        input.to_str().unwrap(),
        "--out",
        "r",
        "--format",
        "json",
        "--explore",
        "6513270e-269e-4d37-b2a7-4de452e6b438",
    ]);
    json(&out);
    let html = std::fs::read_to_string(run.path("r/report.html")).unwrap();
    let section = html.find("id=\"trends\"").expect("no trends section");
    let figure = html.find("id=\"fig-trends\"").expect("no trends figure");
    assert!(section < figure && figure < html.find("id=\"figures\"").unwrap());
    let png = std::fs::read(run.path("r/figures/trends.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let md = std::fs::read_to_string(run.path("r/report.md")).unwrap();
    assert!(md.contains("## Per-iteration trends") && md.contains("(figures/trends.png)"));
    // The explorer says which iteration the group is from.
    let data = explorer_data(&html);
    assert_eq!(data["groups"].as_array().unwrap().len(), 7);
    assert_eq!(data["groups"][0]["iteration"], 1);
    assert!(data["groups"][0]["why"]
        .as_str()
        .unwrap()
        .starts_with("named with --explore; rewards differ"));
    assert_eq!(data["single_turn"], true);

    // Without `--explore`, the groups whose rewards differ, most spread first, each with its
    // prompt and no state graph.
    let out = run.credit(["report", input.to_str().unwrap(), "--out", "n"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(run.path("n/report.html")).unwrap();
    let data = explorer_data(&html);
    let groups = data["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 7);
    assert!(groups.iter().all(
        |g| g["why"].as_str().unwrap().starts_with("rewards differ: ")
            && g["prompt"].as_str().is_some_and(|p| p.contains("user"))
            && g["svg"].is_null()
    ));
    assert!(html.contains("<h2 id=\"explore\">Explore prompts and their responses</h2>"));

    // Logs without iterations: no trends.
    let out = run.credit([
        "report",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--out",
        "t",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!run.path("t/figures/trends.png").exists());
}
