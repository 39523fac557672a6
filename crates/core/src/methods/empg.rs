//! EMPG: entropy-modulated policy gradients (Wang et al. 2025, "Harnessing Uncertainty:
//! Entropy-Modulated Policy Gradients for Long-Horizon LLM Agents", arXiv 2509.09265).
//!
//! With H_t the policy's entropy at step t (the logged `entropy`: mean token entropy of the
//! step's action) and A(i) the trajectory's GRPO advantage:
//! - Eq. 12: H̃ = (H − min H)/(max H − min H + 1e-8), min and max over the batch's steps;
//! - Eq. 10: g(H) = exp(−k·H̃) / (mean_batch exp(−k·H̃) + 1e-8), so g averages 1 over the batch:
//!   confident steps get larger updates, uncertain ones smaller;
//! - Eq. 11: f(H) = exp(−k_f·H̃), the future-clarity bonus;
//! - Eq. 8: A_mod(i, t) = g(H_t)·A(i) + ζ·f(H_{t+1}), the bonus only where step t + 1 of the
//!   same trajectory exists;
//! - Eq. 7: A = A_mod − mean_batch A_mod (zero-mean over the batch's steps).
//!
//! Defaults k = k_f = 1, ζ = 0.1 (the authors' `compute_empg_advantage` pseudocode on the project
//! page, which cites these equation numbers). The batch is an iteration (or the whole input
//! without one), so the method needs every group of it at once. There is no public reference
//! code: both presets compute the equations; they differ only in A(i), GRPO under that profile
//! (`verl`: statistics over step rows and the 0.1 invalid penalty).

use super::group_stats::{episode_advantages, episode_scores, episode_stats, Norm};
use super::step_rl::row_name;
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::{Conventions, Profile};
use crate::schema::{columns::ENTROPY, describe_accepted, field};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(flatten)]
    pub conv: Conventions,
    /// Normalisation of A(i): `mean_std` (GRPO) or `mean` (Dr.GRPO).
    pub norm: Norm,
    /// k of g(H) (Eq. 10).
    pub k: f64,
    /// k_f of f(H) (Eq. 11).
    pub k_f: f64,
    /// ζ, the weight of the future-clarity bonus (Eq. 8).
    pub zeta: f64,
}

impl Params {
    fn of(profile: Profile) -> Self {
        Params {
            conv: Conventions::of(profile),
            norm: Norm::MeanStd,
            k: 1.0,
            k_f: 1.0,
            zeta: 0.1,
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
        for (key, x) in [("k", self.k), ("k_f", self.k_f), ("zeta", self.zeta)] {
            if !(x.is_finite() && x >= 0.0) {
                return Err(Error::Param(format!(
                    "empg.{key} = {x} must be a finite number ≥ 0"
                )));
            }
        }
        Ok(())
    }
}

/// The logged step entropies, or an error naming what to log (or the first row without one).
fn entropies(batch: &StepBatch) -> Result<Vec<f64>> {
    let column = batch.opt_f64s(ENTROPY).ok_or_else(|| {
        let accepted = field(ENTROPY).map_or_else(|| format!("`{ENTROPY}`"), describe_accepted);
        Error::Param(format!(
            "empg needs the policy's entropy at every step: log a {accepted} column (the mean over the action's tokens of the token-level entropy, e.g. verl's per-token entropy averaged over the step's response)"
        ))
    })?;
    (0..batch.len())
        .map(|r| {
            column.get(r).ok_or_else(|| {
                Error::Param(format!(
                    "empg: {} has no `entropy` (H_t is needed on every step)",
                    row_name(batch, r)
                ))
            })
        })
        .collect()
}

/// Columns `adv_empg`, `empg_episode` (A(i)), `empg_scale` (g(H_t)), `empg_bonus` (ζ·f(H_{t+1}),
/// 0 on a trajectory's last step), `empg_entropy_norm` (H̃_t).
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let conv = &params.conv;
    let entropy = entropies(batch)?;
    let n = batch.len();
    let (low, high) = entropy
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
            (l.min(x), h.max(x))
        });
    let normalised: Vec<f64> = entropy
        .iter()
        .map(|&h| (h - low) / (high - low + 1e-8))
        .collect();
    let raw: Vec<f64> = normalised.iter().map(|&h| (-params.k * h).exp()).collect();
    let raw_mean = raw.iter().sum::<f64>() / n.max(1) as f64;
    let scale: Vec<f64> = raw.iter().map(|g| g / (raw_mean + 1e-8)).collect();

    let scores = episode_scores(batch, conv);
    let stats = episode_stats(batch, &scores, conv.stats_over, conv.std_ddof);
    let episode = episode_advantages(batch, &scores, &stats, params.norm, conv.eps);

    let mut bonus = vec![0.0; n];
    for traj in &batch.trajs {
        for pair in traj.rows.windows(2) {
            let next = normalised[pair[1] as usize];
            bonus[pair[0] as usize] = params.zeta * (-params.k_f * next).exp();
        }
    }
    let modulated: Vec<f64> = (0..n).map(|r| scale[r] * episode[r] + bonus[r]).collect();
    let mean = modulated.iter().sum::<f64>() / n.max(1) as f64;
    let advantage = modulated.iter().map(|a| a - mean).collect();
    Ok(Advantages::new("empg", advantage)
        .part("empg", "episode", Values::F64(episode))
        .part("empg", "scale", Values::F64(scale))
        .part("empg", "bonus", Values::F64(bonus))
        .part("empg", "entropy_norm", Values::F64(normalised)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch_with_columns};
    use crate::methods::part;
    use polars::prelude::Column;

    // Derived by hand from Eqs. 7–12 (k = k_f = 1, ζ = 0.1). Groups g: τ1 (r = 0, 1) and τ2
    // (0, 0, 0); h: τ3 (1) and τ4 (0, 0). H = [0.2, 1.0 | 0.6, 1.4, 0.2 | 0.2 | 1.0, 0.6]:
    // H̃ = (H − 0.2)/1.2, exp(−H̃) averages 0.72846, so g = [1.37274, 0.70479, 0.98361, 0.50500,
    // 1.37274, 1.37274, 0.70479, 0.98361]. A(i) = ±0.70711 in both groups (paper: over
    // trajectories, sample std). The batch mean of A_mod is then subtracted.
    #[test]
    fn entropy_scaled_episode_advantage_plus_clarity_bonus() {
        let rows = [
            ("g", "1", 0, "s", 0.0, true),
            ("g", "1", 1, "s", 1.0, true),
            ("g", "2", 0, "s", 0.0, true),
            ("g", "2", 1, "s", 0.0, true),
            ("g", "2", 2, "s", 0.0, true),
            ("h", "3", 0, "s", 1.0, true),
            ("h", "4", 0, "s", 0.0, true),
            ("h", "4", 1, "s", 0.0, true),
        ];
        let entropy = [0.2, 1.0, 0.6, 1.4, 0.2, 0.2, 1.0, 0.6];
        let b = batch_with_columns(&rows, vec![Column::new(ENTROPY.into(), entropy)]);
        let a = advantages(&b, &Params::paper()).unwrap();
        assert_close(
            part(&a, "empg_scale"),
            &[
                1.372736, 0.704786, 0.983609, 0.505001, 1.372736, 1.372736, 0.704786, 0.983609,
            ],
            1e-5,
        );
        assert_close(
            a.advantage(),
            &[
                1.08672, 0.563067, -0.594019, -0.192381, -0.905961, 1.035378, -0.361997, -0.630807,
            ],
            1e-5,
        );
        assert!(a.advantage().iter().sum::<f64>().abs() < 1e-12);
    }

    #[test]
    fn missing_entropy_says_what_to_log() {
        let rows = [("g", "1", 0, "s", 1.0, true), ("g", "2", 0, "s", 0.0, true)];
        let b = batch_with_columns(&rows, Vec::new());
        match advantages(&b, &Params::paper()) {
            Err(Error::Param(m)) => assert!(m.contains("`entropy`"), "{m}"),
            other => panic!("expected a parameter error, got {other:?}"),
        }
    }
}
