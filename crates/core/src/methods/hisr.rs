//! HISR: hindsight-information-modulated segmental process rewards (Lu, Lin et al. 2026, arXiv
//! 2603.18683v1, Eq. 5–9; `spec-spa-hisr.md` Part B), from logged signals: the segment rewards r̂_i
//! (`segment_reward`, the SPRM's output), the segmentation (`segment`) and the two sequence
//! log-likelihoods (`logprob` from the policy, `hindsight_logprob` from the hindsight model).
//!
//! - z_k = exp((lp_hind_k − lp_pol_k)/(β·|a_k|))                         (Eq. 5–6, B6; β = 0.3)
//!   with |a_k| = `n_tokens`: the per-token mean log-ratio over the temperature β. A row without
//!   either log-probability or a positive token count gets z_k = 1; with none anywhere, every
//!   z(s_i) = 1: the paper's "w/o HIM" ablation, r^him = r̂/‖r̂‖ (B5, T-HISR-4). `z_clip` = c clips
//!   z_k to [1/c, c] (B11.5, off in the paper).
//! - z(s_i) = Σ_{k∈s_i} z_k (§3.2 "adding up turn ratios"; `seg_agg = mean` divides by |s_i|).
//! - r̂_i^him = r̂_i·z(s_i) / ‖r̂ ⊙ z(s)‖                                  (Eq. 7)
//!   `norm`: `l1` (the case studies' norm, B6), `l2`, or `mass` (L1 times Σ|r̂_i|, keeping the
//!   SPRM's reward mass). Computed in log space: log z(s_i) is a log-sum-exp, shifted by its
//!   maximum over the trajectory before exponentiating (every norm cancels the shift). All
//!   products 0 give r^him = 0.
//! - r_t = (1−α)·r̂^him_{seg(t)}·[t = last turn of seg(t)] + α·g_t             (Eq. 8, B7; α = 0.3)
//!   `place = spread` puts r̂_i^him/|s_i| on every turn of the segment instead. g_t as SPA's.
//! - G_t and A_t as SPA's ([`super::step_rl::StepRl`]): GAE (γ = 0.99, λ = 0.95) against `value`, or
//!   critic-free.
//!
//! Segments (`segments`, B3): `logged` (the `segment` column), `per_turn` or `rule` (a heuristic
//! for ALFWorld-style commands), as [`crate::methods::segments`] describes them.
//!
//! r̂_i is the `segment_reward` on the segment's last row that has one.
//!
//! Profiles: no public code exists, so `verl` equals `paper`.

use super::step_rl::{row_name, StepRl};
use super::{Advantages, Values};
use crate::batch::{StepBatch, Traj};
use crate::error::{Error, Result};
use crate::methods::segments::STATE_CHANGING;
pub use crate::methods::segments::{segmentation, Segmentation, Segments};
use crate::profile::Profile;
use crate::schema::columns::{HINDSIGHT_LOGPROB, LOGPROB, N_TOKENS, SEGMENT_REWARD};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// ‖·‖ of Eq. 7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HimNorm {
    L1,
    L2,
    /// L1, then times Σ|r̂_i|: the SPRM's reward mass is kept.
    Mass,
}

/// Where a segment's r̂^him lands among its turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// On the segment's last turn (where the SPRM reads out).
    End,
    /// r̂^him/|s| on each of its turns.
    Spread,
}

/// How turn importances make a segment importance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegAgg {
    Sum,
    Mean,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    /// β of Eq. 6, the temperature of the importance.
    pub beta: f64,
    /// α of Eq. 8, the weight of the grounding reward.
    pub alpha: f64,
    pub norm: HimNorm,
    pub place: Place,
    pub seg_agg: SegAgg,
    /// c: z_k clipped to [1/c, c]; absent: no clipping.
    pub z_clip: Option<f64>,
    /// Where the segments come from: `logged`, `per_turn` or `rule`.
    pub segments: Segments,
    #[serde(flatten)]
    pub rl: StepRl,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            beta: 0.3,
            alpha: 0.3,
            norm: HimNorm::L1,
            place: Place::End,
            seg_agg: SegAgg::Sum,
            z_clip: None,
            segments: Segments::Logged,
            rl: StepRl::paper(),
        }
    }

    pub fn preset(_profile: Profile) -> Self {
        Self::paper()
    }

    pub fn check(&self) -> Result<()> {
        if self.beta <= 0.0 {
            return Err(Error::Param(format!(
                "hisr.beta = {} must be positive",
                self.beta
            )));
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err(Error::Param(format!(
                "hisr.alpha = {} is out of range [0, 1]",
                self.alpha
            )));
        }
        if let Some(c) = self.z_clip {
            if c < 1.0 {
                return Err(Error::Param(format!(
                    "hisr.z_clip = {c} must be at least 1 (z is clipped to [1/c, c])"
                )));
            }
        }
        self.rl.check("hisr")
    }
}

/// r̂_i of every segment (the `segment_reward` on its last row that has one, `None` where no row
/// has one) and the number of segments whose rows disagree; `None` without the column.
pub fn segment_rewards(
    batch: &StepBatch,
    segments: &Segmentation,
) -> Option<(Vec<Vec<Option<f64>>>, usize)> {
    let column = batch.opt_f64s(SEGMENT_REWARD)?;
    let mut disagreeing = 0;
    let mut out = Vec::with_capacity(batch.trajs.len());
    for (traj, ranges) in batch.trajs.iter().zip(&segments.ranges) {
        let mut rewards = Vec::with_capacity(ranges.len());
        for range in ranges {
            let values: Vec<f64> = traj.rows[range.clone()]
                .iter()
                .filter_map(|&r| column.get(r as usize))
                .collect();
            if values.windows(2).any(|w| w[0] != w[1]) {
                disagreeing += 1;
            }
            rewards.push(values.last().copied());
        }
        out.push(rewards);
    }
    Some((out, disagreeing))
}

/// log z_k per row (Eq. 6), clipped to ±ln c with `z_clip`; 0 (z = 1) where `logprob`,
/// `hindsight_logprob` or a positive `n_tokens` is missing; `None` when they are missing on every
/// row ("w/o HIM"). Also the number of rows without them.
pub fn log_importance(
    batch: &StepBatch,
    beta: f64,
    z_clip: Option<f64>,
) -> (Option<Vec<f64>>, usize) {
    let (policy, hindsight, tokens) = (
        batch.opt_f64s(LOGPROB),
        batch.opt_f64s(HINDSIGHT_LOGPROB),
        batch.opt_i64s(N_TOKENS),
    );
    let bound = z_clip.map(f64::ln);
    let mut missing = 0;
    let out: Vec<f64> = (0..batch.len())
        .map(|r| {
            match (
                policy.and_then(|c| c.get(r)),
                hindsight.and_then(|c| c.get(r)),
                tokens.and_then(|c| c.get(r)),
            ) {
                (Some(p), Some(h), Some(n)) if n > 0 => {
                    let x = (h - p) / (beta * n as f64);
                    bound.map_or(x, |b| x.max(-b).min(b))
                }
                _ => {
                    missing += 1;
                    0.0
                }
            }
        })
        .collect();
    ((missing < batch.len()).then_some(out), missing)
}

/// log z(s) of one segment from its turns' log z_k: log-sum-exp (`sum`), less ln|s| (`mean`).
pub fn segment_log_importance(log_z: &[f64], agg: SegAgg) -> f64 {
    let max = log_z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum = max + log_z.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    match agg {
        SegAgg::Sum => sum,
        SegAgg::Mean => sum - (log_z.len() as f64).ln(),
    }
}

/// log z(s_i) of each of a trajectory's segments from the per-row log z_k; all 0 (z(s) = 1,
/// "w/o HIM") without them.
pub fn segment_log_importances(
    traj: &Traj,
    ranges: &[Range<usize>],
    log_z: Option<&[f64]>,
    agg: SegAgg,
) -> Vec<f64> {
    let Some(log_z) = log_z else {
        return vec![0.0; ranges.len()];
    };
    ranges
        .iter()
        .map(|range| {
            let turns: Vec<f64> = traj.rows[range.clone()]
                .iter()
                .map(|&r| log_z[r as usize])
                .collect();
            segment_log_importance(&turns, agg)
        })
        .collect()
}

/// Eq. 7: r̂ ⊙ z(s) / ‖r̂ ⊙ z(s)‖ from the segment rewards and log z(s); zeros when every product is 0.
pub fn modulate(rewards: &[f64], log_importance: &[f64], norm: HimNorm) -> Vec<f64> {
    let max = log_importance
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let products: Vec<f64> = rewards
        .iter()
        .zip(log_importance)
        .map(|(r, l)| r * (l - max).exp())
        .collect();
    let l1: f64 = products.iter().map(|p| p.abs()).sum();
    if l1 == 0.0 {
        return vec![0.0; rewards.len()];
    }
    let scale = match norm {
        HimNorm::L1 => 1.0 / l1,
        HimNorm::L2 => 1.0 / products.iter().map(|p| p * p).sum::<f64>().sqrt(),
        HimNorm::Mass => rewards.iter().map(|r| r.abs()).sum::<f64>() / l1,
    };
    products.iter().map(|p| p * scale).collect()
}

/// Columns `adv_hisr`, `hisr_importance` (z_k), `hisr_segment_importance` (z(s) of the row's
/// segment), `hisr_modulated` (r̂^him of the row's segment), `hisr_grounding` (g_t), `hisr_reward`
/// (r_t), `hisr_return` (G_t), `hisr_segment` (0-based segment index in the trajectory).
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let segments = segmentation(batch, params.segments, &params.rl)?;
    let (rewards, disagreeing) = segment_rewards(batch, &segments).ok_or_else(|| {
        Error::Param(
            "hisr needs the segment rewards r̂_i: log a `segment_reward` column (the SPRM's reward of each segment, on its rows)".into(),
        )
    })?;
    let (log_z, missing) = log_importance(batch, params.beta, params.z_clip);
    let grounding = params.rl.grounding(batch);
    let n = batch.len();
    let (mut segment_importance, mut modulated, mut reward, mut segment) =
        (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0i64; n]);
    for ((traj, ranges), traj_rewards) in batch.trajs.iter().zip(&segments.ranges).zip(&rewards) {
        let r_hat = traj_rewards
            .iter()
            .zip(ranges)
            .map(|(value, range)| {
                value.ok_or_else(|| {
                    let last = traj.rows[range.end - 1] as usize;
                    Error::Param(format!(
                        "hisr: the segment ending at {} has no `segment_reward`",
                        row_name(batch, last)
                    ))
                })
            })
            .collect::<Result<Vec<f64>>>()?;
        let log_zs = segment_log_importances(traj, ranges, log_z.as_deref(), params.seg_agg);
        let him = modulate(&r_hat, &log_zs, params.norm);
        for (i, range) in ranges.iter().enumerate() {
            let len = range.len();
            for (j, &r) in traj.rows[range.clone()].iter().enumerate() {
                let r = r as usize;
                let placed = match params.place {
                    Place::End if j + 1 == len => him[i],
                    Place::End => 0.0,
                    Place::Spread => him[i] / len as f64,
                };
                reward[r] = (1.0 - params.alpha) * placed + params.alpha * grounding[r];
                segment_importance[r] = log_zs[i].exp();
                modulated[r] = him[i];
                segment[r] = i as i64;
            }
        }
    }
    let (returns, advantage, critic_free) =
        params.rl.returns_and_advantages(batch, &reward, "hisr")?;
    let mut out = Advantages::new("hisr", advantage)
        .part(
            "hisr",
            "importance",
            Values::F64(
                log_z.map_or_else(|| vec![1.0; n], |l| l.iter().map(|x| x.exp()).collect()),
            ),
        )
        .part(
            "hisr",
            "segment_importance",
            Values::F64(segment_importance),
        )
        .part("hisr", "modulated", Values::F64(modulated))
        .part("hisr", "grounding", Values::F64(grounding))
        .part("hisr", "reward", Values::F64(reward))
        .part("hisr", "return", Values::F64(returns))
        .part("hisr", "segment", Values::I64(segment));
    if missing == n {
        out.notes.push(
            "hisr: no row has `logprob`, `hindsight_logprob` and a positive `n_tokens`: z(s) ≡ 1, the paper's \"w/o HIM\" ablation (segment rewards are only normalised)".into(),
        );
    } else if missing > 0 {
        out.notes.push(format!("hisr: {missing} of {n} rows lack `logprob`, `hindsight_logprob` or a positive `n_tokens`: z = 1 for them"));
    }
    match (params.segments, segments.segmenter) {
        (Segments::Logged, Segments::PerTurn) => out.notes.push("hisr: no `segment` column: every turn is its own segment (turn-level rewards, the \"w/o SPR\" granularity)".into()),
        (_, Segments::Rule) => out.notes.push(format!(
            "hisr: segments from the `rule` heuristic, not the paper's segmentation: a segment closes after each executed {} action",
            STATE_CHANGING.join("/")
        )),
        _ => {}
    }
    if segments.fallback > 0 {
        out.notes.push(format!(
            "hisr: {} trajectories have `segment` ids that are missing or not contiguous: one segment per turn for them",
            segments.fallback
        ));
    }
    if disagreeing > 0 {
        out.notes.push(format!(
            "hisr: {} {} different `segment_reward` values on their rows: the last one is used",
            crate::wording::plural(disagreeing, "segment"),
            crate::wording::agree(disagreeing, "carries", "carry")
        ));
    }
    out.notes.extend(critic_free);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch, batch_with_columns, Row};
    use crate::methods::part;
    use crate::methods::segments::command_verb;
    use crate::schema::columns::VALUE;
    use crate::schema::columns::{ACTION, SEGMENT};
    use polars::prelude::Column;

    /// T-HISR-1's trajectory (B9): 5 turns, tokens [10, 8, 12, 6, 9], lp_pol, lp_hind, g =
    /// [1, 1, 0, 1, 1], segments [(1), (2,3), (4,5)], r̂ = [0.10, 0.25, 0.65]; V = [0.5, 0.6, 0.6,
    /// 0.7, 0.8] when `with_value`.
    fn t_hisr_1(with_value: bool) -> StepBatch {
        let rows: [Row; 5] = [
            ("g", "a", 1, "o1", 0.0, true),
            ("g", "a", 2, "o2", 0.0, true),
            ("g", "a", 3, "o3", 0.0, false),
            ("g", "a", 4, "o4", 0.0, true),
            ("g", "a", 5, "o5", 1.0, true),
        ];
        let mut extra = vec![
            Column::new(N_TOKENS.into(), [10i64, 8, 12, 6, 9]),
            Column::new(LOGPROB.into(), [-12.0, -6.4, -18.0, -3.0, -9.9]),
            Column::new(HINDSIGHT_LOGPROB.into(), [-11.0, -4.0, -18.6, -2.4, -9.0]),
            Column::new(SEGMENT.into(), [1i64, 2, 2, 3, 3]),
            Column::new(SEGMENT_REWARD.into(), [0.10, 0.25, 0.25, 0.65, 0.65]),
        ];
        if with_value {
            extra.push(Column::new(VALUE.into(), [0.5, 0.6, 0.6, 0.7, 0.8]));
        }
        batch_with_columns(&rows, extra)
    }

    // spec-spa-hisr.md B9, T-HISR-1: z, z(s), r^him (L1), end-placed fused reward, G (γ = 0.99),
    // GAE with V (λ = 0.95), in both profiles (HISR has no code: `verl` = `paper`).
    #[test]
    #[allow(clippy::approx_constant)] // z_2 = e, printed by the spec to 4 decimals
    fn vector_b9_t_hisr_1_end_to_end() {
        for profile in [Profile::Paper, Profile::Verl] {
            let a = advantages(&t_hisr_1(true), &Params::preset(profile)).unwrap();
            assert_close(
                part(&a, "hisr_importance"),
                &[1.3956, 2.7183, 0.8465, 1.3956, 1.3956],
                1e-4,
            );
            assert_close(
                part(&a, "hisr_segment_importance"),
                &[1.3956, 3.5648, 3.5648, 2.7912, 2.7912],
                1e-4,
            );
            assert_close(
                part(&a, "hisr_modulated"),
                &[0.0491, 0.3132, 0.3132, 0.6377, 0.6377],
                1e-4,
            );
            assert_close(
                part(&a, "hisr_reward"),
                &[0.3343, 0.3000, 0.2193, 0.3000, 0.7464],
                1e-4,
            );
            assert_close(
                part(&a, "hisr_return"),
                &[1.8543, 1.5353, 1.2478, 1.0389, 0.7464],
                1e-4,
            );
            assert_close(
                a.advantage(),
                &[1.2652, 0.8898, 0.6335, 0.3416, -0.0536],
                1e-4,
            );
            assert!(a.notes.is_empty(), "{:?}", a.notes);
            match a.column("hisr_segment") {
                Some(Values::I64(s)) => assert_eq!(s, &[0, 1, 1, 2, 2]),
                _ => panic!("no hisr_segment"),
            }
        }
    }

    // B9, T-HISR-1: per-token mean log-ratio [0.1, 0.3, −0.05, 0.1, 0.1] (β = 1 gives log z = x).
    #[test]
    fn vector_b9_t_hisr_1_mean_log_ratio() {
        let (x, missing) = log_importance(&t_hisr_1(false), 1.0, None);
        assert_close(&x.unwrap(), &[0.1, 0.3, -0.05, 0.1, 0.1], 1e-4);
        assert_eq!(missing, 0);
    }

    // B9, T-HISR-1: spread placement r = [0.3343, 0.4096, 0.1096, 0.5232, 0.5232].
    #[test]
    fn vector_b9_t_hisr_1_spread() {
        let p = Params {
            place: Place::Spread,
            ..Params::paper()
        };
        let a = advantages(&t_hisr_1(true), &p).unwrap();
        assert_close(
            part(&a, "hisr_reward"),
            &[0.3343, 0.4096, 0.1096, 0.5232, 0.5232],
            1e-4,
        );
    }

    // B9, T-HISR-1: critic-free A = [1.6440, 1.3925, 1.1616, 1.0020, 0.7464].
    #[test]
    fn vector_b9_t_hisr_1_critic_free() {
        let a = advantages(&t_hisr_1(false), &Params::paper()).unwrap();
        assert_close(
            a.advantage(),
            &[1.6440, 1.3925, 1.1616, 1.0020, 0.7464],
            1e-4,
        );
        assert_eq!(a.notes.len(), 1);
        assert!(a.notes[0].contains("critic-free"));
    }

    // B9, T-HISR-1: products [0.1396, 0.8912, 1.8143]; L2 instead of L1 gives [0.0689, 0.4398, 0.8954].
    #[test]
    fn vector_b9_t_hisr_1_l2_contrast() {
        let log_zs = [1.3956f64.ln(), 3.5648f64.ln(), 2.7912f64.ln()];
        assert_close(
            &modulate(&[0.10, 0.25, 0.65], &log_zs, HimNorm::L2),
            &[0.0689, 0.4398, 0.8954],
            1e-4,
        );
        let a = advantages(
            &t_hisr_1(true),
            &Params {
                norm: HimNorm::L2,
                ..Params::paper()
            },
        )
        .unwrap();
        assert_close(
            part(&a, "hisr_modulated"),
            &[0.0689, 0.4398, 0.4398, 0.8954, 0.8954],
            1e-4,
        );
    }

    // B9, T-HISR-2 (the paper's Table 2 "clean bowl" case): R̂ = [0.069, 0.118, 0.132, 0.681],
    // ẑ = [0.127, 0.392, 0.286, 0.195] → r^him = [0.0388, 0.2051, 0.1674, 0.5887].
    #[test]
    fn vector_b9_t_hisr_2_clean_bowl_case() {
        let z = [0.127f64, 0.392, 0.286, 0.195].map(f64::ln);
        assert_close(
            &modulate(&[0.069, 0.118, 0.132, 0.681], &z, HimNorm::L1),
            &[0.0388, 0.2051, 0.1674, 0.5887],
            1e-4,
        );
    }

    // B9, T-HISR-3 (failed trajectory): r̂ = [0.05, −0.10, 0.02], z(s) = [1, 2, 1] → l1
    // [0.1852, −0.7407, 0.0741], mass [0.0315, −0.1259, 0.0126].
    #[test]
    fn vector_b9_t_hisr_3_failed_trajectory() {
        let r = [0.05, -0.10, 0.02];
        let z = [0.0, 2f64.ln(), 0.0];
        assert_close(
            &modulate(&r, &z, HimNorm::L1),
            &[0.1852, -0.7407, 0.0741],
            1e-4,
        );
        assert_close(
            &modulate(&r, &z, HimNorm::Mass),
            &[0.0315, -0.1259, 0.0126],
            1e-4,
        );
    }

    // B9, T-HISR-4 (degenerate): z ≡ 1 gives r̂/Σ|r̂|; all-zero r̂ gives zeros; one segment with
    // r̂ = 0.4 (z = 3) gives [1.0].
    #[test]
    fn vector_b9_t_hisr_4_degenerate() {
        let r = [0.05, -0.10, 0.02];
        assert_close(
            &modulate(&r, &[0.0; 3], HimNorm::L1),
            &[0.05 / 0.17, -0.10 / 0.17, 0.02 / 0.17],
            1e-12,
        );
        assert_eq!(
            modulate(&[0.0; 3], &[0.3, -1.0, 2.0], HimNorm::L1),
            vec![0.0; 3]
        );
        assert_close(&modulate(&[0.4], &[3f64.ln()], HimNorm::L1), &[1.0], 1e-12);
    }

    // Part C properties: Σ|r^him| = 1 under l1, and r^him is invariant to scaling z (a shift of log z).
    #[test]
    fn property_c_l1_mass_and_scale_invariance() {
        let (r, z) = ([0.3, -0.2, 0.7, 0.05], [0.2f64, -1.5, 0.9, 3.0]);
        let him = modulate(&r, &z, HimNorm::L1);
        assert!((him.iter().map(|x| x.abs()).sum::<f64>() - 1.0).abs() < 1e-12);
        for shift in [-50.0, 7.0_f64.ln(), 300.0] {
            let scaled: Vec<f64> = z.iter().map(|l| l + shift).collect();
            for norm in [HimNorm::L1, HimNorm::L2, HimNorm::Mass] {
                assert_close(&modulate(&r, &scaled, norm), &modulate(&r, &z, norm), 1e-12);
            }
        }
    }

    // B5/B6, T-HISR-4: without log-probs z ≡ 1 ("w/o HIM"), with one note saying so; r^him = r̂/Σ|r̂|
    // whatever the segments' lengths: r̂ = [0.2, 0.6] → [0.25, 0.75].
    #[test]
    fn missing_logprobs_is_the_without_him_ablation() {
        let rows: [Row; 3] = [
            ("g", "a", 0, "o", 0.0, true),
            ("g", "a", 1, "o", 0.0, true),
            ("g", "a", 2, "o", 1.0, true),
        ];
        let b = batch_with_columns(
            &rows,
            vec![
                Column::new(SEGMENT.into(), [0i64, 0, 1]),
                Column::new(SEGMENT_REWARD.into(), [0.2, 0.2, 0.6]),
            ],
        );
        let a = advantages(&b, &Params::paper()).unwrap();
        assert_close(part(&a, "hisr_importance"), &[1.0; 3], 0.0);
        assert_close(part(&a, "hisr_modulated"), &[0.25, 0.25, 0.75], 1e-12);
        assert_eq!(a.notes.iter().filter(|n| n.contains("w/o HIM")).count(), 1);
    }

    #[test]
    fn segments_fall_back_per_turn_and_missing_rewards_are_errors() {
        let rows: [Row; 3] = [
            ("g", "a", 0, "o", 0.0, true),
            ("g", "a", 1, "o", 0.0, true),
            ("g", "a", 2, "o", 1.0, true),
        ];
        let b = batch_with_columns(
            &rows,
            vec![
                Column::new(SEGMENT.into(), [0i64, 1, 0]),
                Column::new(SEGMENT_REWARD.into(), [0.2, 0.2, 0.6]),
            ],
        );
        let s = segmentation(&b, Segments::Logged, &StepRl::paper()).unwrap();
        assert_eq!(
            (s.ranges[0].clone(), s.fallback),
            (vec![0..1, 1..2, 2..3], 1)
        );
        assert!(advantages(&b, &Params::paper())
            .unwrap()
            .notes
            .iter()
            .any(|n| n.contains("not contiguous")));

        let bare = batch_with_columns(&rows, vec![]);
        match advantages(&bare, &Params::paper()) {
            Err(Error::Param(m)) => assert!(m.contains("`segment_reward`"), "{m}"),
            other => panic!("expected a parameter error, got {other:?}"),
        }
        let gap = batch_with_columns(
            &rows,
            vec![Column::new(
                SEGMENT_REWARD.into(),
                [Some(0.2), None, Some(0.6)],
            )],
        );
        match advantages(&gap, &Params::paper()) {
            Err(Error::Param(m)) => assert!(m.contains("trajectory `a` step 1"), "{m}"),
            other => panic!("expected a parameter error, got {other:?}"),
        }
    }

    #[test]
    fn z_clip_bounds_the_importance() {
        let p = Params {
            z_clip: Some(2.0),
            ..Params::paper()
        };
        let a = advantages(&t_hisr_1(true), &p).unwrap();
        assert_close(
            part(&a, "hisr_importance"),
            &[1.3956, 2.0, 0.8465, 1.3956, 1.3956],
            1e-4,
        );
    }
    // Part C property, end to end: adding c·β·|a_k| to every lp_hind_k adds c to every log z_k,
    // scaling every z_k and z(s_i) by e^c; r^him does not change. T-HISR-1 with c = ln 5.
    #[test]
    fn property_c_scaling_every_z_leaves_the_modulated_rewards() {
        let base = advantages(&t_hisr_1(false), &Params::paper()).unwrap();
        let tokens = [10.0, 8.0, 12.0, 6.0, 9.0];
        let hindsight = [-11.0, -4.0, -18.6, -2.4, -9.0];
        let shifted: Vec<f64> = hindsight
            .iter()
            .zip(tokens)
            .map(|(h, n)| h + 5f64.ln() * 0.3 * n)
            .collect();
        let mut b = t_hisr_1(false);
        b.with_column_f64(HINDSIGHT_LOGPROB, shifted).unwrap();
        let scaled = advantages(&b, &Params::paper()).unwrap();
        let times_5: Vec<f64> = part(&base, "hisr_importance")
            .iter()
            .map(|z| 5.0 * z)
            .collect();
        assert_close(part(&scaled, "hisr_importance"), &times_5, 1e-9);
        for column in ["hisr_modulated", "hisr_reward"] {
            assert_close(part(&scaled, column), part(&base, column), 1e-12);
        }
    }

    // Part C property, end to end: lp_hind = lp_pol gives z ≡ 1, and with one turn per segment
    // (z(s) = 1) r^him = r̂/Σ|r̂|: T-HISR-1's turns with r̂ = [0.1, −0.2, 0.3, 0.15, 0.25] → /1.0.
    #[test]
    fn property_c_unit_importance_normalises_the_segment_rewards() {
        let r_hat = [0.1, -0.2, 0.3, 0.15, 0.25];
        let mut b = t_hisr_1(true);
        b.with_column_f64(HINDSIGHT_LOGPROB, vec![-12.0, -6.4, -18.0, -3.0, -9.9])
            .unwrap();
        b.with_column_f64(SEGMENT_REWARD, r_hat.to_vec()).unwrap();
        let p = Params {
            segments: Segments::PerTurn,
            ..Params::paper()
        };
        let a = advantages(&b, &p).unwrap();
        assert_close(part(&a, "hisr_importance"), &[1.0; 5], 0.0);
        assert_close(part(&a, "hisr_modulated"), &r_hat, 1e-12);
        assert!(a.notes.is_empty(), "{:?}", a.notes);
    }

    /// An ALFWorld-like batch (B3's `rule`): trajectory `a`, 8 turns, and `b`, 3 turns, with
    /// `action`, logged `segment` ids, `segment_reward` and equal log-probs but on two turns.
    ///
    /// a: 1 go to (Thought mentions "take")  2 take apple ✓        3 go to sinkbasin (`<action>`)
    ///    4 clean apple → "Nothing happens." 5 clean apple ✓ (`\boxed{}`) 6 go to fridge
    ///    7 put apple, `valid` false         8 put apple ✓
    /// b: 1 open fridge ✓  2 go to countertop  3 look
    ///
    /// z_k: 1 everywhere (lp_hind = lp_pol) but z_2 = 2 and z_5 = 3 on `a` (n = 1, β = 0.3:
    /// lp_hind − lp_pol = 0.3·ln z).
    fn alfworld_like() -> StepBatch {
        let rows: [Row; 11] = [
            ("g", "a", 1, "You are in the middle of a room.", 0.0, true),
            (
                "g",
                "a",
                2,
                "You arrive at countertop 1. On it you see a apple 1.",
                0.0,
                true,
            ),
            (
                "g",
                "a",
                3,
                "You pick up the apple 1 from the countertop 1.",
                0.0,
                true,
            ),
            ("g", "a", 4, "You arrive at sinkbasin 1.", 0.0, true),
            ("g", "a", 5, "Nothing happens.", 0.0, true),
            (
                "g",
                "a",
                6,
                "You clean the apple 1 using the sinkbasin 1.",
                0.0,
                true,
            ),
            ("g", "a", 7, "You arrive at fridge 1.", 0.0, false),
            ("g", "a", 8, "Nothing happens.", 1.0, true),
            ("g", "b", 1, "You are in the middle of a room.", 0.0, true),
            ("g", "b", 2, "You open the fridge 1.", 0.0, true),
            ("g", "b", 3, "You arrive at countertop 2.", 0.0, true),
        ];
        let actions = [
            "Thought: I need to take an apple.\nAction: go to countertop 1",
            "Action: take apple 1 from countertop 1",
            "<think>Now wash it.</think><action>go to sinkbasin 1</action>",
            "Action: clean apple 1 with sinkbasin 1",
            "\\boxed{clean apple 1 with sinkbasin 1}",
            "Action: go to fridge 1",
            "Action: put apple 1 in/on fridge 1",
            "Action: Put apple 1 in/on fridge 1",
            "Action: open fridge 1",
            "Action: go to countertop 2",
            "Action: look",
        ];
        let (two, three) = (0.3 * 2f64.ln(), 0.3 * 3f64.ln());
        let mut hindsight = [-1.0; 11];
        hindsight[1] += two;
        hindsight[4] += three;
        batch_with_columns(
            &rows,
            vec![
                Column::new(ACTION.into(), actions),
                Column::new(SEGMENT.into(), [1i64, 1, 1, 2, 2, 3, 3, 3, 1, 2, 1]),
                Column::new(
                    SEGMENT_REWARD.into(),
                    [0.2, 0.2, 0.3, 0.3, 0.3, 0.5, 0.5, 0.5, 0.4, 0.6, 0.6],
                ),
                Column::new(LOGPROB.into(), [-1.0; 11]),
                Column::new(HINDSIGHT_LOGPROB.into(), hindsight),
                Column::new(N_TOKENS.into(), [1i64; 11]),
            ],
        )
    }

    // B3: the three segmenters on the same logs. `rule` on a closes after the executed take (2),
    // clean (5) and put (8): turn 1 is navigation (its Thought's "take" is not the command), 4's
    // clean is answered "Nothing happens." (the next observation), 7's put is not `valid`, so they
    // join the next closing action: [1–2], [3–5], [6–8]. On b the open (1) closes [1] and the
    // turns after it form the last segment [2–3]. `logged` keeps a's runs [1–3], [4–5], [6–8]
    // and falls b back to one segment per turn (ids 1, 2, 1 are not contiguous).
    #[test]
    fn segmenters_logged_per_turn_and_rule() {
        let b = alfworld_like();
        let with = |segments| segmentation(&b, segments, &StepRl::paper()).unwrap();
        let logged = with(Segments::Logged);
        assert_eq!(
            logged.ranges,
            vec![vec![0..3, 3..5, 5..8], vec![0..1, 1..2, 2..3]]
        );
        assert_eq!((logged.segmenter, logged.fallback), (Segments::Logged, 1));
        let per_turn = with(Segments::PerTurn);
        assert_eq!(
            per_turn.ranges[0],
            (0..8).map(|k| k..k + 1).collect::<Vec<_>>()
        );
        assert_eq!(
            (per_turn.segmenter, per_turn.fallback),
            (Segments::PerTurn, 0)
        );
        let rule = with(Segments::Rule);
        assert_eq!(rule.ranges, vec![vec![0..2, 2..5, 5..8], vec![0..1, 1..3]]);
        assert_eq!((rule.segmenter, rule.fallback), (Segments::Rule, 0));
    }

    #[test]
    fn command_verbs_strip_the_wrappers() {
        for (action, verb) in [
            ("Thought: take it.\nAction: go to desk 1", Some("go")),
            (
                "<think>open it</think><action>Toggle desklamp 1</action>",
                Some("toggle"),
            ),
            (
                "The answer is \\boxed{heat egg 1 with microwave 1}.",
                Some("heat"),
            ),
            ("> use desklamp 1", Some("use")),
            ("cool mug 1 with fridge 1", Some("cool")),
            ("Action:", None),
        ] {
            assert_eq!(command_verb(action).as_deref(), verb, "{action}");
        }
    }

    // HISR on `rule` segments of a, by hand (β = 0.3, α = 0.3, L1, end placement, γ = λ = 1,
    // critic-free, so A = G):
    // z = [1, 2, 1, 1, 3, 1, 1, 1] → z(s) = [1+2, 1+1+3, 1+1+1] = [3, 5, 3];
    // r̂ = [0.2, 0.3, 0.5] → r̂·z(s) = [0.6, 1.5, 1.5], L1 = 3.6 → r^him = [1/6, 5/12, 5/12].
    // g (from `valid`) = [1, 1, 1, 1, 1, 1, 0, 1]; r_t = 0.7·r^him at a segment's last turn + 0.3·g:
    // r = [0.3, 0.3 + 0.7/6, 0.3, 0.3, 0.3 + 0.7·5/12, 0.3, 0, 0.3 + 0.7·5/12]
    //   = [0.3, 0.416667, 0.3, 0.3, 0.591667, 0.3, 0, 0.591667];
    // G (suffix sums) = [2.8, 2.5, 2.083333, 1.783333, 1.483333, 0.891667, 0.591667, 0.591667] = A.
    // b: z(s) = [1, 2], r̂ = [0.4, 0.6] → products [0.4, 1.2], L1 1.6 → r^him = [0.25, 0.75].
    #[test]
    fn rule_segments_end_to_end() {
        let p = Params {
            segments: Segments::Rule,
            rl: StepRl {
                gamma: 1.0,
                lambda: 1.0,
                ..StepRl::paper()
            },
            ..Params::paper()
        };
        let a = advantages(&alfworld_like(), &p).unwrap();
        match a.column("hisr_segment") {
            Some(Values::I64(s)) => assert_eq!(s, &[0, 0, 1, 1, 1, 2, 2, 2, 0, 1, 1]),
            _ => panic!("no hisr_segment"),
        }
        assert_close(
            &part(&a, "hisr_segment_importance")[..8],
            &[3.0, 3.0, 5.0, 5.0, 5.0, 3.0, 3.0, 3.0],
            1e-12,
        );
        let (sixth, five_twelfths) = (1.0 / 6.0, 5.0 / 12.0);
        assert_close(
            part(&a, "hisr_modulated"),
            &[
                sixth,
                sixth,
                five_twelfths,
                five_twelfths,
                five_twelfths,
                five_twelfths,
                five_twelfths,
                five_twelfths,
                0.25,
                0.75,
                0.75,
            ],
            1e-12,
        );
        assert_close(
            &part(&a, "hisr_reward")[..8],
            &[0.3, 0.416667, 0.3, 0.3, 0.591667, 0.3, 0.0, 0.591667],
            1e-6,
        );
        let returns = [
            2.8, 2.5, 2.083333, 1.783333, 1.483333, 0.891667, 0.591667, 0.591667,
        ];
        assert_close(&part(&a, "hisr_return")[..8], &returns, 1e-6);
        assert_close(&a.advantage()[..8], &returns, 1e-6);
        assert!(
            a.notes.iter().any(|n| n.contains("`rule` heuristic")),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn rule_segments_need_actions() {
        let b = batch(&[("g", "a", 0, "o", 1.0, true)]);
        let p = Params {
            segments: Segments::Rule,
            ..Params::paper()
        };
        match segmentation(&b, p.segments, &p.rl) {
            Err(Error::Param(m)) => assert!(m.contains("`action`"), "{m}"),
            other => panic!("expected a parameter error, got {other:?}"),
        }
    }
}
