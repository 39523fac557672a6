//! `credit graph`: DOT for the chosen groups, labelled by distance, with a legend; SVG and PNG when
//! Graphviz is installed (CI installs it).

use crate::util::{fixture, json, stderr, Run};

#[test]
fn writes_dot_and_renders_when_graphviz_exists() {
    let run = Run::new();
    let out = run.credit([
        "graph",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--top",
        "2",
        "--out",
        "graphs",
        "--format",
        "json",
    ]);
    let v = json(&out);
    let written: Vec<String> = v["written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    let dots: Vec<&String> = written.iter().filter(|p| p.ends_with(".dot")).collect();
    assert_eq!(dots.len(), 2, "{written:?}");
    let text = std::fs::read_to_string(run.path(dots[0])).unwrap();
    assert!(text.starts_with("digraph credit {"));
    assert!(
        text.contains("SUCCESS")
            && text.contains("d=0")
            && text.contains("legend [shape=plaintext")
            && text.contains("adv_graphgpo")
    );
    let has_dot = std::process::Command::new("dot")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    // CI installs Graphviz and sets this, so the rendering is never skipped there.
    assert!(
        has_dot || std::env::var_os("CREDIT_REQUIRE_GRAPHVIZ").is_none(),
        "Graphviz `dot` is required here"
    );
    if has_dot {
        for ext in ["svg", "png"] {
            let path = run.path(&dots[0].replace(".dot", &format!(".{ext}")));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(bytes.len() > 1000, "{} is too small", path.display());
        }
        assert!(v["note"].is_null());
    } else {
        assert!(v["note"].as_str().unwrap().contains("Graphviz"));
    }
}

#[test]
fn unknown_group_is_an_error() {
    let run = Run::new();
    let out = run.credit([
        "graph",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--group",
        "nope",
        "--out",
        "g",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no group `nope`"));
}
