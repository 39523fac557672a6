//! GraphGPO's state graphs (Cheng et al. 2026, arXiv 2605.26684, §4.1–4.2, Eq. 3): per group, nodes
//! are exact state keys (`obs`), one SUCCESS sink, and an edge (s, a, s′, c) per step.
//!
//! s′ is the next row's `obs`; on a trajectory's last step it is SUCCESS when the trajectory
//! succeeded (or `next_obs` is the literal `success`, as verl-agent's rollout loop writes), else the
//! logged `next_obs` (which may merge with another trajectory's state, as in the reference code),
//! else a fresh FAIL node of that trajectory. d(s) is the cost-weighted distance to SUCCESS by
//! reverse Dijkstra (petgraph); nodes that cannot reach it get d_max + 1, and a group without a
//! success has d ≡ 1 (the reference code's rule; `spec-graphgpo.md` §3 Step 4).

use crate::batch::StepBatch;
use crate::schema::columns::{ACTION, COST, NEXT_OBS, OBS};
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{EdgeRef, Reversed};
use polars::prelude::PlHashMap;

/// What a node stands for.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A state: the text of its key is `batch.obs[row]` for `row`, the first row that named it.
    State {
        row: u32,
        from_next: bool,
    },
    Success,
    /// The end of a failed trajectory with no logged next state.
    Fail {
        traj: u32,
    },
}

/// One edge occurrence: the step `row` from `source` to `target`.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub row: u32,
    pub cost: f64,
}

/// The state graph of one group.
pub struct GroupGraph {
    pub graph: DiGraph<NodeKind, Step>,
    pub success: Option<NodeIndex>,
    /// d per node (finite; unreachable nodes already set to d_max + 1).
    pub distance: Vec<f64>,
    /// Whether each node can reach SUCCESS.
    pub reaches_success: Vec<bool>,
    pub d_max: f64,
    /// (source, target) of each of the group's rows, in `batch.group_rows` order.
    pub endpoints: Vec<(u32, NodeIndex, NodeIndex)>,
}

impl GroupGraph {
    pub fn build(batch: &StepBatch, g: usize) -> GroupGraph {
        let obs = batch.texts(OBS);
        let next_obs = batch.texts(NEXT_OBS);
        let costs = batch.opt_f64s(COST);
        let mut graph: DiGraph<NodeKind, Step> = DiGraph::new();
        let mut by_key: PlHashMap<&str, NodeIndex> = PlHashMap::default();
        let mut success = None;
        let mut endpoints = Vec::with_capacity(batch.groups[g].n_rows);
        // Interns state keys (borrowed from the batch) into nodes; a missing observation cannot
        // be matched with anything and gets its own node.
        fn node_for<'a>(
            graph: &mut DiGraph<NodeKind, Step>,
            by_key: &mut PlHashMap<&'a str, NodeIndex>,
            key: Option<&'a str>,
            row: u32,
            from_next: bool,
        ) -> NodeIndex {
            match key {
                None => graph.add_node(NodeKind::State { row, from_next }),
                Some(k) => *by_key
                    .entry(k)
                    .or_insert_with(|| graph.add_node(NodeKind::State { row, from_next })),
            }
        }
        for &t in &batch.groups[g].trajs {
            let traj = &batch.trajs[t as usize];
            for (k, &row) in traj.rows.iter().enumerate() {
                let r = row as usize;
                let source = node_for(
                    &mut graph,
                    &mut by_key,
                    obs.and_then(|o| o.get(r)),
                    row,
                    false,
                );
                let logged_next = next_obs.and_then(|o| o.get(r));
                let last = k + 1 == traj.rows.len();
                let target = if logged_next == Some("success") || (last && traj.success) {
                    *success.get_or_insert_with(|| graph.add_node(NodeKind::Success))
                } else if !last {
                    node_for(
                        &mut graph,
                        &mut by_key,
                        obs.and_then(|o| o.get(traj.rows[k + 1] as usize)),
                        traj.rows[k + 1],
                        false,
                    )
                } else if let Some(next) = logged_next {
                    node_for(&mut graph, &mut by_key, Some(next), row, true)
                } else {
                    graph.add_node(NodeKind::Fail { traj: t })
                };
                let cost = costs.and_then(|c| c.get(r)).unwrap_or(1.0);
                graph.add_edge(source, target, Step { row, cost });
                endpoints.push((row, source, target));
            }
        }
        let n = graph.node_count();
        let mut distance = vec![f64::INFINITY; n];
        if let Some(s) = success {
            let reached = petgraph::algo::dijkstra(Reversed(&graph), s, None, |e| e.weight().cost);
            for (node, d) in reached {
                distance[node.index()] = d;
            }
        }
        let reaches_success: Vec<bool> = distance.iter().map(|d| d.is_finite()).collect();
        let d_max = distance
            .iter()
            .copied()
            .filter(|d| d.is_finite())
            .fold(0.0, f64::max);
        for d in &mut distance {
            if !d.is_finite() {
                *d = d_max + 1.0;
            }
        }
        GroupGraph {
            graph,
            success,
            distance,
            reaches_success,
            d_max,
            endpoints,
        }
    }

    /// A short label for a node: its state text, shortened.
    pub fn label(&self, batch: &StepBatch, node: NodeIndex, max_chars: usize) -> String {
        match &self.graph[node] {
            NodeKind::Success => "SUCCESS".into(),
            NodeKind::Fail { .. } => "FAIL".into(),
            NodeKind::State { row, from_next } => {
                let column = if *from_next { NEXT_OBS } else { OBS };
                let text = batch
                    .texts(column)
                    .and_then(|o| o.get(*row as usize))
                    .unwrap_or("(no obs)");
                // Start at the first line that reads as words (observations often open with banners
                // or board art), then flatten whitespace.
                let wordy = |l: &&str| {
                    l.split_whitespace()
                        .filter(|w| {
                            w.chars()
                                .all(|c| c.is_alphabetic() || ".,'!?:;".contains(c))
                                && w.len() > 1
                        })
                        .count()
                        >= 3
                };
                let start = text.lines().position(|l| wordy(&l)).unwrap_or(0);
                let rest: Vec<&str> = text.lines().skip(start).collect();
                let flat: String = rest
                    .join(" ")
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                if flat.chars().count() > max_chars {
                    format!("{}…", flat.chars().take(max_chars).collect::<String>())
                } else {
                    flat
                }
            }
        }
    }

    /// The action text of a step, if logged.
    pub fn action(batch: &StepBatch, row: u32) -> &str {
        batch
            .texts(ACTION)
            .and_then(|a| a.get(row as usize))
            .unwrap_or("")
    }
}
