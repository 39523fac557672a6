//! State-graph statistics (GraphGPO's view of the logs): nodes, edges, merge ratio, reachability,
//! distance-to-goal histogram, revisits, dead ends, and the paper's headline counts: progress steps
//! inside failed trajectories and non-progress steps inside successful ones (Fig. 1: 22.0% and 65.3%).

use crate::batch::StepBatch;
use crate::graph::{GraphColumns, GraphScratch, GroupGraph, NodeKind};
use petgraph::graph::NodeIndex;
use polars::prelude::{PlHashMap, PlHashSet};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct GraphStats {
    pub groups: usize,
    pub groups_with_success: usize,
    /// State nodes (SUCCESS and FAIL nodes excluded).
    pub nodes: usize,
    /// Distinct (s, a, s′) edges.
    pub edges: usize,
    pub steps: usize,
    /// Steps per state node: how much the trajectories merge.
    pub steps_per_node: f64,
    pub nodes_reaching_success: usize,
    /// Share of state nodes that can reach SUCCESS.
    pub share_nodes_reaching_success: f64,
    /// d(s) → state nodes at that distance, for nodes that reach SUCCESS.
    pub distance_histogram: BTreeMap<u32, usize>,
    /// Steps whose state was already visited earlier in the same trajectory.
    pub revisit_steps: usize,
    pub trajectories_with_cycles: usize,
    /// Steps into a state that cannot reach SUCCESS, in groups that have a success.
    pub dead_end_steps: usize,
    pub failed_steps: usize,
    /// Steps of failed trajectories with d(s′) < d(s).
    pub progress_steps_in_failures: usize,
    pub share_progress_in_failures: f64,
    pub success_steps: usize,
    /// Steps of successful trajectories with d(s′) ≥ d(s).
    pub non_progress_steps_in_successes: usize,
    pub share_non_progress_in_successes: f64,
}

impl GraphStats {
    fn add(&mut self, o: &GraphStats) {
        self.groups += o.groups;
        self.groups_with_success += o.groups_with_success;
        self.nodes += o.nodes;
        self.edges += o.edges;
        self.steps += o.steps;
        for (d, n) in &o.distance_histogram {
            *self.distance_histogram.entry(*d).or_default() += n;
        }
        self.revisit_steps += o.revisit_steps;
        self.trajectories_with_cycles += o.trajectories_with_cycles;
        self.dead_end_steps += o.dead_end_steps;
        self.failed_steps += o.failed_steps;
        self.progress_steps_in_failures += o.progress_steps_in_failures;
        self.success_steps += o.success_steps;
        self.non_progress_steps_in_successes += o.non_progress_steps_in_successes;
        self.nodes_reaching_success += o.nodes_reaching_success;
    }

    fn finish(mut self) -> Self {
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        self.steps_per_node = ratio(self.steps, self.nodes);
        self.share_nodes_reaching_success = ratio(self.nodes_reaching_success, self.nodes);
        self.share_progress_in_failures = ratio(self.progress_steps_in_failures, self.failed_steps);
        self.share_non_progress_in_successes =
            ratio(self.non_progress_steps_in_successes, self.success_steps);
        self
    }
}

/// Sets reused from group to group (a window may hold a group per row).
#[derive(Default)]
struct Scratch<'a> {
    graph: GroupGraph,
    building: GraphScratch,
    edges: PlHashSet<(u32, &'a str, u32)>,
    seen: PlHashSet<u32>,
    /// Rows leaving each node: a state node's are its exact anchor cluster.
    leaving: Vec<usize>,
    /// d(s) of each state node that reaches SUCCESS, for the histogram.
    distances: Vec<u32>,
}

/// The group's graph statistics but the distance histogram, whose distances are left in
/// `scratch.distances`; `cluster` is told the size of each of its exact anchor clusters.
fn group_stats<'a>(
    batch: &'a StepBatch,
    columns: &GraphColumns<'a>,
    g: usize,
    scratch: &mut Scratch<'a>,
    cluster: &mut impl FnMut(usize),
) -> GraphStats {
    if batch.groups[g].n_rows == 1 {
        one_step_stats(batch, columns, g, &mut scratch.distances, cluster)
    } else {
        built_graph_stats(batch, columns, g, scratch, cluster)
    }
}

/// [`group_stats`] of a one-step group, whose graph needs no building: its one state is its
/// step's exact anchor cluster, and it has one edge.
fn one_step_stats(
    batch: &StepBatch,
    columns: &GraphColumns,
    g: usize,
    distances: &mut Vec<u32>,
    cluster: &mut impl FnMut(usize),
) -> GraphStats {
    let step = columns.one_step(batch, g);
    cluster(1);
    distances.clear();
    distances.extend(step.distance.map(|d| d.round() as u32));
    let success = batch.trajs[batch.groups[g].trajs[0] as usize].success;
    GraphStats {
        groups: 1,
        groups_with_success: step.success as usize,
        nodes: step.states,
        edges: 1,
        steps: 1,
        nodes_reaching_success: step.distance.is_some() as usize,
        failed_steps: !success as usize,
        progress_steps_in_failures: (!success && step.progress) as usize,
        success_steps: success as usize,
        non_progress_steps_in_successes: (success && !step.progress) as usize,
        ..Default::default()
    }
}

/// [`group_stats`] from the group's graph, built in `scratch`.
fn built_graph_stats<'a>(
    batch: &'a StepBatch,
    columns: &GraphColumns<'a>,
    g: usize,
    scratch: &mut Scratch<'a>,
    cluster: &mut impl FnMut(usize),
) -> GraphStats {
    scratch
        .graph
        .rebuild(columns, batch, g, &mut scratch.building);
    let graph = &scratch.graph;
    // GiGPO's exact anchor clusters are the rows leaving each state node: a node stands for one
    // observation text (a row without one gets a node of its own), as a cluster does. Counting
    // them here spares hashing every observation a second time.
    let leaving = &mut scratch.leaving;
    leaving.clear();
    leaving.resize(graph.graph.node_count(), 0);
    for &(_, source, _) in &graph.endpoints {
        leaving[source.index()] += 1;
    }
    leaving.iter().filter(|&&n| n > 0).for_each(|&n| cluster(n));
    let mut s = GraphStats {
        groups: 1,
        groups_with_success: graph.success.is_some() as usize,
        ..Default::default()
    };
    scratch.distances.clear();
    for n in graph.graph.node_indices() {
        if !matches!(graph.graph[n], NodeKind::State { .. }) {
            continue;
        }
        s.nodes += 1;
        if graph.reaches_success[n.index()] {
            s.nodes_reaching_success += 1;
            scratch
                .distances
                .push(graph.distance[n.index()].round() as u32);
        }
    }
    s.edges = distinct_edges(&graph.endpoints, columns, &mut scratch.edges);
    s.steps = graph.endpoints.len();
    // The endpoints are in the order of the group's trajectories and their rows.
    let mut endpoints = graph.endpoints.iter();
    for &t in &batch.groups[g].trajs {
        let traj = &batch.trajs[t as usize];
        let seen = &mut scratch.seen;
        seen.clear();
        let mut cycle = false;
        for _ in &traj.rows {
            let &(_, source, target) = endpoints.next().expect("an endpoint per row");
            let (source, target) = (source.index(), target.index());
            if !seen.insert(source as u32) {
                s.revisit_steps += 1;
                cycle = true;
            }
            if graph.success.is_some() && !graph.reaches_success[target] {
                s.dead_end_steps += 1;
            }
            let progress = graph.distance[target] < graph.distance[source];
            if traj.success {
                s.success_steps += 1;
                s.non_progress_steps_in_successes += !progress as usize;
            } else {
                s.failed_steps += 1;
                s.progress_steps_in_failures += progress as usize;
            }
        }
        s.trajectories_with_cycles += cycle as usize;
    }
    s
}

/// Steps from which a group's distinct edges are counted on every thread (see [`distinct_edges`]).
const SHARDED_EDGES_FROM_STEPS: usize = 1 << 16;

/// The number of distinct (s, a, s′) edges among a group's steps. Each step hashes its action's
/// text, so a group of a million steps, one unit read whole after its last row while nothing else
/// runs, would count them on one core: from [`SHARDED_EDGES_FROM_STEPS`] steps, each thread counts
/// the edges of its share of the (s, s′) pairs, and the shards' counts add up.
fn distinct_edges<'a>(
    endpoints: &[(u32, NodeIndex, NodeIndex)],
    columns: &GraphColumns<'a>,
    edges: &mut PlHashSet<(u32, &'a str, u32)>,
) -> usize {
    // One step is one edge (a window of single-row groups asks a million times).
    if endpoints.len() <= 1 {
        return endpoints.len();
    }
    if endpoints.len() < SHARDED_EDGES_FROM_STEPS {
        edges.clear();
        edges.extend(endpoints.iter().map(|&e| columns.edge(e)));
        return edges.len();
    }
    edges_in_shards(endpoints, columns, rayon::current_num_threads())
}

/// [`distinct_edges`] counted in `shards` parts, each the edges of a share of the (s, s′) pairs
/// (an edge is in one share only, so the parts' counts add up to the whole). A share numbers its
/// actions first: the edges are then three numbers, and an edge seen before is recognised
/// without reading its action's text again where the column holds it (a miss a step).
fn edges_in_shards(
    endpoints: &[(u32, NodeIndex, NodeIndex)],
    columns: &GraphColumns,
    shards: usize,
) -> usize {
    let shard_of = |source: NodeIndex, target: NodeIndex| {
        (source.index() ^ target.index().rotate_left(16)) % shards
    };
    (0..shards)
        .into_par_iter()
        .map(|shard| {
            let mut actions: PlHashMap<&str, u32> = PlHashMap::default();
            let mut edges: PlHashSet<(u32, u32, u32)> =
                PlHashSet::with_capacity_and_hasher(endpoints.len() / shards, Default::default());
            let share = endpoints
                .iter()
                .filter(|&&(_, source, target)| shard_of(source, target) == shard);
            for &endpoint in share {
                let (source, action, target) = columns.edge(endpoint);
                let next = actions.len() as u32;
                let action = *actions.entry(action).or_insert(next);
                edges.insert((source, action, target));
            }
            edges.len()
        })
        .sum()
}

/// Graph statistics added up window by window (integer counts: any order gives the same).
#[derive(Clone, Debug, Default)]
pub struct GraphBuilder {
    overall: GraphStats,
    per_iteration: BTreeMap<i64, GraphStats>,
}

impl GraphBuilder {
    /// The statistics of every group of `batch`.
    /// The statistics of `batch`'s groups' graphs; `cluster` is told the size of each exact
    /// anchor cluster (GiGPO's step groups) with its group's iteration.
    pub fn of(batch: &StepBatch, mut cluster: impl FnMut(Option<i64>, usize)) -> Self {
        let mut out = GraphBuilder::default();
        let columns = GraphColumns::of(batch);
        let mut scratch = Scratch::default();
        // Each run of groups of one iteration is added up on its own, its distances counted in a
        // vector by distance, and then once into the totals and its iteration's: a window can
        // hold a group per row, and three ordered-map updates a group cost more than its graph.
        let groups = &batch.groups;
        let mut run = GraphStats::default();
        let mut run_distances: Vec<usize> = Vec::new();
        for g in 0..groups.len() {
            let iteration = groups[g].iteration;
            let s = group_stats(batch, &columns, g, &mut scratch, &mut |n| {
                cluster(iteration, n)
            });
            run.add(&s);
            for &d in &scratch.distances {
                let d = d as usize;
                if d >= run_distances.len() {
                    run_distances.resize(d + 1, 0);
                }
                run_distances[d] += 1;
            }
            if groups
                .get(g + 1)
                .is_some_and(|next| next.iteration == iteration)
            {
                continue;
            }
            run.distance_histogram = (0..run_distances.len())
                .filter(|&d| run_distances[d] > 0)
                .map(|d| (d as u32, run_distances[d]))
                .collect();
            out.overall.add(&run);
            if let Some(it) = iteration {
                out.per_iteration.entry(it).or_default().add(&run);
            }
            run = GraphStats::default();
            run_distances.clear();
        }
        out
    }

    pub fn merge(&mut self, other: &GraphBuilder) {
        self.overall.add(&other.overall);
        for (it, s) in &other.per_iteration {
            self.per_iteration.entry(*it).or_default().add(s);
        }
    }

    /// Overall, and per iteration (empty without an `iteration` column).
    pub fn finish(self) -> (GraphStats, Vec<(i64, GraphStats)>) {
        (
            self.overall.finish(),
            self.per_iteration
                .into_iter()
                .map(|(i, s)| (i, s.finish()))
                .collect(),
        )
    }
}

/// Statistics over every group, overall and per iteration (empty without an `iteration` column).
pub fn graph_stats(batch: &StepBatch) -> (GraphStats, Vec<(i64, GraphStats)>) {
    GraphBuilder::of(batch, |_, _| {}).finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{batch, batch_with, batch_with_columns, Row};
    use crate::schema::columns::ITERATION;
    use polars::prelude::Column;

    #[test]
    fn hand_counted_group() {
        // T1 (success): A → B → SUCCESS. T2 (fail): A → C → C → FAIL.
        // d: SUCCESS 0, B 1, A 2; C cannot reach SUCCESS → d_max + 1 = 3.
        let b = batch(&[
            ("g", "T1", 0, "A", 0.0, true),
            ("g", "T1", 1, "B", 1.0, true),
            ("g", "T2", 0, "A", 0.0, true),
            ("g", "T2", 1, "C", 0.0, true),
            ("g", "T2", 2, "C", 0.0, true),
        ]);
        let (s, per_iteration) = graph_stats(&b);
        assert!(per_iteration.is_empty());
        assert_eq!(
            (
                s.groups,
                s.groups_with_success,
                s.nodes,
                s.nodes_reaching_success
            ),
            (1, 1, 3, 2)
        );
        assert_eq!((s.edges, s.steps), (5, 5));
        assert_eq!(s.distance_histogram, BTreeMap::from([(1, 1), (2, 1)]));
        assert_eq!(
            (
                s.revisit_steps,
                s.trajectories_with_cycles,
                s.dead_end_steps
            ),
            (1, 1, 3)
        );
        assert_eq!((s.failed_steps, s.progress_steps_in_failures), (3, 0));
        assert_eq!((s.success_steps, s.non_progress_steps_in_successes), (2, 0));
        assert!((s.steps_per_node - 5.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn edges_counted_in_shards_are_the_edges_counted_at_once() {
        // Parallel steps (the same state, action and next state) are one edge; the same states
        // with another action are another.
        let actions = ["go", "go", "take", "go", "go", "go", "take", "look"];
        let b = batch_with(
            &[
                ("g", "T1", 0, "A", 0.0, true),
                ("g", "T1", 1, "B", 0.0, true),
                ("g", "T1", 2, "C", 1.0, true),
                ("g", "T2", 0, "A", 0.0, true),
                ("g", "T2", 1, "B", 0.0, true),
                ("g", "T2", 2, "C", 0.0, true),
                ("g", "T2", 3, "A", 0.0, true),
                ("g", "T2", 4, "B", 0.0, true),
            ],
            &actions,
        );
        let columns = GraphColumns::of(&b);
        let graph = GroupGraph::build_from(&columns, &b, 0);
        let mut edges = PlHashSet::default();
        // T1 (success): A-go-B, B-go-C, C-take-SUCCESS. T2 (failed): A-go-B and B-go-C again,
        // then C-go-A, A-take-B (A to B again, by another action), B-look-FAIL.
        let at_once = distinct_edges(&graph.endpoints, &columns, &mut edges);
        assert_eq!(at_once, 6);
        for shards in 1..=5 {
            assert_eq!(edges_in_shards(&graph.endpoints, &columns, shards), at_once);
        }
    }

    #[test]
    fn groups_added_in_runs_of_an_iteration_are_the_groups_added_one_by_one() {
        // Iterations 0, 1, then 0 again, single-row groups among larger ones: the window adds
        // up each run of one iteration's groups before the totals.
        let groups: [(i64, &[Row]); 5] = [
            (
                0,
                &[
                    ("g1", "a", 0, "A", 0.0, true),
                    ("g1", "a", 1, "B", 1.0, true),
                ],
            ),
            (0, &[("g2", "b", 0, "A", 1.0, true)]),
            (
                1,
                &[
                    ("g3", "c", 0, "A", 0.0, true),
                    ("g3", "d", 0, "C", 1.0, true),
                ],
            ),
            (0, &[("g4", "e", 0, "D", 0.0, true)]),
            (
                0,
                &[
                    ("g5", "f", 0, "E", 0.0, true),
                    ("g5", "f", 1, "E", 1.0, true),
                ],
            ),
        ];
        let with_iteration = |rows: &[Row], iteration: &[i64]| {
            batch_with_columns(rows, vec![Column::new(ITERATION.into(), iteration)])
        };
        let rows: Vec<Row> = groups
            .iter()
            .flat_map(|(_, rows)| rows.iter().copied())
            .collect();
        let iterations: Vec<i64> = groups
            .iter()
            .flat_map(|&(it, rows)| std::iter::repeat_n(it, rows.len()))
            .collect();
        let (overall, per_iteration) = graph_stats(&with_iteration(&rows, &iterations));

        let (mut expected, mut expected_per_iteration) = (GraphStats::default(), BTreeMap::new());
        for &(it, rows) in &groups {
            let (one, _) = graph_stats(&with_iteration(rows, &vec![it; rows.len()]));
            expected.add(&one);
            expected_per_iteration
                .entry(it)
                .or_insert_with(GraphStats::default)
                .add(&one);
        }
        assert_eq!(overall, expected.finish());
        let expected_per_iteration: Vec<(i64, GraphStats)> = expected_per_iteration
            .into_iter()
            .map(|(it, s)| (it, s.finish()))
            .collect();
        assert_eq!(per_iteration, expected_per_iteration);
        assert_eq!((overall.groups, overall.steps), (5, 8));
        assert!(!overall.distance_histogram.is_empty());
    }

    #[test]
    fn a_one_step_group_is_counted_as_its_built_graph() {
        use crate::schema::columns::{
            COST, GROUP_ID, NEXT_OBS, OBS, REWARD, STEP, SUCCESS, TRAJ_ID,
        };
        use polars::prelude::DataFrame;
        // Every way a single step can end: with or without its state's text, a next state that
        // is its own text, another, "success" or none, logged success or a return either side of
        // the threshold, and costs that Dijkstra adds (none, null, fractional, negative, zero,
        // infinite, NaN).
        let texts = [None, Some("A")];
        let nexts = [None, Some("A"), Some("B"), Some("success")];
        let successes = [None, Some(false), Some(true)];
        let costs: [Option<Option<f64>>; 8] = [
            None,
            Some(None),
            Some(Some(1.0)),
            Some(Some(2.6)),
            Some(Some(-2.0)),
            Some(Some(0.0)),
            Some(Some(f64::INFINITY)),
            Some(Some(f64::NAN)),
        ];
        let mut cases = 0;
        for obs in texts {
            for next in nexts {
                for success in successes {
                    for reward in [0.0, 1.0] {
                        for cost in costs {
                            let mut columns = vec![
                                Column::new(GROUP_ID.into(), ["g"]),
                                Column::new(TRAJ_ID.into(), ["t"]),
                                Column::new(STEP.into(), [0i64]),
                                Column::new(REWARD.into(), [reward]),
                                Column::new(OBS.into(), [obs]),
                                Column::new(NEXT_OBS.into(), [next]),
                            ];
                            if let Some(success) = success {
                                columns.push(Column::new(SUCCESS.into(), [success]));
                            }
                            if let Some(cost) = cost {
                                columns.push(Column::new(COST.into(), [cost]));
                            }
                            let frame = DataFrame::new(1, columns).unwrap();
                            let batch = StepBatch::new(frame, 0.5, 1.0).unwrap();
                            let graph_columns = GraphColumns::of(&batch);
                            let mut scratch = Scratch::default();
                            let (mut told, mut built) = (Vec::new(), Vec::new());
                            let one = one_step_stats(
                                &batch,
                                &graph_columns,
                                0,
                                &mut scratch.distances,
                                &mut |n| told.push(n),
                            );
                            let told_distances = scratch.distances.clone();
                            let graph = built_graph_stats(
                                &batch,
                                &graph_columns,
                                0,
                                &mut scratch,
                                &mut |n| built.push(n),
                            );
                            let case = (obs, next, success, reward, cost);
                            assert_eq!(one, graph, "{case:?}");
                            assert_eq!(told_distances, scratch.distances, "{case:?}");
                            assert_eq!(told, built, "{case:?}");
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 2 * 4 * 3 * 2 * 8);
    }
}
