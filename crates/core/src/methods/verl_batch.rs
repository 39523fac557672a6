//! verl's batch: what the estimators of verl's registry (`verl_registry.rs`) see of the logs,
//! with the group statistics and the whitening they share, written once.
//!
//! verl hands an estimator one training step's batch: a row per response, its score (the sum of
//! its token-level rewards, all on its last response token), its response mask and its group
//! (`uid`). `stats_over` says how a multi-turn log takes that shape:
//! - `rows` (verl-agent): one batch row per step row, scored with the episode's score (less the
//!   invalid-action penalty on an invalid row), its response the step's action;
//! - `trajectories` (verl's own multi-turn agent loop): one batch row per trajectory, scored with
//!   its first row's score, its response every turn's action in step order (the environment's
//!   replies between turns are masked tokens, which the estimators skip).
//!
//! The batch is one `iteration` (the whole input without the column). A step row is one response
//! token unless `n_tokens` gives its response length.

use super::group_stats::{episode_scores, mean_std};
use super::step_rl::row_name;
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::{Conventions, StatsOver};
use crate::schema::columns::N_TOKENS;
use std::ops::Range;

/// The batch rows of one [`StepBatch`], numbered group by group (a group's batch rows are
/// consecutive).
pub(crate) struct VerlBatch<'b> {
    pub batch: &'b StepBatch,
    pub layout: StatsOver,
    /// Each batch row's score s_b.
    pub score: Vec<f64>,
    /// The batch row of each step row.
    unit_of_row: Vec<u32>,
    /// Each batch row's step rows in step order: `rows[unit_start[b]..unit_start[b + 1]]`.
    rows: Vec<u32>,
    unit_start: Vec<usize>,
    /// Group g's batch rows: `group_start[g]..group_start[g + 1]`.
    group_start: Vec<usize>,
    /// The groups of each iteration.
    iterations: Vec<Vec<u32>>,
}

impl<'b> VerlBatch<'b> {
    pub fn new(batch: &'b StepBatch, conv: &Conventions) -> Self {
        let scores = episode_scores(batch, conv);
        let mut vb = VerlBatch {
            batch,
            layout: conv.stats_over,
            score: Vec::new(),
            unit_of_row: vec![0; batch.len()],
            rows: Vec::with_capacity(batch.len()),
            unit_start: vec![0],
            group_start: vec![0],
            iterations: Vec::new(),
        };
        let mut iteration_of: std::collections::BTreeMap<Option<i64>, usize> = Default::default();
        for (g, group) in batch.groups.iter().enumerate() {
            for &t in &group.trajs {
                let traj = &batch.trajs[t as usize];
                for &r in &traj.rows {
                    vb.unit_of_row[r as usize] = vb.score.len() as u32;
                    vb.rows.push(r);
                    if vb.layout == StatsOver::Rows {
                        vb.close_unit(scores[r as usize]);
                    }
                }
                if vb.layout == StatsOver::Trajectories {
                    vb.close_unit(scores[traj.rows[0] as usize]);
                }
            }
            vb.group_start.push(vb.score.len());
            let next = iteration_of.len();
            let k = *iteration_of.entry(group.iteration).or_insert(next);
            if k == vb.iterations.len() {
                vb.iterations.push(Vec::new());
            }
            vb.iterations[k].push(g as u32);
        }
        vb
    }

    fn close_unit(&mut self, score: f64) {
        self.score.push(score);
        self.unit_start.push(self.rows.len());
    }

    /// Batch row b's step rows, in step order.
    pub fn rows(&self, b: usize) -> &[u32] {
        &self.rows[self.unit_start[b]..self.unit_start[b + 1]]
    }

    /// The trajectory of batch row b (its first step row's).
    pub fn traj(&self, b: usize) -> u32 {
        self.batch.traj_of_row[self.rows(b)[0] as usize]
    }

    /// Group g's batch rows.
    pub fn group(&self, g: usize) -> Range<usize> {
        self.group_start[g]..self.group_start[g + 1]
    }

    pub fn n_groups(&self) -> usize {
        self.group_start.len() - 1
    }

    /// The groups of each iteration (verl's batch).
    pub fn iterations(&self) -> impl Iterator<Item = &[u32]> + '_ {
        self.iterations.iter().map(Vec::as_slice)
    }

    /// The batch rows of an iteration's groups.
    pub fn units_of<'a>(&'a self, groups: &'a [u32]) -> impl Iterator<Item = usize> + 'a {
        groups.iter().flat_map(|&g| self.group(g as usize))
    }

    /// `f(group, s_b)` for every batch row b, in order.
    pub fn by_group(&self, f: impl Fn(usize, f64) -> f64) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.score.len());
        for g in 0..self.n_groups() {
            out.extend(self.group(g).map(|b| f(g, self.score[b])));
        }
        out
    }

    /// A value per batch row, broadcast to its step rows.
    pub fn per_row<T: Copy>(&self, per_unit: &[T]) -> Vec<T> {
        self.unit_of_row
            .iter()
            .map(|&b| per_unit[b as usize])
            .collect()
    }

    /// A value per group, broadcast to its step rows.
    pub fn per_row_of_group(&self, per_group: &[f64]) -> Vec<f64> {
        self.batch
            .group_of_row
            .iter()
            .map(|&g| per_group[g as usize])
            .collect()
    }

    /// μ_g and σ_g of `values` (one per batch row) with `ddof`; a group of one batch row gets
    /// μ = 0 and σ = 1, as every estimator of verl's registry does.
    pub fn group_mean_std(&self, values: &[f64], ddof: u32) -> (Vec<f64>, Vec<f64>) {
        (0..self.n_groups())
            .map(|g| {
                let range = self.group(g);
                if range.len() == 1 {
                    (0.0, 1.0)
                } else {
                    mean_std(&values[range], ddof)
                }
            })
            .unzip()
    }

    /// "group `g`" or "group `g` (iteration 3)": where a group-level problem is.
    pub fn group_name(&self, g: usize) -> String {
        let group = &self.batch.groups[g];
        match group.iteration {
            Some(i) => format!("group `{}` (iteration {i})", group.id),
            None => format!("group `{}`", group.id),
        }
    }

    /// "iteration 3" or "the input": where a batch-level problem is.
    pub fn iteration_name(&self, groups: &[u32]) -> String {
        match groups
            .first()
            .and_then(|&g| self.batch.groups[g as usize].iteration)
        {
            Some(i) => format!("iteration {i}"),
            None => "the input (one batch: no `iteration` column)".into(),
        }
    }

    /// What a batch row is, for messages: "step row" or "trajectory".
    pub fn unit_name(&self) -> &'static str {
        match self.layout {
            StatsOver::Rows => "step row",
            StatsOver::Trajectories => "trajectory",
        }
    }

    /// Response tokens per step row (`n_tokens`, else 1) and per batch row. `label` names the
    /// estimator in the message for a row without a count.
    pub fn tokens(&self, label: &str) -> Result<Tokens> {
        let per_row: Vec<u64> = match self.batch.opt_i64s(N_TOKENS) {
            None => vec![1; self.batch.len()],
            Some(column) => (0..self.batch.len())
                .map(|r| match column.get(r) {
                    // Ingest refuses counts below 1.
                    Some(n) => Ok(n.max(1) as u64),
                    None => Err(Error::Param(format!(
                        "{label}: {} has no `n_tokens`: with the column logged, every row needs its response length (drop the column to count each step as one token)",
                        row_name(self.batch, r)
                    ))),
                })
                .collect::<Result<_>>()?,
        };
        let per_unit = (0..self.score.len())
            .map(|b| {
                self.rows(b)
                    .iter()
                    .fold(0u64, |n, &r| n.saturating_add(per_row[r as usize]))
            })
            .collect();
        Ok(Tokens { per_row, per_unit })
    }
}

/// Response tokens per step row and per batch row.
pub(crate) struct Tokens {
    pub per_row: Vec<u64>,
    pub per_unit: Vec<u64>,
}

/// verl's `masked_whiten` over a batch's response tokens: (x − m)/√(v + 1e-8) with
/// m = Σx/(N + 1e-8) and the unbiased v = Σ(x − m)²/(N + 1e-8)·N/(N − 1) (`masked_mean`,
/// `masked_var`; the 1e-8 in the mean is verl's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Whitening {
    mean: f64,
    scale: f64,
}

impl Whitening {
    /// `tokens(emit)` emits the batch's response tokens as (value, count) runs, the same on each
    /// call (it is called twice). `None` with fewer than two tokens, where verl raises.
    pub fn of(tokens: impl Fn(&mut dyn FnMut(f64, u64))) -> Option<Whitening> {
        // Counted in f64: logged response lengths may add up past any integer.
        let (mut n, mut sum) = (0.0, 0.0);
        tokens(&mut |x, count| {
            n += count as f64;
            sum += x * count as f64;
        });
        if n < 2.0 {
            return None;
        }
        let mean = sum / (n + 1e-8);
        let mut squares = 0.0;
        tokens(&mut |x, count| squares += count as f64 * (x - mean) * (x - mean));
        let var = squares / (n + 1e-8) * n / (n - 1.0);
        Some(Whitening {
            mean,
            scale: 1.0 / (var + 1e-8).sqrt(),
        })
    }

    pub fn apply(&self, x: f64) -> f64 {
        (x - self.mean) * self.scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitening_is_verl_masked_whiten() {
        // Tokens [1, 1, 4]: m = 6/(3 + 1e-8) ≈ 2, v = (1 + 1 + 4)/3 · 3/2 = 3, so
        // (1 − 2)/√3 = −0.5773503 and (4 − 2)/√3 = 1.1547005.
        let w = Whitening::of(|emit| {
            emit(1.0, 2);
            emit(4.0, 1);
        })
        .unwrap();
        assert!((w.apply(1.0) + 0.5773503).abs() < 1e-6);
        assert!((w.apply(4.0) - 1.1547005).abs() < 1e-6);
        // One token: verl's masked_var raises.
        assert!(Whitening::of(|emit| emit(1.0, 1)).is_none());
    }
}
