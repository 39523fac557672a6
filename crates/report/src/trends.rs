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

/// Methods whose mean |advantage| is more than this many times the smallest method's get a panel
/// of their own: on one axis they would flatten the others into its bottom.
const SCALE_APART: f64 = 4.0;

/// The mean-|advantage| panels: one, or the methods on the smaller scale and, apart, those on the
/// larger (ProxMO's |A| is several times GRPO's).
fn advantage_panels(lines: Vec<Line>) -> Vec<(String, Vec<Line>)> {
    let peak = |l: &Line| l.2.iter().map(|p| p.1).fold(0.0, f64::max);
    let smallest = lines
        .iter()
        .map(peak)
        .filter(|&p| p > 0.0)
        .fold(f64::INFINITY, f64::min);
    let (large, small): (Vec<Line>, Vec<Line>) = lines
        .into_iter()
        .partition(|l| smallest.is_finite() && peak(l) > SCALE_APART * smallest);
    if large.is_empty() || small.is_empty() {
        return vec![("mean |advantage| per step".into(), [large, small].concat())];
    }
    // The legends name the methods: titles stay short enough for a panel's width.
    vec![
        ("mean |advantage| per step".into(), small),
        ("mean |advantage| per step, larger scale".into(), large),
    ]
}

/// The trends as one figure (panels over the iteration, a line per method of the inputs'
/// advantages), when the logs have two iterations or more: the figure catalogue's entry. Shares
/// are drawn on [0, 1], iterations at whole numbers.
pub fn sketch<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let (trends, summary) = (inputs.trends?, inputs.summary);
    if trends.iterations.len() < 2 {
        return None;
    }
    let one = |name: &str, points: Vec<(f64, f64)>| vec![(name.to_string(), 0, points)];
    let rates = |rates: &[credit_core::analyses::summary::Rate]| -> Vec<(f64, f64)> {
        rates
            .iter()
            .filter_map(|r| Some((r.key.parse::<i64>().ok()? as f64, r.rate)))
            .collect()
    };
    let per_iteration = |f: &dyn Fn(&Counts) -> f64| -> Vec<(f64, f64)> {
        trends
            .iterations
            .iter()
            .map(|(it, c)| (*it as f64, f(c)))
            .collect()
    };
    let degenerate = per_iteration(&|c| c.degenerate as f64 / c.groups.max(1) as f64);
    let mut shares = vec![(
        "success rate (share of trajectories)".to_string(),
        one("success", rates(&summary.success.per_iteration)),
    )];
    // The middle panels: singleton step groups and degenerate groups; in single-turn logs (every
    // step its own group) the groups whose rewards all equal, which with 0/1 scores are the
    // degenerate groups: one panel then, not the same line twice.
    let caption = match &summary.single_turn {
        None => {
            let singleton = summary
                .step_groups
                .per_iteration
                .iter()
                .map(|(it, d)| (*it as f64, d.pct_steps[0] / 100.0))
                .collect();
            shares.push((
                "steps in singleton step groups (share of steps)".into(),
                one("singleton steps", singleton),
            ));
            shares.push((
                "degenerate groups (share of groups)".into(),
                one("all-success or all-fail", degenerate),
            ));
            "of steps in singleton exact-anchor step groups (GiGPO's step term is 0 there); of degenerate groups, where every trajectory succeeded or none did (GRPO's advantage is 0 on all their steps)"
        }
        Some(t) => {
            let zero_std = rates(&t.zero_std_per_iteration);
            let same = zero_std == degenerate;
            shares.push((
                "groups whose rewards all equal (share of groups)".into(),
                one("zero reward spread", zero_std),
            ));
            if same {
                "of groups whose rollouts all got the same reward, here the all-success and all-fail groups (GRPO learns nothing there)"
            } else {
                shares.push((
                    "degenerate groups (share of groups)".into(),
                    one("all-success or all-fail", degenerate),
                ));
                "of groups whose rollouts all got the same reward (GRPO learns nothing there); of degenerate groups, where every rollout succeeded or none did"
            }
        }
    };
    let advantage: Vec<Line> = inputs
        .advantages
        .iter()
        .enumerate()
        .map(|(k, (m, _))| {
            let mean = per_iteration(&|c| c.abs_advantage[k] / c.steps.max(1) as f64);
            (m.clone(), k, mean)
        })
        .collect();
    let y_within = std::iter::repeat_n((0.0, 1.0), shares.len())
        .chain(std::iter::repeat((0.0, f64::INFINITY)))
        .take(shares.len() + inputs.advantages.len())
        .collect();
    let plot = LinePanels {
        panels: shares
            .into_iter()
            .chain(advantage_panels(advantage))
            .collect(),
        x_desc: "iteration".into(),
        y_desc: String::new(),
        columns: 2,
        y_range: None,
        y_within,
        x_integer: true,
    };
    figure(
        Section::Trends,
        "trends",
        "Success, degenerate groups and |advantage| by iteration",
        format!(
            "By training iteration ({}): the share of trajectories that succeeded; {caption}; and each method's mean |advantage| per step (methods on scales over {SCALE_APART}× apart in panels of their own). The curves to hold against the run's own training dashboards.",
            credit_core::wording::plural(trends.iterations.len(), "iteration")
        ),
        plot,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_on_a_larger_scale_gets_a_panel_of_its_own() {
        let line = |m: &str, y: f64| (m.to_string(), 0, vec![(1.0, y), (2.0, y)]);
        let panels = advantage_panels(vec![
            line("grpo", 0.5),
            line("proxmo", 3.0),
            line("gigpo", 0.6),
        ]);
        let methods: Vec<Vec<&str>> = panels
            .iter()
            .map(|p| p.1.iter().map(|l| l.0.as_str()).collect())
            .collect();
        assert_eq!(methods, [vec!["grpo", "gigpo"], vec!["proxmo"]]);
        assert_eq!(panels[1].0, "mean |advantage| per step, larger scale");
        let together = advantage_panels(vec![line("grpo", 0.5), line("gigpo", 1.5)]);
        assert_eq!(together.len(), 1);
        assert_eq!(together[0].1.len(), 2);
    }
}
