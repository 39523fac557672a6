//! Per-iteration trends, the training curve to hold against a run's own dashboards: success rate,
//! steps in singleton step groups, degenerate groups and each method's mean |advantage| by
//! iteration, as one figure. Success and singleton shares come from the summary; the rest is
//! counted window by window here ([`Trends::of`], added up in any order).

use crate::plots::{sketch as figure, Line, LinePanels, Section, Sketch};
use crate::Inputs;
use credit_core::StepBatch;
use std::collections::BTreeMap;

/// Per iteration: groups, degenerate groups (all trajectories succeeded, or none), steps and the
/// sum of |advantage| per method.
#[derive(Clone, Debug, Default)]
pub struct Trends {
    iterations: BTreeMap<i64, Counts>,
}

#[derive(Clone, Debug, Default)]
struct Counts {
    groups: usize,
    degenerate: usize,
    steps: usize,
    abs_advantage: Vec<f64>,
}

impl Trends {
    /// One window's counts; `advantages` holds one column per method, one value per batch row.
    /// Groups without an iteration are left out.
    pub fn of(batch: &StepBatch, advantages: &[&[f64]]) -> Trends {
        let mut trends = Trends::default();
        for (g, group) in batch.groups.iter().enumerate() {
            let Some(it) = group.iteration else { continue };
            let c = trends.iterations.entry(it).or_default();
            c.abs_advantage.resize(advantages.len(), 0.0);
            let successes = group
                .trajs
                .iter()
                .filter(|&&t| batch.trajs[t as usize].success)
                .count();
            c.groups += 1;
            c.degenerate += (successes == 0 || successes == group.trajs.len()) as usize;
            c.steps += group.n_rows;
            for (sum, column) in c.abs_advantage.iter_mut().zip(advantages) {
                *sum += batch
                    .group_rows(g)
                    .map(|r| column[r as usize].abs())
                    .sum::<f64>();
            }
        }
        trends
    }

    /// The iterations counted, in order.
    pub fn iterations(&self) -> impl Iterator<Item = i64> + '_ {
        self.iterations.keys().copied()
    }

    /// Iteration `it`'s steps and its share of degenerate groups.
    pub fn of_iteration(&self, it: i64) -> Option<(usize, f64)> {
        self.iterations
            .get(&it)
            .map(|c| (c.steps, c.degenerate as f64 / c.groups.max(1) as f64))
    }

    pub fn add(&mut self, other: Trends) {
        for (it, o) in other.iterations {
            let c = self.iterations.entry(it).or_default();
            c.groups += o.groups;
            c.degenerate += o.degenerate;
            c.steps += o.steps;
            c.abs_advantage.resize(o.abs_advantage.len(), 0.0);
            for (sum, x) in c.abs_advantage.iter_mut().zip(&o.abs_advantage) {
                *sum += x;
            }
        }
    }
}

/// The trends as one figure (four panels over the iteration, a line per method of the inputs'
/// advantages), when the logs have two iterations or more: the figure catalogue's entry.
pub fn sketch<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let (trends, summary) = (inputs.trends?, inputs.summary);
    if trends.iterations.len() < 2 {
        return None;
    }
    let one = |name: &str, points: Vec<(f64, f64)>| vec![(name.to_string(), 0, points)];
    let success: Vec<(f64, f64)> = summary
        .success
        .per_iteration
        .iter()
        .filter_map(|r| Some((r.key.parse::<i64>().ok()? as f64, r.rate)))
        .collect();
    // The second panel: singleton step groups, or in single-turn logs (where every step is its
    // own group) the groups whose rewards all equal.
    let (second_title, second_line, second_caption) = match &summary.single_turn {
        None => (
            "steps in singleton step groups (share of steps)",
            one(
                "singleton steps",
                summary
                    .step_groups
                    .per_iteration
                    .iter()
                    .map(|(it, d)| (*it as f64, d.pct_steps[0] / 100.0))
                    .collect(),
            ),
            "of steps in singleton exact-anchor step groups (GiGPO's step term is 0 there)",
        ),
        Some(t) => (
            "groups whose rewards all equal (share of groups)",
            one(
                "zero reward spread",
                t.zero_std_per_iteration
                    .iter()
                    .filter_map(|r| Some((r.key.parse::<i64>().ok()? as f64, r.rate)))
                    .collect(),
            ),
            "of groups whose rollouts all got the same reward (GRPO learns nothing there)",
        ),
    };
    let per_iteration = |f: &dyn Fn(&Counts) -> f64| -> Vec<(f64, f64)> {
        trends
            .iterations
            .iter()
            .map(|(it, c)| (*it as f64, f(c)))
            .collect()
    };
    let degenerate = per_iteration(&|c| c.degenerate as f64 / c.groups.max(1) as f64);
    let advantage: Vec<Line> = inputs
        .advantages
        .iter()
        .enumerate()
        .map(|(k, (m, _))| {
            let mean = per_iteration(&|c| c.abs_advantage[k] / c.steps.max(1) as f64);
            (m.clone(), k, mean)
        })
        .collect();
    let plot = LinePanels {
        panels: vec![
            (
                "success rate (share of trajectories)".into(),
                one("success", success),
            ),
            (second_title.into(), second_line),
            (
                "degenerate groups (share of groups)".into(),
                one("all-success or all-fail", degenerate),
            ),
            ("mean |advantage| per step".into(), advantage),
        ],
        x_desc: "iteration".into(),
        y_desc: String::new(),
        columns: 2,
        y_range: None,
    };
    figure(
        Section::Trends,
        "trends",
        "Per-iteration trends",
        format!(
            "By training iteration ({} iterations): the share of trajectories that succeeded; {second_caption}; of degenerate groups, where every trajectory succeeded or none did (GRPO's advantage is 0 on all their steps); and each method's mean |advantage| per step. The curves to hold against the run's own training dashboards.",
            trends.iterations.len()
        ),
        plot,
    )
}
