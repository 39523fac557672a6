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

/// A Sokoban group's graph: the board banner said once in the title, not in every node; a state
/// with no path to success labelled alike in every group; one loop per node, its actions a line
/// each, so that their labels do not overlap.
#[test]
fn sokoban_nodes_show_their_boards_once_and_loops_apart() {
    let run = Run::new();
    let out = run.credit([
        "graph",
        fixture("real/sokoban.jsonl").to_str().unwrap(),
        "--group",
        "sokoban-easy-seed5",
        "--out",
        "g",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(run.path("g/group-sokoban-easy-seed5.dot")).unwrap();
    assert!(
        text.contains("every state's text: open with “Here is the current board layout:” and end with “Enter your move.” (left out of the nodes)"),
        "{text}"
    );
    let nodes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("shape=box") && l.contains(", label=\"d="))
        .collect();
    assert!(nodes.len() > 10);
    for node in &nodes {
        let label = &node[node.find("label=").unwrap()..node.find("tooltip=").unwrap()];
        assert!(
            !label.contains("Here is the current") && !label.contains("Enter your move"),
            "{node}"
        );
        // The tooltip keeps the whole observation.
        assert!(
            node.contains("tooltip=\"Here is the current board layout:"),
            "{node}"
        );
    }
    assert!(text.contains("label=\"d=∞ (no path)\\n"));
    // GraphGPO's d_max + 1 for it is 9 in this group: not what the label says.
    assert!(!text.contains("d=9"));
    let mut loops: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let (from, rest) = l.trim().split_once(" -> ")?;
            rest.starts_with(&format!("{from} ")).then_some(from)
        })
        .collect();
    let all = loops.len();
    loops.sort_unstable();
    loops.dedup();
    assert!(all > 0);
    assert_eq!(loops.len(), all, "one loop per node");
    assert!(text.contains("×8 (-0.395)\\l"), "{text}");
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
    // The folder the failed run created is gone again, not left holding only its manifest.
    assert!(!run.path("g").exists());
}

#[test]
fn top_picks_telling_groups_first_and_says_why() {
    // Sokoban fixture: of its 8 groups only sokoban-easy-seed5 has a success (1 of 8
    // trajectories `won`, counted from the file); the two largest never succeed. That group comes
    // first, then the groups whose GraphGPO credit departs most from GRPO's.
    let run = Run::new();
    let out = run.credit([
        "graph",
        fixture("real/sokoban.jsonl").to_str().unwrap(),
        "--top",
        "3",
        "--preset",
        "verl",
        "--out",
        "g",
        "--format",
        "json",
    ]);
    let v = json(&out);
    let picked = v["picked"].as_array().unwrap();
    assert_eq!(picked.len(), 3);
    assert_eq!(picked[0]["group"], "sokoban-easy-seed5");
    assert!(picked[0]["why"]
        .as_str()
        .unwrap()
        .starts_with("1 of 8 trajectories succeeded; graphgpo departs from GRPO by"));
    let departure = |p: &serde_json::Value| -> f64 {
        let why = p["why"].as_str().unwrap();
        let after = why.split("departs from GRPO by ").nth(1).unwrap();
        after.split(' ').next().unwrap().parse().unwrap()
    };
    assert!(picked[1]["why"]
        .as_str()
        .unwrap()
        .starts_with("no trajectory succeeded"));
    assert!(departure(&picked[1]) >= departure(&picked[2]));
    // A board is drawn as a board: one left-justified line per row of the observation.
    let dot = std::fs::read_to_string(run.path("g/group-sokoban-easy-seed5.dot")).unwrap();
    assert!(
        dot.contains("label=\"d=5\\n# # # # # #\\l# _ O _ _ #\\l"),
        "{}",
        &dot[..dot.len().min(2000)]
    );
}
