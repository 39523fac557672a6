//! GRPO: episode-level group advantage (GRPO; Dr.GRPO as `norm = mean`).
//!
//! A(a_t^(i)) = (R(τ_i) − μ_g) / (σ_g + ε), μ_g and σ_g over the group's scores
//! (`spec-proxmo-gigpo.md` §1). Dr.GRPO (`norm_adv_by_std_in_grpo=False`) drops the division.
//! Every step of a trajectory gets its row's value. A group of one value gets μ = 0, σ = 1.
//!
//! Profiles (reference: verl-agent `core_algos.py::compute_grpo_outcome_advantage`):
//! - `paper`: one score per trajectory (`compute_mean_std_cross_steps=False`, the first row's score).
//! - `verl`: statistics over step rows (`compute_mean_std_cross_steps=True`), and the invalid-action
//!   penalty 0.1 subtracted from each invalid row's score.

use super::group_stats::{episode_advantages, episode_scores, episode_stats, Norm};
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::Result;
use crate::profile::{Conventions, Profile};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(flatten)]
    pub conv: Conventions,
    /// `mean_std` (GRPO) or `mean` (Dr.GRPO).
    pub norm: Norm,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            conv: Conventions::of(Profile::Paper),
            norm: Norm::MeanStd,
        }
    }

    pub fn verl() -> Self {
        Params {
            conv: Conventions::of(Profile::Verl),
            norm: Norm::MeanStd,
        }
    }

    pub fn preset(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Self::paper(),
            Profile::Verl => Self::verl(),
        }
    }
}

/// Columns `adv_<label>`, `<label>_score`, `<label>_mean`, `<label>_std`.
pub fn advantages(batch: &StepBatch, params: &Params, label: &str) -> Result<Advantages> {
    let scores = episode_scores(batch, &params.conv);
    let stats = episode_stats(batch, &scores, params.conv.stats_over, params.conv.std_ddof);
    let advantage = episode_advantages(batch, &scores, &stats, params.norm, params.conv.eps);
    let per_row = |v: &[f64]| {
        batch
            .group_of_row
            .iter()
            .map(|&g| v[g as usize])
            .collect::<Vec<_>>()
    };
    Ok(Advantages::new(label, advantage)
        .part(label, "score", Values::F64(scores))
        .part(label, "mean", Values::F64(per_row(&stats.mean)))
        .part(label, "std", Values::F64(per_row(&stats.std))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, spec_4_1};
    use crate::profile::StatsOver;

    // spec-proxmo-gigpo.md §4.3, rows 0..16 of the §4.1 dataset (t1: rows 0-2, t2: 3-5, t3: 6-7,
    // t4: 8-10, t5: 11-12, t6: 13-15).
    fn per_row(t: [f64; 6]) -> Vec<f64> {
        [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 5]
            .iter()
            .map(|&i| t[i])
            .collect()
    }

    #[test]
    fn vector_4_3_grpo_paper_ddof1() {
        let a = advantages(&spec_4_1(1.0, None), &Params::paper(), "grpo").unwrap();
        assert_close(
            a.advantage(),
            &per_row([1.5, -0.5, -0.5, -0.5, 0.0, 0.0]),
            1e-4,
        );
    }

    #[test]
    fn vector_4_3_grpo_ddof0() {
        let mut p = Params::paper();
        p.conv.std_ddof = 0;
        let a = advantages(&spec_4_1(1.0, None), &p, "grpo").unwrap();
        assert_close(
            a.advantage(),
            &per_row([1.7320, -0.5773, -0.5773, -0.5773, 0.0, 0.0]),
            1e-4,
        );
    }

    #[test]
    fn vector_4_3_drgrpo_mean_only() {
        let p = Params {
            norm: Norm::Mean,
            ..Params::paper()
        };
        let a = advantages(&spec_4_1(1.0, None), &p, "drgrpo").unwrap();
        assert_close(
            a.advantage(),
            &per_row([0.75, -0.25, -0.25, -0.25, 0.0, 0.0]),
            1e-4,
        );
    }

    #[test]
    fn vector_4_3_grpo_verl_rows() {
        let mut p = Params::verl();
        p.conv.invalid_penalty = 0.0;
        let a = advantages(&spec_4_1(1.0, None), &p, "grpo").unwrap();
        assert_close(
            a.advantage(),
            &per_row([1.5570, -0.5839, -0.5839, -0.5839, 0.0, 0.0]),
            1e-4,
        );
        assert_eq!(p.conv.stats_over, StatsOver::Rows);
    }

    #[test]
    fn vector_4_6_grpo_verl_penalised_rows() {
        // §4.6: ×10 rewards, row 9 invalid, penalty 0.1: GiGPO-ref A^E is the verl GRPO value.
        let a = advantages(&spec_4_1(10.0, Some(9)), &Params::verl(), "grpo").unwrap();
        let mut expected = per_row([1.5570, -0.5812, -0.5812, -0.5812, 0.0, 0.0]);
        expected[9] = -0.6026;
        assert_close(a.advantage(), &expected, 1e-4);
    }

    #[test]
    fn single_row_group_gets_raw_reward() {
        // §4.7: a group with a single row (`verl`): μ = 0, σ = 1, so A^E = R.
        let b = crate::batch::testing::batch(&[("g", "t", 0, "x", 3.0, true)]);
        let a = advantages(&b, &Params::verl(), "grpo").unwrap();
        assert_close(a.advantage(), &[3.0 / (1.0 + 1e-6)], 1e-9);
    }
}
