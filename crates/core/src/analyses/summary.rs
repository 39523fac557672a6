//! `credit analyze`: what is in the logs: groups, success, lengths, invalid actions, degenerate
//! groups, GiGPO's exact-anchor step groups, padding duplicates, and the logged SPA progress and
//! HISR segments ([`super::progress`]).

use super::graphs::{graph_stats, GraphStats};
use super::progress::{progress_stats, segment_stats, ProgressStats, SegmentStats};
use super::stats::{mean, median};
use crate::batch::StepBatch;
use crate::ingest::IngestReport;
use crate::methods::gigpo::anchor_clusters;
use crate::methods::hisr;
use serde::Serialize;
use std::collections::BTreeMap;

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
    /// Exact copies of earlier rows dropped at ingest (verl-agent batch padding).
    pub padding_duplicates: u64,
    /// Rows skipped under `--lenient`, per reason.
    pub skipped: BTreeMap<String, u64>,
    /// What to look at: suspicious findings, each with what it means.
    pub diagnostics: Vec<String>,
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
pub struct LengthStats {
    pub trajectories: usize,
    pub mean: f64,
    pub median: f64,
    pub max: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Lengths {
    pub success: LengthStats,
    pub failure: LengthStats,
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

/// Sizes of exact-anchor clusters (GiGPO's step groups), bucketed 1 / 2 / 3 / >3.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SizeDistribution {
    pub clusters: usize,
    pub steps: usize,
    pub mean_size: f64,
    /// % of steps in clusters of size 1, 2, 3, >3 (ProxMO Table 2 counts this way).
    pub pct_steps: [f64; 4],
    /// % of clusters of size 1, 2, 3, >3 (verl-agent's `summarize_group_size` counts this way).
    pub pct_clusters: [f64; 4],
}

#[derive(Clone, Debug, Serialize)]
pub struct StepGroups {
    /// Whether an `obs` column was logged (otherwise every step is its own cluster).
    pub obs_logged: bool,
    pub overall: SizeDistribution,
    pub per_iteration: Vec<(i64, SizeDistribution)>,
}

pub fn size_distribution(sizes: impl Iterator<Item = usize>) -> SizeDistribution {
    let (mut clusters, mut steps) = (0usize, 0usize);
    let (mut by_steps, mut by_clusters) = ([0usize; 4], [0usize; 4]);
    for s in sizes {
        let b = s.clamp(1, 4) - 1;
        clusters += 1;
        steps += s;
        by_steps[b] += s;
        by_clusters[b] += 1;
    }
    let pct = |v: [usize; 4], d: usize| {
        v.map(|x| {
            if d == 0 {
                0.0
            } else {
                100.0 * x as f64 / d as f64
            }
        })
    };
    SizeDistribution {
        clusters,
        steps,
        mean_size: if clusters == 0 {
            0.0
        } else {
            steps as f64 / clusters as f64
        },
        pct_steps: pct(by_steps, steps),
        pct_clusters: pct(by_clusters, clusters),
    }
}

/// The summary of a batch; HISR's `hisr` parameters segment it for the segment statistics, as the
/// method would.
pub fn summarize(batch: &StepBatch, report: &IngestReport, hisr: &hisr::Params) -> Summary {
    let n_groups = batch.groups.len();
    let sizes: Vec<usize> = batch.groups.iter().map(|g| g.trajs.len()).collect();
    let mut histogram = BTreeMap::new();
    for &s in &sizes {
        *histogram.entry(s).or_insert(0) += 1;
    }
    let rollouts_per_group = RolloutsPerGroup {
        min: sizes.iter().copied().min().unwrap_or(0),
        mean: sizes.iter().sum::<usize>() as f64 / n_groups.max(1) as f64,
        max: sizes.iter().copied().max().unwrap_or(0),
        single_rollout_groups: sizes.iter().filter(|&&s| s == 1).count(),
        histogram,
    };

    let tasks = batch.tasks();
    let task_of_traj = |t: usize| -> String {
        tasks
            .and_then(|c| c.get(batch.trajs[t].rows[0] as usize))
            .unwrap_or("(none)")
            .to_string()
    };
    let rate_by = |key: &dyn Fn(usize) -> String| -> Vec<Rate> {
        let mut acc: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (t, traj) in batch.trajs.iter().enumerate() {
            let e = acc.entry(key(t)).or_default();
            e.0 += 1;
            e.1 += traj.success as usize;
        }
        acc.into_iter()
            .map(|(key, (n, s))| Rate {
                key,
                n,
                rate: s as f64 / n as f64,
            })
            .collect()
    };
    let n_success = batch.trajs.iter().filter(|t| t.success).count();
    let success = Success {
        overall: n_success as f64 / batch.trajs.len().max(1) as f64,
        per_task: if tasks.is_some() {
            rate_by(&task_of_traj)
        } else {
            Vec::new()
        },
        per_iteration: if batch.has_iteration() {
            rate_by(&|t| {
                batch.groups[batch.trajs[t].group as usize]
                    .iteration
                    .map_or("(none)".into(), |i| i.to_string())
            })
        } else {
            Vec::new()
        },
    };

    let lengths = |want: bool| {
        let l: Vec<f64> = batch
            .trajs
            .iter()
            .filter(|t| t.success == want)
            .map(|t| t.rows.len() as f64)
            .collect();
        LengthStats {
            trajectories: l.len(),
            mean: mean(&l),
            median: median(&l),
            max: l.iter().fold(0.0f64, |a, &b| a.max(b)) as usize,
        }
    };
    let length = Lengths {
        success: lengths(true),
        failure: lengths(false),
    };

    let valid = batch.valid();
    let invalid_count = valid.iter().filter(|&&v| !v).count();
    let mut per_task_invalid: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    if let Some(tasks) = tasks {
        for (r, v) in valid.iter().enumerate() {
            let e = per_task_invalid
                .entry(tasks.get(r).unwrap_or("(none)").to_string())
                .or_default();
            e.0 += 1;
            e.1 += !v as usize;
        }
    }
    let invalid_actions = Invalid {
        logged: batch.has(crate::schema::columns::VALID),
        steps: invalid_count,
        rate: invalid_count as f64 / batch.len().max(1) as f64,
        per_task: per_task_invalid
            .into_iter()
            .map(|(key, (n, i))| Rate {
                key,
                n,
                rate: i as f64 / n as f64,
            })
            .collect(),
    };

    let (mut all_success, mut all_fail, mut degenerate_steps) = (0, 0, 0);
    for g in &batch.groups {
        let s = g
            .trajs
            .iter()
            .filter(|&&t| batch.trajs[t as usize].success)
            .count();
        if s == g.trajs.len() {
            all_success += 1;
        } else if s == 0 {
            all_fail += 1;
        } else {
            continue;
        }
        degenerate_steps += g.n_rows;
    }
    let degenerate = Degenerate {
        all_success_groups: all_success,
        all_fail_groups: all_fail,
        share_of_groups: (all_success + all_fail) as f64 / n_groups.max(1) as f64,
        share_of_steps: degenerate_steps as f64 / batch.len().max(1) as f64,
    };

    let clusters = anchor_clusters(batch);
    let overall = size_distribution(clusters.iter().map(Vec::len));
    let mut per_iteration: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    if batch.has_iteration() {
        for c in &clusters {
            let it = batch.groups[batch.group_of_row[c[0] as usize] as usize]
                .iteration
                .unwrap_or(0);
            per_iteration.entry(it).or_default().push(c.len());
        }
    }
    let step_groups = StepGroups {
        obs_logged: batch.has(crate::schema::columns::OBS),
        overall,
        per_iteration: per_iteration
            .into_iter()
            .map(|(it, s)| (it, size_distribution(s.into_iter())))
            .collect(),
    };

    let (graph, graph_per_iteration) = graph_stats(batch);

    let mut diagnostics = Vec::new();
    if step_groups.overall.pct_steps[0] > 40.0 {
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
            "{} group(s) have a single rollout: group-relative methods give them μ = 0, σ = 1 (raw rewards); check `group_id`",
            rollouts_per_group.single_rollout_groups
        ));
    }
    let segments = segment_stats(batch, hisr).unwrap_or_else(|e| {
        diagnostics.push(format!("no segment statistics: {e}"));
        None
    });
    if !invalid_actions.logged {
        diagnostics.push("no `valid` column: every action counts as valid, so invalid-action statistics and penalties are empty".into());
    }

    Summary {
        files: report.files.len(),
        columns: report.columns.clone(),
        rows: batch.len(),
        iterations: batch.has_iteration().then(|| {
            let mut its: Vec<Option<i64>> = batch.groups.iter().map(|g| g.iteration).collect();
            its.sort();
            its.dedup();
            its.len()
        }),
        groups: n_groups,
        trajectories: batch.trajs.len(),
        rollouts_per_group,
        success,
        length,
        invalid_actions,
        degenerate,
        step_groups,
        graph,
        graph_per_iteration,
        progress: progress_stats(batch),
        segments,
        padding_duplicates: report.padding_duplicates,
        skipped: report
            .skipped
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), *v))
            .collect(),
        diagnostics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_4_4_cluster_size_diagnostic() {
        // spec-proxmo-gigpo.md §4.4: clusters {4,4,1,2,3,2}: singletons are 1/6 = 16.67% of clusters
        // and 1/16 = 6.25% of steps.
        let d = size_distribution([4, 4, 1, 2, 3, 2].into_iter());
        assert!((d.pct_clusters[0] - 16.6667).abs() < 1e-3);
        assert!((d.pct_steps[0] - 6.25).abs() < 1e-9);
        assert_eq!(d.steps, 16);
    }
}
