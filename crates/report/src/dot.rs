//! GraphGPO state graphs as Graphviz DOT (nodes labelled by distance to success, edges coloured by
//! a method's mean advantage, with a legend), and their SVG through Graphviz `dot`: what
//! `credit graph` writes and what the report's explorer shows.

use crate::Error;
use credit_core::graph::{Banner, GroupGraph, NodeKind};
use credit_core::wording::{plural, signed};
use credit_core::StepBatch;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};

/// The DOT name of node `index`, also its SVG element id (`<g id="n3" class="node">`), so that a
/// page can find a step's state in the drawing.
pub fn node_name(index: usize) -> String {
    format!("n{index}")
}

/// Whether Graphviz `dot` can be run.
pub fn available() -> bool {
    Command::new("dot")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `dot -Tsvg` on `text` and returns the SVG document; an error says "drawing a state
/// graph", which a caller that knows the group replaces ([`Error::Graphviz`]'s `what`).
pub fn svg(text: &str) -> Result<String, Error> {
    let bytes = render(text, "svg", "a state graph")?;
    String::from_utf8(bytes).map_err(|e| Error::Graphviz {
        what: "a state graph".into(),
        message: format!("Graphviz `dot`'s SVG is not UTF-8: {e}"),
    })
}

/// Runs `dot -T{format}` on `text` and returns what it drew; an error names the drawing (`what`)
/// and says what `dot` said.
pub fn render(text: &str, format: &str, what: &str) -> Result<Vec<u8>, Error> {
    let failed = |message: String| Error::Graphviz {
        what: what.to_string(),
        message,
    };
    let mut child = Command::new("dot")
        .arg(format!("-T{format}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("Graphviz `dot` could not be run: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    // Written from a second thread: `dot` may fill its output pipe before it has read all input.
    let (wrote, drawn) = std::thread::scope(|s| {
        let writer = s.spawn(move || stdin.write_all(text.as_bytes()));
        let mut drawn = Vec::new();
        let read = stdout.read_to_end(&mut drawn);
        (writer.join().expect("writer thread"), read.map(|_| drawn))
    });
    let output = child
        .wait_with_output()
        .map_err(|e| failed(format!("Graphviz `dot` could not be waited for: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!(
            "Graphviz `dot -T{format}` failed: {}",
            stderr_head(&output.stderr, output.status)
        )));
    }
    wrote.map_err(|e| failed(format!("Graphviz `dot` did not take its input: {e}")))?;
    drawn.map_err(|e| failed(format!("Graphviz `dot`'s output could not be read: {e}")))
}

/// What a failed `dot` said: the first lines of its stderr, each abridged, or its exit status
/// when it said nothing.
fn stderr_head(stderr: &[u8], status: std::process::ExitStatus) -> String {
    const LINES: usize = 5;
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(LINES)
        .map(|l| abridge(l, 200))
        .collect();
    if lines.is_empty() {
        format!("{status}, with no message")
    } else {
        lines.join("; ")
    }
}

/// `text` in at most `max` characters (at least 2), its middle cut out and marked `…` when it is
/// longer, with control characters shown as their Unicode pictures (NUL as `␀`, a line break as
/// `␊`): what a label, tooltip or message shows of a logged id or text of any length and content.
/// Graphviz fails on a NUL, and XML (the SVG) allows no control characters.
pub fn abridge(text: &str, max: usize) -> String {
    let max = max.max(2);
    let visible = |c: char| match c as u32 {
        0x00..=0x1f => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
        0x7f => '\u{2421}',
        _ if c.is_control() => '\u{fffd}',
        _ => c,
    };
    let n = text.chars().count();
    if n <= max {
        return text.chars().map(visible).collect();
    }
    let tail = (max - 1) / 2;
    let head = max - 1 - tail;
    text.chars()
        .take(head)
        .chain(std::iter::once('…'))
        .chain(text.chars().skip(n - tail))
        .map(visible)
        .collect()
}

/// `text` as the inside of a quoted DOT string: [`abridge`]d to `max` characters, then quotes
/// and backslashes escaped (a backslash would start one of Graphviz's `\N`, `\G`, … escapes).
fn quoted(text: &str, max: usize) -> String {
    abridge(text, max)
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// The most characters of a group id in a graph's title.
const TITLE_ID_CHARS: usize = 80;
/// The most lines of a state in its node's label, and in its tooltip; the most characters of each.
const NODE_LABEL_LINES: usize = 8;
const NODE_LABEL_CHARS: usize = 40;
const NODE_TOOLTIP_LINES: usize = 40;
const NODE_TOOLTIP_CHARS: usize = 200;
/// The most characters of an action on its edge.
const EDGE_LABEL_CHARS: usize = 32;
/// The most characters of the text every state shares, in the title.
const BANNER_CHARS: usize = 60;

/// Group `g`'s state graph as DOT: `values` (one per batch row) is the advantage of `method`.
pub fn to_dot(
    batch: &StepBatch,
    g: usize,
    graph: &GroupGraph,
    values: &[f64],
    method: &str,
) -> String {
    // Distinct (s, a, s′) edges with their occurrences' mean advantage.
    let mut edges: BTreeMap<(usize, String, usize), (f64, usize)> = BTreeMap::new();
    for &(row, s, t) in &graph.endpoints {
        let e = edges
            .entry((
                s.index(),
                GroupGraph::action(batch, row).to_string(),
                t.index(),
            ))
            .or_default();
        e.0 += values[row as usize];
        e.1 += 1;
    }
    let scale = edges
        .values()
        .map(|(sum, n)| (sum / *n as f64).abs())
        .fold(0.0, f64::max)
        .max(1e-12);
    let group = &batch.groups[g];
    let successes = group
        .trajs
        .iter()
        .filter(|&&t| batch.trajs[t as usize].success)
        .count();
    let mut o = String::new();
    let _ = writeln!(o, "digraph credit {{");
    let _ = writeln!(o, "  rankdir=TB; nodesep=0.25; ranksep=0.45; fontname=\"DejaVu Sans\"; fontsize=14; labelloc=t;");
    // The lines every state shares are said once, in the title, instead of in every node.
    let banner = graph.banner(batch);
    let shared = banner_text(&banner);
    let _ = writeln!(
        o,
        "  label=\"group {} — {} ({} successful), {}; edges: mean adv_{} per (state, action, next state){shared}\";",
        quoted(&group.id, TITLE_ID_CHARS),
        plural(group.trajs.len(), "trajectory"),
        successes,
        plural(group.n_rows, "step"),
        method
    );
    let _ = writeln!(
        o,
        "  node [shape=box, style=\"rounded,filled\", fontname=\"DejaVu Sans Mono\", fontsize=10];"
    );
    let _ = writeln!(o, "  edge [fontname=\"DejaVu Sans\", fontsize=9];");
    for n in graph.graph.node_indices() {
        let d = graph.distance[n.index()];
        let reach = graph.reaches_success[n.index()];
        let (shape, fill) = match graph.graph[n] {
            NodeKind::Success => ("doublecircle", "#a6dba0"),
            NodeKind::Fail { .. } => ("octagon", "#d9d9d9"),
            NodeKind::State { .. } if reach => ("box", "#f7f7f7"),
            NodeKind::State { .. } => ("box", "#e0e0e0"),
        };
        // A state with no path to success is said so alike in every group: the d GraphGPO gives
        // it (d_max + 1, or 1 in a group without a success) depends on the rest of the group.
        let distance = if reach {
            format!("d={d}")
        } else {
            "d=∞ (no path)".to_string()
        };
        // Each line left-justified (`\l`), so a board keeps its columns; `label` keeps a line's
        // first characters and adds `…`: one more than asked. The tooltip shows the whole text.
        let lines = |banner, max_lines, max_chars: usize, end: &str| -> String {
            graph
                .label(batch, n, banner, max_lines, max_chars)
                .iter()
                .map(|line| quoted(line, max_chars + 1) + end)
                .collect()
        };
        let name = node_name(n.index());
        let _ = writeln!(
            o,
            "  {name} [id=\"{name}\", shape={shape}, fillcolor=\"{fill}\", label=\"{distance}\\n{}\", tooltip=\"{}\"];",
            lines(&banner, NODE_LABEL_LINES, NODE_LABEL_CHARS, "\\l"),
            lines(&Banner::default(), NODE_TOOLTIP_LINES, NODE_TOOLTIP_CHARS, "\\n"),
        );
    }
    write_edges(&mut o, &edges, scale);
    // Legend: the colour scale from −max to +max, as one table.
    let cells: String = [-1.0, -0.5, 0.0, 0.5, 1.0]
        .iter()
        .map(|t| {
            format!(
                "<td bgcolor=\"{}\" width=\"60\">{}</td>",
                crate::palette::hex(*t),
                signed(t * scale, 3)
            )
        })
        .collect();
    let _ = writeln!(
        o,
        "  legend [shape=plaintext, label=<<table border=\"0\" cellborder=\"1\" cellspacing=\"0\" cellpadding=\"4\"><tr><td colspan=\"5\">edge colour: mean adv_{method}; d = distance to success</td></tr><tr>{cells}</tr></table>>];"
    );
    let _ = writeln!(o, "}}");
    o
}

/// The graph title's line for the text every state shares ([`GroupGraph::banner`]), if any.
fn banner_text(banner: &Banner) -> String {
    if banner.is_empty() {
        return String::new();
    }
    let said = |lines: &[String]| quoted(&lines.join(" "), BANNER_CHARS);
    let mut parts = Vec::new();
    if !banner.head.is_empty() {
        parts.push(format!("open with “{}”", said(&banner.head)));
    }
    if !banner.tail.is_empty() {
        parts.push(format!("end with “{}”", said(&banner.tail)));
    }
    format!(
        "\\nevery state's text: {} (left out of the nodes)",
        parts.join(" and ")
    )
}

/// The distinct (s, a, s′) edges with their occurrences' summed advantage and count, coloured
/// on `scale` (the largest |mean|).
fn write_edges(o: &mut String, edges: &BTreeMap<(usize, String, usize), (f64, usize)>, scale: f64) {
    let said = |action: &str, sum: f64, count: usize| {
        let times = if count > 1 {
            format!(" ×{count}")
        } else {
            String::new()
        };
        format!(
            "{}{times} ({})",
            quoted(action, EDGE_LABEL_CHARS),
            signed(sum / count as f64, 3)
        )
    };
    let edge = |o: &mut String, s: usize, t: usize, sum: f64, count: usize, label: &str| {
        let _ = writeln!(
            o,
            "  {} -> {} [color=\"{}\", penwidth={:.1}, label=\"{label}\"];",
            node_name(s),
            node_name(t),
            crate::palette::hex(sum / count as f64 / scale),
            1.0 + (count as f64).ln(),
        );
    };
    // Graphviz sets the labels of a node's loops side by side, over each other: a node's loops
    // are drawn as one, its actions a line each, coloured by their mean.
    let mut loops: BTreeMap<usize, Vec<(&str, f64, usize)>> = BTreeMap::new();
    for ((s, action, t), (sum, count)) in edges {
        if s == t {
            loops.entry(*s).or_default().push((action, *sum, *count));
        } else {
            edge(o, *s, *t, *sum, *count, &said(action, *sum, *count));
        }
    }
    for (node, actions) in &loops {
        let sum: f64 = actions.iter().map(|a| a.1).sum();
        let count: usize = actions.iter().map(|a| a.2).sum();
        let label = match actions.as_slice() {
            [(action, sum, count)] => said(action, *sum, *count),
            _ => actions
                .iter()
                .map(|(action, sum, count)| said(action, *sum, *count) + "\\l")
                .collect(),
        };
        edge(o, *node, *node, sum, count, &label);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abridge_cuts_the_middle_and_shows_control_characters() {
        assert_eq!(abridge("short", 10), "short");
        assert_eq!(abridge("abcdefghij", 5), "ab…ij");
        assert_eq!(abridge("a\0b\nc\u{7f}", 10), "a␀b␊c␡");
        let long = format!("start{}end", "x".repeat(1 << 20));
        let cut = abridge(&long, 60);
        assert_eq!(cut.chars().count(), 60);
        assert!(cut.starts_with("startxx") && cut.ends_with("xxend") && cut.contains('…'));
    }

    #[test]
    fn quoted_escapes_what_dot_would_read_as_syntax() {
        assert_eq!(quoted("say \"hi\" \\N", 40), "say \\\"hi\\\" \\\\N");
        assert_eq!(quoted("a\0b", 40), "a␀b");
    }
}
