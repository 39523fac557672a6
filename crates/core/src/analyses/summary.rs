//! `credit analyze`: what is in the logs: groups, success, lengths, invalid actions, degenerate
//! groups, GiGPO's exact-anchor step groups, padding duplicates, and the logged SPA progress and
//! HISR segments ([`super::progress`]).

use super::graphs::{GraphBuilder, GraphStats};
use super::progress::{
    progress_part, segment_part, ProgressBuilder, ProgressPart, ProgressStats, SegmentBuilder,
    SegmentPart, SegmentStats,
};
pub use super::stats::{size_distribution, LengthStats, SizeDistribution};
use super::stats::{Counts, RunningSum, SizeCounts};
use crate::batch::StepBatch;
use crate::ingest::IngestReport;
use crate::methods::gigpo::anchor_clusters;
use crate::methods::hisr;
use crate::wording::{agree, plural};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub files: usize,
    /// Which log column feeds each field, and what became of the other columns named for it.
    pub columns: Vec<crate::schema::ColumnUse>,
    pub rows: usize,
    /// Distinct iterations, when an `iteration` column exists.
    pub iterations: Option<usize>,
    pub groups: usize,
    pub trajectories: usize,
    pub rollouts_per_group: RolloutsPerGroup,
    pub success: Success,
    pub length: Lengths,
    pub invalid_actions: Invalid,
    pub degenerate: Degenerate,
    pub step_groups: StepGroups,
    /// GraphGPO's state graphs, overall.
    pub graph: GraphStats,
    /// The same per iteration (empty without an `iteration` column).
    pub graph_per_iteration: Vec<(i64, GraphStats)>,
    /// SPA's per-step progress, when a `progress` column is logged.
    pub progress: Option<ProgressStats>,
    /// HISR's segments, when a `segment` or `segment_reward` column is logged.
    pub segments: Option<SegmentStats>,
    /// Single-turn logs (every rollout one step): zero-std groups and rewards by group size.
    pub single_turn: Option<SingleTurn>,
    /// Exact copies of earlier rows dropped at ingest (verl-agent batch padding).
    pub padding_duplicates: u64,
    /// Rows skipped under `--lenient`, per reason.
    pub skipped: BTreeMap<String, u64>,
    /// What to look at: suspicious findings, each with what it means.
    pub diagnostics: Vec<String>,
    /// What ingest noted: files skipped, a second read, ids given both as numbers and strings.
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RolloutsPerGroup {
    pub min: usize,
    pub mean: f64,
    pub max: usize,
    /// rollouts → number of groups with that many.
    pub histogram: BTreeMap<usize, usize>,
    pub single_rollout_groups: usize,
}

/// A rate within one task or iteration: `n` counts trajectories (success) or steps (invalid actions).
#[derive(Clone, Debug, Serialize)]
pub struct Rate {
    pub key: String,
    pub n: usize,
    pub rate: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Success {
    pub overall: f64,
    pub per_task: Vec<Rate>,
    pub per_iteration: Vec<Rate>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Lengths {
    pub success: LengthStats,
    pub failure: LengthStats,
    /// Trajectories per length, successes then failures (for the report's histogram).
    #[serde(skip)]
    pub histograms: [Counts; 2],
}

#[derive(Clone, Debug, Serialize)]
pub struct Invalid {
    /// Whether a `valid` column was logged (otherwise every action counts as valid).
    pub logged: bool,
    pub steps: usize,
    pub rate: f64,
    pub per_task: Vec<Rate>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Degenerate {
    pub all_success_groups: usize,
    pub all_fail_groups: usize,
    pub share_of_groups: f64,
    pub share_of_steps: f64,
}

/// What matters in single-turn logs (one step per rollout, as verl's GRPO writes): which groups
/// give a learning signal at all.
#[derive(Clone, Debug, Serialize)]
pub struct SingleTurn {
    /// Groups whose rewards all equal (zero std: GRPO's advantage is 0 for every rollout).
    pub zero_std_groups: usize,
    pub groups: usize,
    /// Share of groups with a reward spread: the groups that teach anything.
    pub effective_group_fraction: f64,
    /// Per iteration: `n` groups, `rate` the share with zero std.
    pub zero_std_per_iteration: Vec<Rate>,
    /// Rewards by the number of rollouts in their group.
    pub reward_by_group_size: Vec<GroupSizeRewards>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupSizeRewards {
    pub group_size: usize,
    pub groups: usize,
    pub rollouts: usize,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// reward → rollouts, while there are at most 20 distinct rewards (else empty).
    pub values: Vec<(f64, usize)>,
}

/// The single-turn statistics of one group size, added up.
#[derive(Clone, Debug)]
struct SizeRewards {
    groups: usize,
    sum: RunningSum,
    min: f64,
    max: f64,
    /// f64 bits → rollouts; `None` once more than 20 distinct values were seen.
    values: Option<BTreeMap<u64, usize>>,
}

impl Default for SizeRewards {
    fn default() -> Self {
        SizeRewards {
            groups: 0,
            sum: RunningSum::default(),
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            values: Some(BTreeMap::new()),
        }
    }
}

impl SizeRewards {
    fn add(&mut self, rewards: &[f64]) {
        self.groups += 1;
        for &r in rewards {
            self.sum.add(r);
            self.min = self.min.min(r);
            self.max = self.max.max(r);
            if let Some(values) = &mut self.values {
                // +0.0 for −0.0, so one zero.
                *values.entry((r + 0.0).to_bits()).or_default() += 1;
                if values.len() > 20 {
                    self.values = None;
                }
            }
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct StepGroups {
    /// Whether an `obs` column was logged (otherwise every step is its own cluster).
    pub obs_logged: bool,
    pub overall: SizeDistribution,
    pub per_iteration: Vec<(i64, SizeDistribution)>,
    /// The same with verl-agent's similarity groups (`--set gigpo.similarity=θ`), one entry per
    /// threshold asked for ([`SummaryPart::with_similarity`]); empty unless asked or without `obs`.
    pub similarity: Vec<SimilarityGroups>,
}

/// Step groups merged at a similarity threshold.
#[derive(Clone, Debug, Serialize)]
pub struct SimilarityGroups {
    pub threshold: f64,
    pub overall: SizeDistribution,
}

/// The thresholds `analyze --similarity` tries by default: verl-agent's default (0.95), the one
/// its released search script uses (0.9), and a looser one. Opt-in because similarity groups
/// cost a ratio per pair of distinct states in a group (about 50 s per 200k synthetic rows).
pub const SIMILARITY_THRESHOLDS: [f64; 3] = [0.95, 0.9, 0.8];

/// The counts a window's part and the whole summary share: they add up exactly, window by window
/// ([`Tally::merge`]).
#[derive(Clone, Default)]
struct Tally {
    has_tasks: bool,
    has_iteration: bool,
    valid_logged: bool,
    obs_logged: bool,
    iterations: BTreeSet<Option<i64>>,
    /// key → (trajectories, successes).
    success_by_task: BTreeMap<String, (usize, usize)>,
    /// Per-iteration maps are keyed by the number, so they list 1, 2, …, 10 (not 1, 10, 2).
    success_by_iteration: BTreeMap<Option<i64>, (usize, usize)>,
    trajectories: usize,
    successes: usize,
    lengths: [Counts; 2],
    rows: usize,
    invalid: usize,
    /// task → (steps, invalid steps).
    invalid_by_task: BTreeMap<String, (usize, usize)>,
    all_success: usize,
    all_fail: usize,
    degenerate_steps: usize,
    /// Groups whose rollouts all return the same, overall and per iteration key.
    zero_std: usize,
    zero_std_by_iteration: BTreeMap<Option<i64>, (usize, usize)>,
    clusters: SizeCounts,
    clusters_per_iteration: BTreeMap<i64, SizeCounts>,
    /// Per similarity threshold asked for (none without `obs`).
    similar_clusters: Vec<(f64, SizeCounts)>,
    graph: GraphBuilder,
}

impl Tally {
    fn merge(&mut self, part: Tally) {
        self.has_tasks |= part.has_tasks;
        self.has_iteration |= part.has_iteration;
        self.valid_logged |= part.valid_logged;
        self.obs_logged |= part.obs_logged;
        self.iterations.extend(part.iterations);
        for (k, (n, s)) in part.success_by_task {
            add_rate(&mut self.success_by_task, k, n, s);
        }
        for (k, (n, s)) in part.success_by_iteration {
            add_rate(&mut self.success_by_iteration, k, n, s);
        }
        self.trajectories += part.trajectories;
        self.successes += part.successes;
        for (mine, theirs) in self.lengths.iter_mut().zip(&part.lengths) {
            mine.merge(theirs);
        }
        self.rows += part.rows;
        self.invalid += part.invalid;
        for (k, (n, i)) in part.invalid_by_task {
            add_rate(&mut self.invalid_by_task, k, n, i);
        }
        self.all_success += part.all_success;
        self.all_fail += part.all_fail;
        self.degenerate_steps += part.degenerate_steps;
        self.zero_std += part.zero_std;
        for (k, (n, flat)) in part.zero_std_by_iteration {
            add_rate(&mut self.zero_std_by_iteration, k, n, flat);
        }
        self.clusters.merge(&part.clusters);
        if self.similar_clusters.is_empty() {
            self.similar_clusters = part.similar_clusters;
        } else {
            for ((_, sum), (_, c)) in self.similar_clusters.iter_mut().zip(&part.similar_clusters) {
                sum.merge(c);
            }
        }
        for (it, c) in &part.clusters_per_iteration {
            self.clusters_per_iteration.entry(*it).or_default().merge(c);
        }
        self.graph.merge(&part.graph);
    }
}

/// One window's share of the summary, in a form that adds up exactly ([`SummaryBuilder`]).
pub struct SummaryPart {
    tally: Tally,
    /// Trajectories per group, in group order.
    group_sizes: Vec<usize>,
    /// Each group's rollout returns, group after group (`group_sizes` of them each).
    group_returns: Vec<f64>,
    progress: Option<ProgressPart>,
    segments: std::result::Result<Option<SegmentPart>, String>,
}

fn add_rate<K: Ord>(map: &mut BTreeMap<K, (usize, usize)>, key: K, n: usize, hit: usize) {
    let e = map.entry(key).or_default();
    e.0 += n;
    e.1 += hit;
}

/// Rates counted under keys that are cheap to compare (an iteration, a borrowed task), then
/// keyed as the summary shows them: one text per key, not one per trajectory or group.
/// Consecutive adds of one key (the groups of an iteration, the trajectories of a task) are
/// counted as a run before they go to the map: one look-up per run, not per group.
struct KeyedRates<K> {
    counts: BTreeMap<K, (usize, usize)>,
    run: Option<(K, usize, usize)>,
}

impl<K: Ord> KeyedRates<K> {
    fn new() -> Self {
        KeyedRates {
            counts: BTreeMap::new(),
            run: None,
        }
    }

    fn add(&mut self, key: K, hit: bool) {
        match &mut self.run {
            Some((run_key, n, hits)) if *run_key == key => {
                *n += 1;
                *hits += hit as usize;
            }
            run => {
                if let Some((key, n, hits)) = run.replace((key, 1, hit as usize)) {
                    add_rate(&mut self.counts, key, n, hits);
                }
            }
        }
    }

    fn into_counts(mut self) -> BTreeMap<K, (usize, usize)> {
        if let Some((key, n, hits)) = self.run.take() {
            add_rate(&mut self.counts, key, n, hits);
        }
        self.counts
    }

    fn into_rates(self, name: impl Fn(K) -> String) -> BTreeMap<String, (usize, usize)> {
        let mut rates = BTreeMap::new();
        for (key, (n, hit)) in self.into_counts() {
            add_rate(&mut rates, name(key), n, hit);
        }
        rates
    }
}

/// An iteration as the summary's per-iteration keys write it.
fn iteration_key(iteration: Option<i64>) -> String {
    iteration.map_or("(none)".into(), |i| i.to_string())
}

/// A window's part of the summary; HISR's `hisr` parameters segment it for the segment
/// statistics, as the method would. The state graphs, most of the work, are drawn beside the rest
/// (a window of one large group is otherwise summarised on one core).
pub fn summary_part(batch: &StepBatch, hisr: &hisr::Params) -> SummaryPart {
    let ((graph, clusters, clusters_per_iteration), mut part) = rayon::join(
        || graph_part(batch),
        || summary_part_but_graphs(batch, hisr),
    );
    part.tally.graph = graph;
    part.tally.clusters = clusters;
    part.tally.clusters_per_iteration = clusters_per_iteration;
    part
}

/// The state graphs' statistics, with the exact anchor clusters' sizes that come with them (one
/// cluster per state node), overall and per iteration.
fn graph_part(batch: &StepBatch) -> (GraphBuilder, SizeCounts, BTreeMap<i64, SizeCounts>) {
    let (mut clusters, mut per_iteration) = (SizeCounts::default(), BTreeMap::new());
    let has_iteration = batch.has_iteration();
    let graph = GraphBuilder::of(batch, |iteration, size| {
        clusters.add(size);
        if has_iteration {
            per_iteration
                .entry(iteration.unwrap_or(0))
                .or_insert_with(SizeCounts::default)
                .add(size);
        }
    });
    (graph, clusters, per_iteration)
}

fn summary_part_but_graphs(batch: &StepBatch, hisr: &hisr::Params) -> SummaryPart {
    let tasks = batch.tasks();
    let task_of_row = |r: usize| tasks.and_then(|c| c.get(r)).unwrap_or("(none)");
    let mut part = SummaryPart {
        tally: Tally {
            has_tasks: tasks.is_some(),
            has_iteration: batch.has_iteration(),
            valid_logged: batch.has(crate::schema::columns::VALID),
            obs_logged: batch.has(crate::schema::columns::OBS),
            // Groups come iteration by iteration: one insert per run.
            iterations: batch
                .groups
                .chunk_by(|a, b| a.iteration == b.iteration)
                .map(|run| run[0].iteration)
                .collect(),
            trajectories: batch.trajs.len(),
            successes: batch.trajs.iter().filter(|t| t.success).count(),
            rows: batch.len(),
            ..Tally::default()
        },
        group_sizes: batch.groups.iter().map(|g| g.trajs.len()).collect(),
        group_returns: batch
            .groups
            .iter()
            .flat_map(|g| {
                g.trajs
                    .iter()
                    .map(|&t| batch.trajs[t as usize].episode_return)
            })
            .collect(),
        progress: progress_part(batch),
        segments: segment_part(batch, hisr).map_err(|e| e.to_string()),
    };
    let tally = &mut part.tally;
    let (mut success_by_task, mut success_by_iteration) = (KeyedRates::new(), KeyedRates::new());
    for traj in &batch.trajs {
        if tally.has_tasks {
            success_by_task.add(task_of_row(traj.rows[0] as usize), traj.success);
        }
        if tally.has_iteration {
            success_by_iteration.add(batch.groups[traj.group as usize].iteration, traj.success);
        }
        tally.lengths[1 - traj.success as usize].add(traj.rows.len());
    }
    tally.success_by_task = success_by_task.into_rates(str::to_string);
    tally.success_by_iteration = success_by_iteration.into_counts();
    let valid = batch.valid();
    tally.invalid = valid.iter().filter(|&&v| !v).count();
    if tally.has_tasks {
        let mut invalid_by_task = KeyedRates::new();
        for (r, v) in valid.iter().enumerate() {
            invalid_by_task.add(task_of_row(r), !v);
        }
        tally.invalid_by_task = invalid_by_task.into_rates(str::to_string);
    }
    let mut zero_std_by_iteration = KeyedRates::new();
    let mut returns = part.group_returns.as_slice();
    for g in &batch.groups {
        let (group, rest) = returns.split_at(g.trajs.len());
        returns = rest;
        let flat = group.iter().all(|&r| r == group[0]);
        tally.zero_std += flat as usize;
        zero_std_by_iteration.add(g.iteration, flat);
    }
    tally.zero_std_by_iteration = zero_std_by_iteration.into_counts();
    for g in &batch.groups {
        let s = g
            .trajs
            .iter()
            .filter(|&&t| batch.trajs[t as usize].success)
            .count();
        if s == g.trajs.len() {
            tally.all_success += 1;
        } else if s == 0 {
            tally.all_fail += 1;
        } else {
            continue;
        }
        tally.degenerate_steps += g.n_rows;
    }
    part
}

impl SummaryPart {
    /// Adds the step-group sizes with similarity groups at each threshold (nothing without
    /// `obs`). Every window of a summary must be given the same thresholds.
    pub fn with_similarity(mut self, batch: &StepBatch, thresholds: &[f64]) -> Self {
        if batch.has(crate::schema::columns::OBS) {
            self.tally.similar_clusters = thresholds
                .iter()
                .map(|&t| {
                    let mut counts = SizeCounts::default();
                    for c in anchor_clusters(batch, Some(t)).iter() {
                        counts.add(c.len());
                    }
                    (t, counts)
                })
                .collect();
        }
        self
    }
}

/// The summary added up window by window, in input order: [`SummaryBuilder::finish`] gives what
/// [`summarize`] gives on the whole batch.
#[derive(Clone, Default)]
pub struct SummaryBuilder {
    tally: Tally,
    rollouts: Counts,
    by_group_size: BTreeMap<usize, SizeRewards>,
    progress: Option<ProgressBuilder>,
    segments: SegmentBuilder,
    segment_error: Option<String>,
}

impl SummaryBuilder {
    pub fn add(&mut self, part: SummaryPart) {
        self.tally.merge(part.tally);
        part.group_sizes.iter().for_each(|&s| self.rollouts.add(s));
        // In group order: the sums are floating-point.
        let mut returns = part.group_returns.as_slice();
        for &size in &part.group_sizes {
            let (group, rest) = returns.split_at(size);
            returns = rest;
            self.by_group_size.entry(size).or_default().add(group);
        }
        if let Some(p) = part.progress {
            self.progress.get_or_insert_with(Default::default).add(p);
        }
        match part.segments {
            Ok(Some(s)) if self.segment_error.is_none() => self.segments.add(s),
            Err(e) if self.segment_error.is_none() => self.segment_error = Some(e),
            _ => {}
        }
    }

    pub fn finish(self, report: &IngestReport) -> Summary {
        let tally = self.tally;
        let n_groups = self.rollouts.len();
        let rollouts_per_group = RolloutsPerGroup {
            min: self.rollouts.0.keys().next().copied().unwrap_or(0),
            mean: self.rollouts.0.iter().map(|(s, n)| s * n).sum::<usize>() as f64
                / n_groups.max(1) as f64,
            max: self.rollouts.0.keys().next_back().copied().unwrap_or(0),
            single_rollout_groups: self.rollouts.0.get(&1).copied().unwrap_or(0),
            histogram: self.rollouts.0.clone(),
        };
        let rates = |m: BTreeMap<String, (usize, usize)>| -> Vec<Rate> {
            m.into_iter()
                .map(|(key, (n, s))| Rate {
                    key,
                    n,
                    rate: s as f64 / n as f64,
                })
                .collect()
        };
        let iteration_rates = |m: BTreeMap<Option<i64>, (usize, usize)>| -> Vec<Rate> {
            m.into_iter()
                .map(|(iteration, (n, s))| Rate {
                    key: iteration_key(iteration),
                    n,
                    rate: s as f64 / n as f64,
                })
                .collect()
        };
        let success = Success {
            overall: tally.successes as f64 / tally.trajectories.max(1) as f64,
            per_task: rates(tally.success_by_task),
            per_iteration: iteration_rates(tally.success_by_iteration),
        };
        let [success_lengths, failure_lengths] = tally.lengths;
        let length = Lengths {
            success: success_lengths.length_stats(),
            failure: failure_lengths.length_stats(),
            histograms: [success_lengths, failure_lengths],
        };
        let invalid_actions = Invalid {
            logged: tally.valid_logged,
            steps: tally.invalid,
            rate: tally.invalid as f64 / tally.rows.max(1) as f64,
            per_task: rates(tally.invalid_by_task),
        };
        let degenerate = Degenerate {
            all_success_groups: tally.all_success,
            all_fail_groups: tally.all_fail,
            share_of_groups: (tally.all_success + tally.all_fail) as f64 / n_groups.max(1) as f64,
            share_of_steps: tally.degenerate_steps as f64 / tally.rows.max(1) as f64,
        };
        let step_groups = StepGroups {
            obs_logged: tally.obs_logged,
            overall: tally.clusters.finish(),
            per_iteration: tally
                .clusters_per_iteration
                .iter()
                .map(|(it, c)| (*it, c.finish()))
                .collect(),
            similarity: tally
                .similar_clusters
                .iter()
                .map(|&(threshold, ref c)| SimilarityGroups {
                    threshold,
                    overall: c.finish(),
                })
                .collect(),
        };
        let (graph, graph_per_iteration) = tally.graph.finish();
        let one_step = length
            .histograms
            .iter()
            .all(|c| c.0.keys().all(|&l| l == 1));
        let single_turn = (tally.trajectories > 0 && one_step).then(|| SingleTurn {
            zero_std_groups: tally.zero_std,
            groups: n_groups,
            effective_group_fraction: (n_groups - tally.zero_std) as f64 / n_groups.max(1) as f64,
            zero_std_per_iteration: if tally.has_iteration {
                iteration_rates(tally.zero_std_by_iteration)
            } else {
                Vec::new()
            },
            reward_by_group_size: self
                .by_group_size
                .into_iter()
                .map(|(size, r)| GroupSizeRewards {
                    group_size: size,
                    groups: r.groups,
                    rollouts: r.sum.n,
                    mean: r.sum.mean(),
                    min: r.min,
                    max: r.max,
                    values: r
                        .values
                        .map(|v| v.into_iter().map(|(b, n)| (f64::from_bits(b), n)).collect())
                        .unwrap_or_default(),
                })
                .collect(),
        });

        let mut diagnostics = Vec::new();
        // Single-turn logs have no step groups and log no validity: those notes would mislead.
        if single_turn.is_none() && step_groups.overall.pct_steps[0] > 40.0 {
            diagnostics.push(format!(
                "{:.1}% of steps are in singleton step groups: GiGPO's step term is 0 for those rows (ProxMO's PSA still gives them a soft baseline)",
                step_groups.overall.pct_steps[0]
            ));
        }
        if degenerate.share_of_groups > 0.5 {
            diagnostics.push(format!(
                "{:.1}% of groups are all-success or all-fail: their GRPO advantage is 0 on every step (raw reward for single-rollout groups); check task difficulty or group size",
                100.0 * degenerate.share_of_groups
            ));
        }
        if rollouts_per_group.single_rollout_groups > 0 {
            diagnostics.push(format!(
                "{} {} a single rollout: group-relative methods give them μ = 0, σ = 1 (raw rewards); check `group_id`",
                plural(rollouts_per_group.single_rollout_groups, "group"),
                agree(rollouts_per_group.single_rollout_groups, "has", "have")
            ));
        }
        let segments = match self.segment_error {
            Some(e) => {
                diagnostics.push(format!("no segment statistics: {e}"));
                None
            }
            None => self.segments.finish(),
        };
        if !invalid_actions.logged && single_turn.is_none() {
            diagnostics.push("no `valid` column: every action counts as valid, so invalid-action statistics and penalties are empty".into());
        }

        Summary {
            files: report.files.len(),
            columns: report.columns.clone(),
            rows: tally.rows,
            iterations: tally.has_iteration.then_some(tally.iterations.len()),
            groups: n_groups,
            trajectories: tally.trajectories,
            rollouts_per_group,
            success,
            length,
            invalid_actions,
            degenerate,
            step_groups,
            graph,
            graph_per_iteration,
            progress: self.progress.map(ProgressBuilder::finish),
            segments,
            single_turn,
            padding_duplicates: report.padding_duplicates,
            skipped: report
                .skipped
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), *v))
                .collect(),
            diagnostics,
            notes: report.notes.clone(),
        }
    }
}

/// The summary of a whole batch; HISR's `hisr` parameters segment it for the segment statistics,
/// as the method would.
pub fn summarize(batch: &StepBatch, report: &IngestReport, hisr: &hisr::Params) -> Summary {
    let mut builder = SummaryBuilder::default();
    builder.add(summary_part(batch, hisr));
    builder.finish(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{batch_with_columns, Row};
    use crate::schema::columns::{PROGRESS, SEGMENT, SEGMENT_REWARD, TASK};
    use polars::prelude::Column;

    #[test]
    fn windows_add_up_to_the_whole_batch() {
        // Two groups (g1: three trajectories, g2: two) with tasks, progress and segments; the
        // summary of g1 and g2 added as two windows must be the whole batch's, number for number.
        let rows: Vec<Row> = vec![
            ("g1", "a", 0, "s0", 0.0, true),
            ("g1", "a", 1, "s1", 1.0, true),
            ("g1", "b", 0, "s0", 0.0, false),
            ("g1", "b", 1, "s2", 0.0, true),
            ("g1", "b", 2, "s2", 0.0, true),
            ("g1", "c", 0, "s0", 0.0, true),
            ("g2", "d", 0, "p", 0.3, true),
            ("g2", "d", 1, "q", 0.9, true),
            ("g2", "e", 0, "p", 0.0, true),
        ];
        let extra = |rows: &[Row]| {
            let n = rows.len();
            vec![
                Column::new(
                    TASK.into(),
                    rows.iter()
                        .map(|r| if r.0 == "g1" { "pick" } else { "clean" })
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    PROGRESS.into(),
                    (0..n).map(|i| 0.1 * i as f64 - 0.2).collect::<Vec<_>>(),
                ),
                Column::new(
                    SEGMENT.into(),
                    rows.iter().map(|r| r.2 / 2).collect::<Vec<_>>(),
                ),
                Column::new(
                    SEGMENT_REWARD.into(),
                    (0..n).map(|i| 0.25 * i as f64).collect::<Vec<_>>(),
                ),
            ]
        };
        let whole = batch_with_columns(&rows, extra(&rows));
        let report = IngestReport::default();
        let hisr = hisr::Params::paper();
        let expected = serde_json::to_value(summarize(&whole, &report, &hisr)).unwrap();
        let mut builder = SummaryBuilder::default();
        for part in [&rows[..6], &rows[6..]] {
            let mut window = batch_with_columns(part, extra(part));
            // The window's progress and segment rewards are the whole batch's rows.
            let offset = if part[0].0 == "g1" { 0 } else { 6 };
            let n = part.len();
            window
                .with_column_f64(
                    PROGRESS,
                    (0..n).map(|i| 0.1 * (i + offset) as f64 - 0.2).collect(),
                )
                .unwrap();
            window
                .with_column_f64(
                    SEGMENT_REWARD,
                    (0..n).map(|i| 0.25 * (i + offset) as f64).collect(),
                )
                .unwrap();
            builder.add(summary_part(&window, &hisr));
        }
        let got = serde_json::to_value(builder.finish(&report)).unwrap();
        assert_eq!(got, expected);
        assert_eq!(got["groups"], 2);
        assert!(got["progress"]["trajectories"].as_u64().unwrap() > 0);
        assert!(got["segments"]["reward_share"].is_object());
    }

    #[test]
    fn iterations_are_listed_by_number() {
        // Groups of iterations 10, 2 and 1 (in that order in the log): per-iteration lists run
        // 1, 2, 10, as a person reads them, not as text sorts them (1, 10, 2).
        let rows: Vec<Row> = vec![
            ("g10", "a", 0, "s", 1.0, true),
            ("g10", "b", 0, "s", 1.0, true),
            ("g2", "c", 0, "s", 0.0, true),
            ("g2", "d", 0, "s", 1.0, true),
            ("g1", "e", 0, "s", 0.0, true),
            ("g1", "f", 0, "s", 0.0, true),
        ];
        let iteration = Column::new(
            crate::schema::columns::ITERATION.into(),
            rows.iter()
                .map(|r| r.0[1..].parse::<i64>().unwrap())
                .collect::<Vec<_>>(),
        );
        let batch = batch_with_columns(&rows, vec![iteration]);
        let summary = summarize(&batch, &IngestReport::default(), &hisr::Params::paper());
        let keys = |rates: &[Rate]| rates.iter().map(|r| r.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&summary.success.per_iteration), ["1", "2", "10"]);
        let rates: Vec<f64> = summary
            .success
            .per_iteration
            .iter()
            .map(|r| r.rate)
            .collect();
        assert_eq!(rates, [0.0, 0.5, 1.0]);
        let single_turn = summary.single_turn.expect("one-step trajectories");
        assert_eq!(keys(&single_turn.zero_std_per_iteration), ["1", "2", "10"]);
        let zero_std: Vec<f64> = single_turn
            .zero_std_per_iteration
            .iter()
            .map(|r| r.rate)
            .collect();
        assert_eq!(zero_std, [1.0, 0.0, 1.0]);
    }
}
