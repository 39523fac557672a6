//! HGPO: hierarchy-of-groups step advantages (He et al. 2026, "Hierarchy-of-Groups Policy
//! Optimization for Long-Horizon Agentic Tasks", arXiv 2602.22817, ICLR 2026).
//!
//! For the step at position s of trajectory τ in group g, with R its discounted return-to-go
//! (GiGPO's Eq. 5, the invalid penalty as the profile says) and o the state (`obs`):
//! - contexts C_k = (o_{s−k+1}, …, o_s), k = 1 … min(K + 1, s + 1), K = `history_length`;
//!   k = 1 is GiGPO's anchor state alone;
//! - groups G_k = the steps of g (any trajectory, any time) with the same C_k, byte for byte;
//! - A_k = (R − μ_{G_k})/(σ_{G_k} + ε) (`mean_std`, σ the population std) or R − μ_{G_k}
//!   (`mean`); a group of one step gives no A_k;
//! - with `base_group`, a level k = 0 whose A_0 is the episode advantage of GRPO (the profile's
//!   statistics, normalised as `mode` says);
//! - A = Σ_k w_k A_k over the levels whose A_k ≠ 0, w_k = (k + 1)^α / (Σ (k + 1)^α + ε), and 0
//!   when no level is left. There is no separate episode term.
//!
//! The paper's own text could not be read here (neither the arXiv PDF nor its HTML was
//! retrievable), so the equations are read off the reference: verl-agent
//! `recipe/hgpo/core_hgpo.py::hgpo_advantage_estimate` at `20bd331`, whose defaults (K = 2,
//! α = 1, `mean_std_norm`, no base group) both presets copy. Profiles:
//! - `verl`: the recipe's trainer: penalty 0.1 on invalid rows after discounting, base group
//!   statistics over step rows.
//! - `paper`: the same estimator with the paper profile's conventions (no penalty, base group
//!   statistics over trajectories).

use super::group_stats::{
    cluster_advantages, episode_advantages, episode_scores, episode_stats, step_returns, Norm,
};
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::{Conventions, Profile};
use polars::prelude::PlHashMap;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(flatten)]
    pub conv: Conventions,
    /// `mean_std` (`mean_std_norm`, the ALFWorld scripts) or `mean` (`mean_norm`, WebShop).
    pub mode: Norm,
    /// K, the steps of history before the current one (`env.history_length`; the released
    /// scripts use 2 or 4).
    pub history_length: u64,
    /// α of the level weights (k + 1)^α (`length_weight_alpha`): 0 weighs levels alike, larger
    /// values favour the longest matching context.
    pub alpha: f64,
    /// Adds the episode advantage as level k = 0 (`base_group`).
    pub base_group: bool,
}

impl Params {
    fn of(profile: Profile) -> Self {
        Params {
            conv: Conventions::of(profile),
            mode: Norm::MeanStd,
            history_length: 2,
            alpha: 1.0,
            base_group: false,
        }
    }

    pub fn paper() -> Self {
        Self::of(Profile::Paper)
    }

    pub fn verl() -> Self {
        Self::of(Profile::Verl)
    }

    pub fn preset(profile: Profile) -> Self {
        Self::of(profile)
    }

    pub fn check(&self) -> Result<()> {
        if self.alpha.is_finite() {
            Ok(())
        } else {
            Err(Error::Param(format!(
                "hgpo.alpha = {} must be finite",
                self.alpha
            )))
        }
    }
}

/// Columns `adv_hgpo`, `hgpo_step_return`, `hgpo_levels` (how many levels gave a non-zero A_k,
/// the base level included) and `hgpo_context` (the longest context k that gave a non-zero A_k;
/// 0 when none).
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let conv = &params.conv;
    let n = batch.len();
    let returns = step_returns(batch, conv)?;
    let max_k = params.history_length.saturating_add(1) as usize;
    let (states, start) = state_sequences(batch);

    // A_k for every level; a row too early in its trajectory for level k is in no group there.
    let mut levels: Vec<Vec<f64>> = Vec::new();
    let mut clusters: Vec<Vec<u32>> = Vec::new();
    let mut index: PlHashMap<&[u32], usize> = PlHashMap::default();
    for k in 1..=max_k {
        clusters.clear();
        for g in 0..batch.groups.len() {
            index.clear();
            for &t in &batch.groups[g].trajs {
                let rows = &batch.trajs[t as usize].rows;
                let ids = &states[start[t as usize]..start[t as usize] + rows.len()];
                for s in k - 1..rows.len() {
                    let key = &ids[s + 1 - k..=s];
                    let c = *index.entry(key).or_insert_with(|| {
                        clusters.push(Vec::new());
                        clusters.len() - 1
                    });
                    clusters[c].push(rows[s]);
                }
            }
        }
        if clusters.is_empty() {
            break;
        }
        let mut level = vec![0.0; n];
        cluster_advantages(
            &returns,
            clusters.iter().map(Vec::as_slice),
            params.mode,
            0,
            conv.eps,
            &mut level,
        );
        levels.push(level);
    }

    let base = params.base_group.then(|| {
        let scores = episode_scores(batch, conv);
        let stats = episode_stats(batch, &scores, conv.stats_over, conv.std_ddof);
        episode_advantages(batch, &scores, &stats, params.mode, conv.eps)
    });

    let weight = |k: usize| ((k + 1) as f64).powf(params.alpha);
    let mut advantage = vec![0.0; n];
    let mut used = vec![0i64; n];
    let mut context = vec![0i64; n];
    let mut items: Vec<(usize, f64)> = Vec::new();
    for r in 0..n {
        items.clear();
        if let Some(base) = &base {
            items.push((0, base[r]));
        }
        let reach = (batch.position[r] as usize + 1).min(levels.len());
        items.extend((0..reach).map(|l| (l + 1, levels[l][r])));
        items.retain(|&(_, a)| a != 0.0);
        let total: f64 = items.iter().map(|&(k, _)| weight(k)).sum();
        advantage[r] = items
            .iter()
            .map(|&(k, a)| weight(k) / (total + conv.eps) * a)
            .sum();
        used[r] = items.len() as i64;
        context[r] = items.iter().map(|&(k, _)| k as i64).max().unwrap_or(0);
    }
    Ok(Advantages::new("hgpo", advantage)
        .part("hgpo", "step_return", Values::F64(returns))
        .part("hgpo", "levels", Values::I64(used))
        .part("hgpo", "context", Values::I64(context)))
}

/// Every trajectory's states in step order, one after another (trajectory t's at
/// `start[t]..start[t] + len`), as small integers: the source nodes the batch interned
/// ([`StepBatch::states`]), equal for byte-identical `obs` within a group (ids are only compared
/// within a group), unique for a row without `obs`.
fn state_sequences(batch: &StepBatch) -> (Vec<u32>, Vec<usize>) {
    let states = batch.states();
    let mut sequences = Vec::with_capacity(batch.len());
    let mut start = vec![0; batch.trajs.len()];
    for (g, group) in batch.groups.iter().enumerate() {
        // A group's steps come trajectory by trajectory, each in step order.
        let mut steps = states.steps(g).iter();
        for &t in &group.trajs {
            start[t as usize] = sequences.len();
            let len = batch.trajs[t as usize].rows.len();
            sequences.extend(steps.by_ref().take(len).map(|&(_, source, _)| source));
        }
    }
    (sequences, start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch};
    use crate::methods::part;

    /// One group: τ1 A→B→C wins (r = 1 at the end), τ2 A→B→D and τ3 A→E fail, τ4 X→B gets 0.5.
    /// R (γ = 0.95): τ1 [0.9025, 0.95, 1], τ2 [0, 0, 0], τ3 [0, 0], τ4 [0.475, 0.5].
    fn four_trajectories() -> StepBatch {
        batch(&[
            ("g", "1", 0, "A", 0.0, true),
            ("g", "1", 1, "B", 0.0, true),
            ("g", "1", 2, "C", 1.0, true),
            ("g", "2", 0, "A", 0.0, true),
            ("g", "2", 1, "B", 0.0, true),
            ("g", "2", 2, "D", 0.0, true),
            ("g", "3", 0, "A", 0.0, true),
            ("g", "3", 1, "E", 0.0, true),
            ("g", "4", 0, "X", 0.0, true),
            ("g", "4", 1, "B", 0.5, true),
        ])
    }

    // Derived by hand from the equations (K = 2). Level 1: {A} = (0.9025, 0, 0), μ = 0.30083,
    // σ (population) = 0.42544 → τ1 t0 = +1.41421; {B} = (0.95, 0, 0.5), μ = 0.48333,
    // σ = 0.38837. Level 2: {A,B} = (0.95, 0) → ±1. Level 3: every context unique. τ1 t1 =
    // (2·1.20168 + 3·1)/(5 + ε) = 1.08108; singletons C, D, E, X give 0.
    #[test]
    fn levels_weighted_by_context_length() {
        let b = four_trajectories();
        let a = advantages(&b, &Params::paper()).unwrap();
        assert_close(
            a.advantage(),
            &[
                std::f64::consts::SQRT_2,
                1.081078,
                0.0,
                -0.707105,
                -1.09826,
                0.0,
                -0.707105,
                0.0,
                0.0,
                0.042954,
            ],
            1e-5,
        );
        let levels = match a.column("hgpo_levels") {
            Some(Values::I64(v)) => v.clone(),
            _ => panic!("no hgpo_levels"),
        };
        assert_eq!(levels, vec![1, 2, 0, 1, 2, 0, 1, 0, 0, 1]);
        let mean = Params {
            mode: Norm::Mean,
            ..Params::paper()
        };
        assert_close(
            advantages(&b, &mean).unwrap().advantage(),
            &[
                0.601666, 0.471667, 0.0, -0.300833, -0.478333, 0.0, -0.300833, 0.0, 0.0, 0.016667,
            ],
            1e-5,
        );
        // α = 0: the levels count alike.
        let flat = Params {
            alpha: 0.0,
            ..Params::paper()
        };
        assert_close(
            advantages(&b, &flat).unwrap().advantage(),
            &[
                1.414209, 1.101348, 0.0, -0.707104, -1.122825, 0.0, -0.707104, 0.0, 0.0, 0.042954,
            ],
            1e-5,
        );
    }

    // With the base group: level 0 = GRPO over trajectories (scores 1, 0, 0, 0.5; μ = 0.375,
    // σ = 0.47871): τ1 +1.30558, τ2 and τ3 −0.78335, τ4 +0.26112, weight 1^α.
    #[test]
    fn base_group_adds_the_episode_level() {
        let p = Params {
            base_group: true,
            ..Params::paper()
        };
        let a = advantages(&four_trajectories(), &p).unwrap();
        assert_close(
            a.advantage(),
            &[
                1.378, 1.118495, 1.305578, -0.732519, -1.045775, -0.783347, -0.732519, -0.783347,
                0.261116, 0.115674,
            ],
            1e-5,
        );
    }

    #[test]
    fn interleaved_rows_give_the_same_contexts() {
        let rows = [
            ("g", "1", 0, "A", 0.0, true),
            ("g", "2", 0, "A", 0.0, true),
            ("g", "1", 1, "B", 0.0, true),
            ("g", "2", 1, "B", 0.0, true),
            ("g", "1", 2, "C", 1.0, true),
            ("g", "2", 2, "D", 0.0, true),
        ];
        let a = advantages(&batch(&rows), &Params::paper()).unwrap();
        // Level 1 {A}, {B} and level 2 {A,B} pair τ1 with τ2: every non-final step ±1.
        let one = 1.0 / (1.0 + 1e-6 / 0.45125);
        assert_close(a.advantage()[..4].as_ref(), &[one, -one, 1.0, -1.0], 1e-5);
        assert_eq!(part(&a, "hgpo_step_return")[4], 1.0);
    }
}
