//! GraphGPO state graphs as Graphviz DOT (nodes labelled by distance to success, edges coloured by
//! a method's mean advantage, with a legend), and their SVG through Graphviz `dot`: what
//! `credit graph` writes and what the report's explorer shows.

use crate::Error;
use credit_core::graph::{GroupGraph, NodeKind};
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

/// Runs `dot -Tsvg` on `text` and returns the SVG document.
pub fn svg(text: &str) -> Result<String, Error> {
    let failed = |message: String| Error::Graphviz(message);
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("running `dot`: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    // Written from a second thread: `dot` may fill its output pipe before it has read all input.
    let (wrote, svg) = std::thread::scope(|s| {
        let writer = s.spawn(move || stdin.write_all(text.as_bytes()));
        let mut svg = String::new();
        let read = stdout.read_to_string(&mut svg);
        (writer.join().expect("writer thread"), read.map(|_| svg))
    });
    let output = child
        .wait_with_output()
        .map_err(|e| failed(format!("waiting for `dot`: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!(
            "`dot -Tsvg` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    wrote.map_err(|e| failed(format!("writing to `dot`: {e}")))?;
    svg.map_err(|e| failed(format!("reading from `dot`: {e}")))
}

/// A diverging colour for t ∈ [−1, 1]: blue (negative) through grey (0) to red (positive).
fn colour(t: f64) -> String {
    let t = t.clamp(-1.0, 1.0);
    let grey = [0.72, 0.72, 0.72];
    let end = if t < 0.0 {
        [0.13, 0.40, 0.67]
    } else {
        [0.70, 0.09, 0.17]
    };
    let a = t.abs();
    let c: Vec<u8> = (0..3)
        .map(|i| ((grey[i] * (1.0 - a) + end[i] * a) * 255.0).round() as u8)
        .collect();
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

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
    let _ = writeln!(
        o,
        "  label=\"group {} — {} trajectories ({} successful), {} steps; edges: mean adv_{} per (state, action, next state)\";",
        escape(&group.id),
        group.trajs.len(),
        successes,
        group.n_rows,
        method
    );
    let _ = writeln!(
        o,
        "  node [shape=box, style=\"rounded,filled\", fontname=\"DejaVu Sans\", fontsize=10];"
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
        let distance = if reach {
            format!("d={d}")
        } else {
            format!("d={d} (no path)")
        };
        let text = graph.label(batch, n, 40);
        let tooltip = graph.label(batch, n, 400);
        let name = node_name(n.index());
        let _ = writeln!(
            o,
            "  {name} [id=\"{name}\", shape={shape}, fillcolor=\"{fill}\", label=\"{}\\n{}\", tooltip=\"{}\"];",
            distance,
            escape(&text),
            escape(&tooltip)
        );
    }
    for ((s, action, t), (sum, count)) in &edges {
        let mean = sum / *count as f64;
        let short: String = action.chars().take(28).collect();
        let times = if *count > 1 {
            format!(" ×{count}")
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "  {} -> {} [color=\"{}\", penwidth={:.1}, label=\"{}{} ({:+.3})\"];",
            node_name(*s),
            node_name(*t),
            colour(mean / scale),
            1.0 + (*count as f64).ln(),
            escape(&short),
            times,
            mean
        );
    }
    // Legend: the colour scale from −max to +max, as one table.
    let cells: String = [-1.0, -0.5, 0.0, 0.5, 1.0]
        .iter()
        .map(|t| {
            format!(
                "<td bgcolor=\"{}\" width=\"60\">{:+.3}</td>",
                colour(*t),
                t * scale
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
