//! A batch's states, interned once: each group's nodes (state keys, SUCCESS, FAIL) and the
//! steps between them, from which `crate::graph` builds each group's state graph. Here, beside
//! the batch that caches them, so that the batch needs nothing from the graphs built on it.

use super::StepBatch;
use crate::schema::columns::{NEXT_OBS, OBS};
use polars::prelude::{PlHashMap, StringChunked};
use rayon::prelude::*;

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

/// Every group's nodes and steps, the states interned once for a batch ([`StepBatch::states`]):
/// GiGPO's exact anchor clusters, HGPO's state sequences, GraphGPO's graphs and the graph
/// statistics share them, so each observation is hashed once however many of them a run asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchStates {
    /// Group g's nodes, in the order [`crate::graph::GroupGraph`] adds them:
    /// `nodes[node_starts[g]..node_starts[g + 1]]`.
    nodes: Vec<NodeKind>,
    node_starts: Vec<usize>,
    /// Each step's (row, source, target), nodes numbered within the group, in the order of the
    /// group's trajectories and their rows (`batch.group_rows`):
    /// `steps[step_starts[g]..step_starts[g + 1]]`.
    steps: Vec<(u32, u32, u32)>,
    step_starts: Vec<usize>,
}

impl BatchStates {
    pub fn of(batch: &StepBatch) -> Self {
        Self::in_runs(
            batch,
            (batch.len() / (4 * rayon::current_num_threads())).max(1 << 14),
        )
    }

    /// Groups are independent: interned in parallel over runs of whole groups of about `target`
    /// rows, each run with a table of its own, and laid end to end in group order.
    pub(crate) fn in_runs(batch: &StepBatch, target: usize) -> Self {
        // Looked up once for all the groups (a look-up by name costs as much as a small group).
        let texts = (batch.texts(OBS), batch.texts(NEXT_OBS));
        let mut runs = Vec::new();
        let (mut from, mut rows) = (0, 0);
        for (g, group) in batch.groups.iter().enumerate() {
            rows += group.n_rows;
            if rows >= target {
                runs.push(from..g + 1);
                (from, rows) = (g + 1, 0);
            }
        }
        runs.push(from..batch.groups.len());
        let parts: Vec<BatchStates> = runs
            .into_par_iter()
            .map(|groups| {
                let mut part = BatchStates::empty();
                let mut by_key = PlHashMap::default();
                for g in groups {
                    part.intern(texts, batch, g, &mut by_key);
                }
                part
            })
            .collect();
        // The first run's part is the start (a window of one run is not copied).
        let mut parts = parts.into_iter();
        let mut states = parts.next().unwrap_or_else(BatchStates::empty);
        for part in parts {
            let (nodes, steps) = (states.nodes.len(), states.steps.len());
            states.nodes.extend(part.nodes);
            states.steps.extend(part.steps);
            states
                .node_starts
                .extend(part.node_starts[1..].iter().map(|&k| k + nodes));
            states
                .step_starts
                .extend(part.step_starts[1..].iter().map(|&k| k + steps));
        }
        states
    }

    fn empty() -> Self {
        BatchStates {
            node_starts: vec![0],
            step_starts: vec![0],
            ..Default::default()
        }
    }

    /// Group g's nodes, in the order [`crate::graph::GroupGraph`] adds them.
    pub fn nodes(&self, g: usize) -> &[NodeKind] {
        &self.nodes[self.node_starts[g]..self.node_starts[g + 1]]
    }

    /// Group g's steps (row, source, target), in `batch.group_rows` order.
    pub fn steps(&self, g: usize) -> &[(u32, u32, u32)] {
        &self.steps[self.step_starts[g]..self.step_starts[g + 1]]
    }

    /// Appends group g's nodes and steps; `by_key` is the text → node table, kept from one group
    /// to the next for its allocation.
    fn intern<'a>(
        &mut self,
        (obs, next_obs): (Option<&'a StringChunked>, Option<&'a StringChunked>),
        batch: &StepBatch,
        g: usize,
        by_key: &mut PlHashMap<&'a str, u32>,
    ) {
        let group = &batch.groups[g];
        // Sized for every row's state up front: growing would hash each long text again. A
        // table grown by a large group is dropped rather than cleared for each small one after.
        if by_key.capacity() > 4 * (group.n_rows + group.trajs.len()).max(256) {
            *by_key = PlHashMap::default();
        }
        by_key.clear();
        by_key.reserve(group.n_rows + group.trajs.len());
        let first = self.nodes.len();
        let mut success = None;
        // Interns state keys (borrowed from the batch) into nodes numbered within the group; a
        // missing observation cannot be matched with anything and gets its own node.
        let add = |nodes: &mut Vec<NodeKind>, kind: NodeKind| {
            nodes.push(kind);
            (nodes.len() - 1 - first) as u32
        };
        let mut node_for =
            |nodes: &mut Vec<NodeKind>, key: Option<&'a str>, row: u32, from_next| {
                let kind = NodeKind::State { row, from_next };
                match key {
                    None => add(nodes, kind),
                    Some(k) => *by_key.entry(k).or_insert_with(|| add(nodes, kind)),
                }
            };
        for &t in &group.trajs {
            let traj = &batch.trajs[t as usize];
            // The node of the next step's observation, found as this step's target: each text is
            // hashed once (a state with no text is a node of its own each time, so not carried).
            let mut carried = None;
            for (k, &row) in traj.rows.iter().enumerate() {
                let r = row as usize;
                let source = carried.take().unwrap_or_else(|| {
                    node_for(&mut self.nodes, obs.and_then(|o| o.get(r)), row, false)
                });
                let logged_next = next_obs.and_then(|o| o.get(r));
                let last = k + 1 == traj.rows.len();
                let target = if logged_next == Some("success") || (last && traj.success) {
                    *success.get_or_insert_with(|| add(&mut self.nodes, NodeKind::Success))
                } else if !last {
                    let key = obs.and_then(|o| o.get(traj.rows[k + 1] as usize));
                    let node = node_for(&mut self.nodes, key, traj.rows[k + 1], false);
                    carried = key.map(|_| node);
                    node
                } else if let Some(next) = logged_next {
                    node_for(&mut self.nodes, Some(next), row, true)
                } else {
                    add(&mut self.nodes, NodeKind::Fail { traj: t })
                };
                self.steps.push((row, source, target));
            }
        }
        self.node_starts.push(self.nodes.len());
        self.step_starts.push(self.steps.len());
    }
}
