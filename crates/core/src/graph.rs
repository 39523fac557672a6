//! GraphGPO's state graphs (Cheng et al. 2026, arXiv 2605.26684, §4.1–4.2, Eq. 3): per group, nodes
//! are exact state keys (`obs`), one SUCCESS sink, and an edge (s, a, s′, c) per step.
//!
//! s′ is the next row's `obs`; on a trajectory's last step it is SUCCESS when the trajectory
//! succeeded (or `next_obs` is the literal `success`, as verl-agent's rollout loop writes), else the
//! logged `next_obs` (which may merge with another trajectory's state, as in the reference code),
//! else a fresh FAIL node of that trajectory. d(s) is the cost-weighted distance to SUCCESS by
//! reverse Dijkstra (petgraph); nodes that cannot reach it get d_max + 1, and a group without a
//! success has d ≡ 1 (the reference code's rule; `spec-graphgpo.md` §3 Step 4).

pub use crate::batch::NodeKind;
use crate::batch::StepBatch;
use crate::schema::columns::{ACTION, COST, NEXT_OBS, OBS};
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{EdgeRef, Reversed};
use polars::prelude::{Float64Chunked, StringChunked};

/// One edge occurrence: the step `row` from `source` to `target`.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub row: u32,
    pub cost: f64,
}

/// The state graph of one group.
#[derive(Default)]
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

/// The lines every state of a group opens and ends with ([`GroupGraph::banner`]): said once for
/// the group, left out of each node's label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Banner {
    pub head: Vec<String>,
    pub tail: Vec<String>,
}

impl Banner {
    pub fn is_empty(&self) -> bool {
        self.head.is_empty() && self.tail.is_empty()
    }
}

/// Whether a line reads as words: three or more of letters (and punctuation), not a banner's
/// rule or a board's row.
fn wordy(line: &&str) -> bool {
    line.split_whitespace()
        .filter(|w| {
            w.chars()
                .all(|c| c.is_alphabetic() || ".,'!?:;".contains(c))
                && w.len() > 1
        })
        .count()
        >= 3
}

/// The columns that graphs are built from, looked up once for all the groups of a batch (a
/// look-up by name costs as much as a small group's graph).
#[derive(Clone, Copy)]
pub struct GraphColumns<'a> {
    obs: Option<&'a StringChunked>,
    next_obs: Option<&'a StringChunked>,
    costs: Option<&'a Float64Chunked>,
    actions: Option<&'a StringChunked>,
}

impl<'a> GraphColumns<'a> {
    pub fn of(batch: &'a StepBatch) -> Self {
        GraphColumns {
            obs: batch.texts(OBS),
            next_obs: batch.texts(NEXT_OBS),
            costs: batch.opt_f64s(COST),
            actions: batch.texts(ACTION),
        }
    }

    /// The action text of a step, if logged.
    pub fn action(&self, row: u32) -> &'a str {
        self.actions.and_then(|a| a.get(row as usize)).unwrap_or("")
    }

    /// The edge (s, a, s′) of a step, given as its endpoint (row, s, s′).
    pub fn edge(&self, (row, source, target): (u32, NodeIndex, NodeIndex)) -> (u32, &'a str, u32) {
        (
            source.index() as u32,
            self.action(row),
            target.index() as u32,
        )
    }

    /// The graph of group `g` of one step, told without building it (a log of single-row groups
    /// has a group per row): what [`GroupGraph::rebuild`] makes of it, and tested equal to it.
    pub fn one_step(&self, batch: &StepBatch, g: usize) -> OneStep {
        let traj = &batch.trajs[batch.groups[g].trajs[0] as usize];
        let r = traj.rows[0] as usize;
        let next = self.next_obs.and_then(|o| o.get(r));
        if next == Some("success") || traj.success {
            // SUCCESS is 0 away and the state the step's cost (Dijkstra from SUCCESS: 0 + cost)
            // or 1; a state an infinite or NaN cost leaves unreached is d_max + 1 = 1 away.
            let d = match self.costs {
                Some(c) => 0.0 + c.get(r).unwrap_or(1.0),
                None => 1.0,
            };
            let reaches = d.is_finite();
            OneStep {
                states: 1,
                success: true,
                distance: reaches.then_some(d),
                progress: 0.0 < if reaches { d } else { 1.0 },
            }
        } else {
            // The next state is a node of its own unless it is the step's own text; without
            // SUCCESS every node is d_max + 1 = 1 away, so the step makes no progress.
            let obs = self.obs.and_then(|o| o.get(r));
            OneStep {
                states: 1 + (next.is_some() && obs != next) as usize,
                success: false,
                distance: None,
                progress: false,
            }
        }
    }
}

/// A one-step group's graph ([`GraphColumns::one_step`]): a state, one edge, and a SUCCESS node,
/// a FAIL node or the next state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OneStep {
    /// State nodes: the step's state, and its next state where that is another node.
    pub states: usize,
    /// Whether the step reaches SUCCESS (the graph has a SUCCESS node).
    pub success: bool,
    /// d of the step's state where it can reach SUCCESS.
    pub distance: Option<f64>,
    /// d(s′) < d(s).
    pub progress: bool,
}

/// What building a group's graph allocates besides the graph, kept from one group to the next
/// with it ([`GroupGraph::rebuild`]): a window can hold a group per row.
#[derive(Default)]
pub struct GraphScratch {
    first: Vec<usize>,
    sources: Vec<u32>,
    next: Vec<usize>,
    queue: std::collections::VecDeque<usize>,
}

impl GroupGraph {
    pub fn build(batch: &StepBatch, g: usize) -> GroupGraph {
        Self::build_from(&GraphColumns::of(batch), batch, g)
    }

    /// [`GroupGraph::build`] with the batch's columns already looked up.
    pub fn build_from(columns: &GraphColumns, batch: &StepBatch, g: usize) -> GroupGraph {
        let mut graph = GroupGraph::default();
        graph.rebuild(columns, batch, g, &mut GraphScratch::default());
        graph
    }

    /// [`GroupGraph::build_from`] into this graph, with its allocations and `scratch`'s reused:
    /// the nodes and steps the batch interned ([`StepBatch::states`]), the distances searched.
    pub fn rebuild(
        &mut self,
        columns: &GraphColumns,
        batch: &StepBatch,
        g: usize,
        scratch: &mut GraphScratch,
    ) {
        let states = batch.states();
        let (nodes, steps) = (states.nodes(g), states.steps(g));
        let costs = columns.costs;
        let graph = &mut self.graph;
        graph.clear();
        graph.reserve_nodes(nodes.len());
        graph.reserve_edges(steps.len());
        let mut success = None;
        for kind in nodes {
            let node = graph.add_node(kind.clone());
            if *kind == NodeKind::Success {
                success = Some(node);
            }
        }
        let endpoints = &mut self.endpoints;
        endpoints.clear();
        endpoints.reserve(steps.len());
        for &(row, source, target) in steps {
            let (source, target) = (
                NodeIndex::new(source as usize),
                NodeIndex::new(target as usize),
            );
            let cost = costs.and_then(|c| c.get(row as usize)).unwrap_or(1.0);
            graph.add_edge(source, target, Step { row, cost });
            endpoints.push((row, source, target));
        }
        let n = graph.node_count();
        let distance = &mut self.distance;
        distance.clear();
        distance.resize(n, f64::INFINITY);
        match (success, costs) {
            (Some(s), Some(_)) => {
                let reached =
                    petgraph::algo::dijkstra(Reversed(&*graph), s, None, |e| e.weight().cost);
                for (node, d) in reached {
                    distance[node.index()] = d;
                }
            }
            // Every step costs 1: a breadth-first search gives Dijkstra's distances (whole
            // numbers, exact in f64) without its heap, over each node's sources laid out
            // together (a group of 1M steps has 1M edges; petgraph's edge lists jump through
            // memory).
            (Some(s), None) => {
                let GraphScratch {
                    first,
                    sources,
                    next,
                    queue,
                } = scratch;
                first.clear();
                first.resize(n + 1, 0);
                for &(_, _, target) in endpoints.iter() {
                    first[target.index() + 1] += 1;
                }
                for i in 0..n {
                    first[i + 1] += first[i];
                }
                sources.clear();
                sources.resize(endpoints.len(), 0);
                next.clear();
                next.extend_from_slice(first);
                for &(_, source, target) in endpoints.iter() {
                    sources[next[target.index()]] = source.index() as u32;
                    next[target.index()] += 1;
                }
                distance[s.index()] = 0.0;
                queue.clear();
                queue.push_back(s.index());
                while let Some(node) = queue.pop_front() {
                    for &before in &sources[first[node]..first[node + 1]] {
                        let before = before as usize;
                        if distance[before].is_infinite() {
                            distance[before] = distance[node] + 1.0;
                            queue.push_back(before);
                        }
                    }
                }
            }
            (None, _) => {}
        }
        self.reaches_success.clear();
        self.reaches_success
            .extend(distance.iter().map(|d| d.is_finite()));
        let d_max = distance
            .iter()
            .copied()
            .filter(|d| d.is_finite())
            .fold(0.0, f64::max);
        for d in distance.iter_mut() {
            if !d.is_finite() {
                *d = d_max + 1.0;
            }
        }
        self.success = success;
        self.d_max = d_max;
    }

    /// The lines a state's label is drawn from: its state text from the first line that reads as
    /// words (observations often open with banners), blank lines left out, lines kept as they
    /// are (a Sokoban board reads as a board). `None` for SUCCESS and FAIL.
    fn state_lines<'b>(&self, batch: &'b StepBatch, node: NodeIndex) -> Option<Vec<&'b str>> {
        let NodeKind::State { row, from_next } = &self.graph[node] else {
            return None;
        };
        let column = if *from_next { NEXT_OBS } else { OBS };
        let text = batch
            .texts(column)
            .and_then(|o| o.get(*row as usize))
            .unwrap_or("(no obs)");
        let start = text.lines().position(|l| wordy(&l)).unwrap_or(0);
        Some(
            text.lines()
                .skip(start)
                .map(str::trim_end)
                .filter(|l| !l.trim().is_empty())
                .collect(),
        )
    }

    /// The text every state of the group opens and ends with (a Sokoban observation's "Here is
    /// the current board layout:" and "Enter your move."), which each node would repeat: the
    /// lines the states share at their start up to the last that reads as words, and at their
    /// end from the first that does, so that a board keeps its walls. Nothing with fewer than two
    /// states, or where a state would be left with no line of its own.
    pub fn banner(&self, batch: &StepBatch) -> Banner {
        let states: Vec<Vec<&str>> = self
            .graph
            .node_indices()
            .filter_map(|n| self.state_lines(batch, n))
            .collect();
        let Some((first, others)) = states.split_first() else {
            return Banner::default();
        };
        if others.is_empty() {
            return Banner::default();
        }
        let shared = |line: &dyn Fn(&[&str], usize) -> Option<usize>| {
            (0..first.len())
                .take_while(|&i| {
                    let at = line(first, i).map(|k| first[k]);
                    at.is_some() && others.iter().all(|o| line(o, i).map(|k| o[k]) == at)
                })
                .count()
        };
        let from_start = |lines: &[&str], i: usize| (i < lines.len()).then_some(i);
        let from_end = |lines: &[&str], i: usize| lines.len().checked_sub(i + 1);
        let head_shared = shared(&from_start);
        let tail_shared = shared(&from_end);
        // Cut back to lines of words: a shared wall row stays with its board.
        let head = first[..head_shared]
            .iter()
            .rposition(wordy)
            .map_or(0, |i| i + 1);
        let tail_lines = &first[first.len() - tail_shared..];
        let tail = tail_lines
            .iter()
            .position(wordy)
            .map_or(0, |i| tail_shared - i);
        let shortest = states.iter().map(Vec::len).min().unwrap_or(0);
        if head + tail == 0 || head + tail >= shortest {
            return Banner::default();
        }
        Banner {
            head: first[..head].iter().map(|l| l.to_string()).collect(),
            tail: first[first.len() - tail..]
                .iter()
                .map(|l| l.to_string())
                .collect(),
        }
    }

    /// A node's label, line by line: its state's lines ([`GroupGraph::state_lines`]) without the
    /// group's `banner`, each cut to `max_chars` (then `…`), and at most `max_lines` lines (the
    /// last saying how many more).
    pub fn label(
        &self,
        batch: &StepBatch,
        node: NodeIndex,
        banner: &Banner,
        max_lines: usize,
        max_chars: usize,
    ) -> Vec<String> {
        let lines = match &self.graph[node] {
            NodeKind::Success => return vec!["SUCCESS".into()],
            NodeKind::Fail { .. } => return vec!["FAIL".into()],
            NodeKind::State { .. } => self.state_lines(batch, node).unwrap_or_default(),
        };
        let lines = &lines[banner.head.len()..lines.len() - banner.tail.len()];
        let cut = |line: &str| {
            if line.chars().count() > max_chars {
                format!("{}…", line.chars().take(max_chars).collect::<String>())
            } else {
                line.to_string()
            }
        };
        let max_lines = max_lines.max(2);
        if lines.len() <= max_lines {
            return lines.iter().map(|l| cut(l)).collect();
        }
        let kept = max_lines - 1;
        let mut label: Vec<String> = lines[..kept].iter().map(|l| cut(l)).collect();
        label.push(format!("… {} more lines", lines.len() - kept));
        label
    }

    /// The action text of a step, if logged.
    pub fn action(batch: &StepBatch, row: u32) -> &str {
        GraphColumns::of(batch).action(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{batch, batch_with, batch_with_columns, Row};
    use crate::schema::columns::{COST, NEXT_OBS};
    use polars::prelude::Column;

    /// The node of state `obs` (the first node whose key row holds that text).
    fn state(g: &GroupGraph, batch: &StepBatch, obs: &str) -> NodeIndex {
        let texts = batch.texts(OBS).unwrap();
        g.graph
            .node_indices()
            .find(|&n| match &g.graph[n] {
                NodeKind::State { row, from_next } => {
                    let column = if *from_next {
                        batch.texts(NEXT_OBS).unwrap()
                    } else {
                        texts
                    };
                    column.get(*row as usize) == Some(obs)
                }
                _ => false,
            })
            .unwrap_or_else(|| panic!("no node for {obs}"))
    }

    /// Group g1: a = A → B → C and succeeds (reward 1 on its last step);
    /// b = A → B → D and fails. Group g2 (never built here) repeats A and succeeds.
    fn two_paths() -> StepBatch {
        let rows: [Row; 7] = [
            ("g1", "a", 0, "A", 0.0, true),
            ("g1", "a", 1, "B", 0.0, true),
            ("g1", "a", 2, "C", 1.0, true),
            ("g1", "b", 0, "A", 0.0, true),
            ("g1", "b", 1, "B", 0.0, true),
            ("g1", "b", 2, "D", 0.0, true),
            ("g2", "c", 0, "A", 1.0, true),
        ];
        batch_with(&rows, &["n", "e", "take", "n", "e", "drop", "win"])
    }

    #[test]
    fn identical_states_share_a_node_and_distances_count_steps() {
        let b = two_paths();
        let g = GroupGraph::build(&b, 0);
        // Nodes: A, B, C, SUCCESS, D, FAIL(b): the shared A and B appear once.
        assert_eq!(g.graph.node_count(), 6);
        // One edge per step: 6 rows in g1.
        assert_eq!(g.graph.edge_count(), 6);
        let (a, bb, c, d) = (
            state(&g, &b, "A"),
            state(&g, &b, "B"),
            state(&g, &b, "C"),
            state(&g, &b, "D"),
        );
        let success = g.success.expect("a succeeded");
        assert_eq!(g.graph[success], NodeKind::Success);
        let fail = g
            .graph
            .node_indices()
            .find(|&n| matches!(g.graph[n], NodeKind::Fail { .. }))
            .unwrap();
        // b is trajectory 1; its last step ends in its FAIL node.
        assert_eq!(g.graph[fail], NodeKind::Fail { traj: 1 });
        // Distances to SUCCESS: C 1, B 2, A 3; D and FAIL cannot reach it → d_max + 1 = 4.
        assert_eq!(g.d_max, 3.0);
        let dist = |n: NodeIndex| g.distance[n.index()];
        assert_eq!(
            [
                dist(success),
                dist(c),
                dist(bb),
                dist(a),
                dist(d),
                dist(fail)
            ],
            [0.0, 1.0, 2.0, 3.0, 4.0, 4.0]
        );
        let reach = |n: NodeIndex| g.reaches_success[n.index()];
        assert!(reach(success) && reach(a) && reach(bb) && reach(c));
        assert!(!reach(d) && !reach(fail));
        // Endpoints in group_rows order: a's rows 0..3 then b's 3..6, each (row, s, s′).
        let expected = vec![
            (0, a, bb),
            (1, bb, c),
            (2, c, success),
            (3, a, bb),
            (4, bb, d),
            (5, d, fail),
        ];
        assert_eq!(g.endpoints, expected);
        // Edges (s, a, s′): the two A → B steps are parallel edges, one per row.
        // (petgraph lists parallel edges newest first: sort.)
        let mut ab: Vec<u32> = g
            .graph
            .edges_connecting(a, bb)
            .map(|e| e.weight().row)
            .collect();
        ab.sort_unstable();
        assert_eq!(ab, vec![0, 3]);
        assert_eq!(GroupGraph::action(&b, 5), "drop");
        // Another group has its own graph: g2 is A → SUCCESS, so d(A) = 1 there.
        let g2 = GroupGraph::build(&b, 1);
        assert_eq!(g2.graph.node_count(), 2);
        assert_eq!(g2.distance[state(&g2, &b, "A").index()], 1.0);
    }

    /// Batches of a few groups of short trajectories, states drawn from a few texts or missing,
    /// next states logged or not (`success` among them), some trajectories succeeding.
    fn random_batches() -> impl Iterator<Item = StepBatch> {
        use crate::schema::columns::{GROUP_ID, REWARD, STEP, TRAJ_ID};
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as usize
        };
        (0..300).map(move |_| {
            let (mut group, mut traj, mut step) = (Vec::new(), Vec::new(), Vec::new());
            let (mut obs, mut next_obs, mut reward) = (Vec::new(), Vec::new(), Vec::new());
            for g in 0..1 + next(4) {
                for t in 0..1 + next(4) {
                    let len = 1 + next(4);
                    for k in 0..len {
                        group.push(format!("g{g}"));
                        traj.push(format!("g{g}t{t}"));
                        step.push(k as i64);
                        obs.push([None, Some("A"), Some("B"), Some("C")][next(4)]);
                        next_obs.push([None, Some("A"), Some("D"), Some("success")][next(4)]);
                        reward.push(if k + 1 == len { next(2) as f64 } else { 0.0 });
                    }
                }
            }
            let columns = vec![
                Column::new(GROUP_ID.into(), group),
                Column::new(TRAJ_ID.into(), traj),
                Column::new(STEP.into(), step),
                Column::new(REWARD.into(), reward),
                Column::new(OBS.into(), obs),
                Column::new(NEXT_OBS.into(), next_obs),
            ];
            let frame = polars::prelude::DataFrame::new_infer_height(columns).unwrap();
            StepBatch::new(frame, 0.5, 1.0).unwrap()
        })
    }

    #[test]
    fn interned_states_are_the_texts_and_ends_of_each_step() {
        for batch in random_batches() {
            let states = batch.states();
            // However the groups are split between runs, the same nodes and steps.
            for target in [1, 2, 5] {
                assert_eq!(&crate::batch::BatchStates::in_runs(&batch, target), states);
            }
            let (obs, next_obs) = (batch.texts(OBS).unwrap(), batch.texts(NEXT_OBS).unwrap());
            for g in 0..batch.groups.len() {
                let (nodes, steps) = (states.nodes(g), states.steps(g));
                let rows: Vec<u32> = batch.group_rows(g).collect();
                assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), rows);
                // A state node's text, from the row that named it.
                let text = |node: u32| match nodes[node as usize] {
                    NodeKind::State { row, from_next } => {
                        (if from_next { next_obs } else { obs }).get(row as usize)
                    }
                    _ => panic!("node {node} is not a state"),
                };
                for (i, &(row, source, target)) in steps.iter().enumerate() {
                    let r = row as usize;
                    assert_eq!(text(source), obs.get(r));
                    // Two steps leave one node exactly when both have the same text.
                    for &(other, other_source, _) in steps {
                        let same = obs.get(r).is_some() && obs.get(r) == obs.get(other as usize);
                        assert_eq!(source == other_source, same || other == row);
                    }
                    let traj = &batch.trajs[batch.traj_of_row[r] as usize];
                    let last = traj.rows.last() == Some(&row);
                    let next = next_obs.get(r);
                    if next == Some("success") || (last && traj.success) {
                        assert_eq!(nodes[target as usize], NodeKind::Success);
                    } else if !last {
                        // The next step's state, or a node of its own where it has no text.
                        match obs.get(steps[i + 1].0 as usize) {
                            Some(_) => assert_eq!(target, steps[i + 1].1),
                            None => {
                                assert_eq!((text(target), target == steps[i + 1].1), (None, false))
                            }
                        }
                    } else if let Some(next) = next {
                        assert_eq!(text(target), Some(next));
                        // Merged with the state of that text, wherever it was seen.
                        for &(other, other_source, _) in steps {
                            if obs.get(other as usize) == Some(next) {
                                assert_eq!(target, other_source);
                            }
                        }
                    } else {
                        assert_eq!(
                            nodes[target as usize],
                            NodeKind::Fail {
                                traj: batch.traj_of_row[r]
                            }
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_graph_rebuilt_over_another_is_the_graph_built_afresh() {
        let b = two_paths();
        let columns = GraphColumns::of(&b);
        let (mut reused, mut scratch) = (GroupGraph::default(), GraphScratch::default());
        for g in [0, 1, 0] {
            reused.rebuild(&columns, &b, g, &mut scratch);
            let fresh = GroupGraph::build(&b, g);
            assert_eq!(reused.graph.node_count(), fresh.graph.node_count());
            assert_eq!(reused.graph.edge_count(), fresh.graph.edge_count());
            let nodes = |x: &GroupGraph| x.graph.node_weights().cloned().collect::<Vec<_>>();
            assert_eq!(nodes(&reused), nodes(&fresh));
            let ends = |x: &GroupGraph| {
                x.endpoints
                    .iter()
                    .map(|&(r, s, t)| (r, s.index(), t.index()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ends(&reused), ends(&fresh));
            assert_eq!(reused.distance, fresh.distance);
            assert_eq!(reused.reaches_success, fresh.reaches_success);
            assert_eq!((reused.success, reused.d_max), (fresh.success, fresh.d_max));
        }
    }

    #[test]
    fn group_without_success_has_unit_distance() {
        // Both fail: A → B → FAIL(a), A → FAIL(b). No SUCCESS node; d_max = 0, so d ≡ 0 + 1.
        let rows: [Row; 3] = [
            ("g", "a", 0, "A", 0.0, true),
            ("g", "a", 1, "B", 0.0, true),
            ("g", "b", 0, "A", 0.0, true),
        ];
        let b = batch(&rows);
        let g = GroupGraph::build(&b, 0);
        assert!(g.success.is_none());
        // A, B, FAIL(a), FAIL(b).
        assert_eq!(g.graph.node_count(), 4);
        assert_eq!(g.d_max, 0.0);
        assert_eq!(g.distance, vec![1.0; 4]);
        assert!(g.reaches_success.iter().all(|&r| !r));
    }

    #[test]
    fn costs_weight_the_distance() {
        // a = A (cost 1) → B (cost 1) → SUCCESS; b = A (cost 1.5) → SUCCESS.
        // d(B) = 1, d(A) = min(1 + 1, 1.5) = 1.5 = d_max.
        let rows: [Row; 3] = [
            ("g", "a", 0, "A", 0.0, true),
            ("g", "a", 1, "B", 1.0, true),
            ("g", "b", 0, "A", 1.0, true),
        ];
        let cost = Column::new(COST.into(), [1.0, 1.0, 1.5]);
        let b = batch_with_columns(&rows, vec![cost]);
        let g = GroupGraph::build(&b, 0);
        assert_eq!(g.graph.node_count(), 3);
        assert_eq!(g.distance[state(&g, &b, "B").index()], 1.0);
        assert_eq!(g.distance[state(&g, &b, "A").index()], 1.5);
        assert_eq!(g.d_max, 1.5);
    }

    #[test]
    fn unit_costs_give_dijkstras_distances() {
        // 60 trajectories wandering over 25 states (revisits, cycles, dead ends), a third of
        // them successful: without a cost column the distances come from a breadth-first
        // search; with costs of 1 logged, from Dijkstra. They must agree node for node.
        let mut owned = Vec::new();
        let mut state = 7u64;
        for t in 0..60 {
            let steps = 2 + t % 9;
            for step in 0..steps {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let reward = if step + 1 == steps && t % 3 == 0 {
                    1.0
                } else {
                    0.0
                };
                owned.push((
                    format!("t{t}"),
                    step as i64,
                    format!("S{}", (state >> 33) % 25),
                    reward,
                ));
            }
        }
        let rows: Vec<Row> = owned
            .iter()
            .map(|(t, step, obs, reward)| ("g", t.as_str(), *step, obs.as_str(), *reward, true))
            .collect();
        let unit = batch(&rows);
        let costs = Column::new(COST.into(), vec![1.0; rows.len()]);
        let logged = batch_with_columns(&rows, vec![costs]);
        let (bfs, dijkstra) = (GroupGraph::build(&unit, 0), GroupGraph::build(&logged, 0));
        assert!(bfs.success.is_some());
        assert!(bfs.reaches_success.iter().any(|&r| !r), "a dead end");
        assert!(
            bfs.distance.iter().any(|&d| d > 2.0),
            "paths longer than two steps"
        );
        assert_eq!(bfs.distance, dijkstra.distance);
        assert_eq!(bfs.reaches_success, dijkstra.reaches_success);
        assert_eq!(bfs.d_max, dijkstra.d_max);
    }

    #[test]
    fn logged_next_states_on_last_steps() {
        // a = A → B → SUCCESS. b = C, failed, with logged next_obs "B": its edge merges into B,
        // so d(C) = d(B) + 1 = 2. c = D, failed, with next_obs "success" (verl-agent's literal):
        // its edge goes to SUCCESS, so d(D) = 1 although c failed.
        let rows: [Row; 4] = [
            ("g", "a", 0, "A", 0.0, true),
            ("g", "a", 1, "B", 1.0, true),
            ("g", "b", 0, "C", 0.0, true),
            ("g", "c", 0, "D", 0.0, true),
        ];
        let next = Column::new(NEXT_OBS.into(), [None, None, Some("B"), Some("success")]);
        let b = batch_with_columns(&rows, vec![next]);
        assert!(!b.trajs[1].success && !b.trajs[2].success);
        let g = GroupGraph::build(&b, 0);
        // A, B, SUCCESS, C, D: no FAIL node.
        assert_eq!(g.graph.node_count(), 5);
        assert!(!g
            .graph
            .node_weights()
            .any(|k| matches!(k, NodeKind::Fail { .. })));
        let (bb, c, d) = (state(&g, &b, "B"), state(&g, &b, "C"), state(&g, &b, "D"));
        assert_eq!(g.endpoints[2], (2, c, bb));
        assert_eq!(g.endpoints[3], (3, d, g.success.unwrap()));
        assert_eq!(g.distance[c.index()], 2.0);
        assert_eq!(g.distance[d.index()], 1.0);
        assert_eq!(g.d_max, 2.0);

        // A logged next state that no row has as obs is a node of its own (from_next), with
        // no way on: d = d_max + 1.
        let next = Column::new(NEXT_OBS.into(), [None, None, Some("Z"), None]);
        let b = batch_with_columns(&rows, vec![next]);
        let g = GroupGraph::build(&b, 0);
        let (_, _, z) = g.endpoints[2];
        assert_eq!(
            g.graph[z],
            NodeKind::State {
                row: 2,
                from_next: true
            }
        );
        assert_eq!(g.label(&b, z, &Banner::default(), 4, 10), ["Z"]);
        // a: A 2, B 1; d_max = 2 → unreachable nodes (Z, C, FAIL(c), D) get 3.
        assert_eq!(g.distance[z.index()], 3.0);
        assert!(!g.reaches_success[z.index()]);
    }

    #[test]
    fn labels_skip_banners_and_keep_lines() {
        let rows: [Row; 2] = [
            ("g", "a", 0, "=====\n##\nyou see a  mug\nhere", 0.0, true),
            ("g", "a", 1, "you are in the middle of a room", 0.0, true),
        ];
        let b = batch(&rows);
        let g = GroupGraph::build(&b, 0);
        let (_, first, second) = g.endpoints[0];
        let (_, _, fail) = g.endpoints[1];
        let none = Banner::default();
        // Line 3 is the first with ≥ 3 words of letters ("you", "see", "mug"); from there on the
        // lines are kept as they are.
        assert_eq!(
            g.label(&b, first, &none, 4, 100),
            ["you see a  mug", "here"]
        );
        // The first 10 characters, then an ellipsis.
        assert_eq!(g.label(&b, second, &none, 4, 10), ["you are in…"]);
        assert_eq!(g.label(&b, fail, &none, 4, 10), ["FAIL"]);
        assert_eq!(GroupGraph::action(&b, 0), "");
    }

    #[test]
    fn boards_are_labelled_line_by_line_abridged_by_lines() {
        let board = "Here is the current board layout:\n# # # #\n# P X #\n\n# _ O #\n# # # #\n\nEnter your move.";
        let rows: [Row; 1] = [("g", "a", 0, board, 1.0, true)];
        let b = batch(&rows);
        let g = GroupGraph::build(&b, 0);
        let (_, state, _) = g.endpoints[0];
        assert_eq!(
            g.label(&b, state, &Banner::default(), 8, 40),
            [
                "Here is the current board layout:",
                "# # # #",
                "# P X #",
                "# _ O #",
                "# # # #",
                "Enter your move."
            ]
        );
        // Four lines at most: three, then how many were left out.
        assert_eq!(
            g.label(&b, state, &Banner::default(), 4, 12),
            ["Here is the …", "# # # #", "# P X #", "… 3 more lines"]
        );
    }
    #[test]
    fn the_groups_banner_is_left_out_of_its_labels() {
        let board = |row: &str| {
            format!(
                "Here is the current board layout:\n# # # #\n{row}\n# # # #\n\nEnter your move."
            )
        };
        let (a, b_) = (board("# P X #"), board("# X P #"));
        let rows: [Row; 2] = [
            ("g", "a", 0, a.as_str(), 0.0, true),
            ("g", "a", 1, b_.as_str(), 1.0, true),
        ];
        let b = batch(&rows);
        let g = GroupGraph::build(&b, 0);
        let banner = g.banner(&b);
        // The shared wall rows stay: only the lines of words go.
        assert_eq!(banner.head, ["Here is the current board layout:"]);
        assert_eq!(banner.tail, ["Enter your move."]);
        let (_, first, _) = g.endpoints[0];
        assert_eq!(
            g.label(&b, first, &banner, 8, 40),
            ["# # # #", "# P X #", "# # # #"]
        );
        // One state alone has no banner to leave out.
        let one = batch(&rows[..1]);
        assert!(GroupGraph::build(&one, 0).banner(&one).is_empty());
    }
}
