//! verl's advantage registry (`algorithm.adv_estimator=…`) as verl 0.9.1 computes it:
//! verl-project/verl@1dda039 `verl/trainer/ppo/core_algos.py` (its advantage section is
//! byte-identical to the PyPI wheel `verl==0.9.1`). `grpo` and `rloo` are `grpo.rs` and `rloo.rs`.
//!
//! Per batch row b ([`super::verl_batch`]: a step row or a trajectory): score s_b, n_b response
//! tokens, group g with n_g batch rows; μ_g and σ_g the mean and sample std of the group's scores,
//! μ = 0 and σ = 1 for a group of one row; ε = 1e-6. `whiten` is `masked_whiten` over every
//! response token of the batch (an iteration): (x − m)/√(v + 1e-8), m = Σx/(N + 1e-8),
//! v = Σ(x − m)²/(N + 1e-8)·N/(N − 1).
//!
//! - `grpo_vectorized`: (s − μ_g)/(σ_g + ε), `grpo`'s numbers; the trainer never passes it
//!   `norm_adv_by_std_in_grpo`, so it always divides by σ.
//! - `grpo_passk` (arXiv 2503.19595): the group's best row (the first of equals) gets
//!   (r₁ − r₂)/(σ_g + ε), r₁ ≥ r₂ the two best scores (`norm = mean`, verl's
//!   `norm_adv_by_std_in_grpo=False`: r₁ − r₂); every other row 0. A group of one row is an error
//!   (verl raises). Over step rows the two best rows of a group are mostly steps of one
//!   trajectory, so r₁ = r₂ and every row gets 0: a note says in how many groups.
//! - `rloo_vectorized`: (n_g·s − Σ_g s)/(n_g − 1); a group of one row gets 0 (`rloo` keeps s).
//! - `opo` (arXiv 2505.23585): s − Σ_g n_b·s_b / Σ_g n_b, a length-weighted baseline; a group of
//!   one row keeps s.
//! - `gpg` (arXiv 2504.02546): α·(s − μ_g), α = |batch| / max(1, #{b : s_b ≠ 0}) over the
//!   iteration's batch rows, f_norm = 1 (the trainer passes neither).
//! - `reinforce_plus_plus` (arXiv 2501.03262): per response token G_t = γ^(response tokens after
//!   t)·s (the reward sits on the last token; since verl 0.9.0 the masked tokens between turns
//!   carry the return unchanged instead of being discounted), then whiten(G). γ = 1, verl's
//!   `AlgoConfig` default (credit's agentic methods keep 0.95).
//! - `reinforce_plus_plus_baseline`: whiten(s − μ_g), s − μ_g on each of the row's tokens.
//! - `gdpo` (arXiv 2601.05242): whiten(Σ_k w_k·grpo_k) over reward components k; the logs give one,
//!   the score: whiten(grpo). Like `grpo_vectorized` it always divides by σ.
//! - `remax` (arXiv 2310.10505): s − b_g, b_g the reward of the group's greedy rollout (the
//!   logged `reward_baseline`).
//! - `gae`: per response token δ_t = r_t + γ·V_next − V_t, A_t = δ_t + γλ·A_next (masked tokens
//!   skipped), then whiten(A); V the logged step `value` on each token of the step, γ = λ = 1.
//! - `optimal_token_baseline`, `tir_optimal_token_baseline`: refused, they need the actor's
//!   per-token probabilities (`old_log_probs`, `sum_pi_squared`).
//!
//! gpg, `reinforce_plus_plus`, `reinforce_plus_plus_baseline`, gdpo and gae take statistics over
//! the whole batch, an iteration. A step row's value under the token-level estimators
//! (`reinforce_plus_plus`, gae) is the one on its first response token; `<label>_last_token`
//! holds its last.
//!
//! Profiles: `verl` is verl-agent's layout (`stats_over = rows`, invalid-action penalty 0.1);
//! `paper` is verl's own multi-turn agent loop (`stats_over = trajectories`, no penalty). Both keep
//! verl's γ = λ = 1.

use super::group_stats::Norm;
use super::step_rl::row_name;
use super::verl_batch::{Tokens, VerlBatch, Whitening};
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::{Conventions, Profile, StatsOver};
use crate::schema::columns::{REWARD_BASELINE, VALUE};
use crate::schema::{describe_accepted, field};
use serde::{Deserialize, Serialize};

/// The estimators of verl's registry that `grpo.rs` and `rloo.rs` do not already compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimator {
    GrpoVectorized,
    GrpoPassk,
    RlooVectorized,
    Opo,
    Gpg,
    ReinforcePlusPlus,
    ReinforcePlusPlusBaseline,
    Gdpo,
    Remax,
    Gae,
}

/// Registry names credit knows and refuses ([`refusal`] says why).
pub const REFUSED: &[&str] = &["optimal_token_baseline", "tir_optimal_token_baseline"];

impl Estimator {
    pub const ALL: [Estimator; 10] = [
        Estimator::GrpoVectorized,
        Estimator::GrpoPassk,
        Estimator::RlooVectorized,
        Estimator::Opo,
        Estimator::Gpg,
        Estimator::ReinforcePlusPlus,
        Estimator::ReinforcePlusPlusBaseline,
        Estimator::Gdpo,
        Estimator::Remax,
        Estimator::Gae,
    ];

    /// verl's registry name, which is also the method's label.
    pub fn name(self) -> &'static str {
        match self {
            Estimator::GrpoVectorized => "grpo_vectorized",
            Estimator::GrpoPassk => "grpo_passk",
            Estimator::RlooVectorized => "rloo_vectorized",
            Estimator::Opo => "opo",
            Estimator::Gpg => "gpg",
            Estimator::ReinforcePlusPlus => "reinforce_plus_plus",
            Estimator::ReinforcePlusPlusBaseline => "reinforce_plus_plus_baseline",
            Estimator::Gdpo => "gdpo",
            Estimator::Remax => "remax",
            Estimator::Gae => "gae",
        }
    }

    pub fn from_name(name: &str) -> Option<Estimator> {
        Estimator::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether the estimator takes statistics over the whole batch (an iteration).
    pub fn batch_scoped(self) -> bool {
        matches!(
            self,
            Estimator::Gpg
                | Estimator::ReinforcePlusPlus
                | Estimator::ReinforcePlusPlusBaseline
                | Estimator::Gdpo
                | Estimator::Gae
        )
    }
}

/// Why a refused registry name cannot be computed from logs.
pub fn refusal(name: &str) -> Option<String> {
    REFUSED.contains(&name).then(|| {
        format!(
            "`{name}` is verl's optimal token baseline: it weighs each token by the actor's own probabilities (`old_log_probs`, `sum_pi_squared` from `actor.calculate_sum_pi_squared=True`), which rollout logs do not hold; credit does not compute it"
        )
    })
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    /// `stats_over` is the batch layout (`rows`: verl-agent's, `trajectories`: verl's agent loop);
    /// `gamma` is γ of `reinforce_plus_plus` and `gae`.
    #[serde(flatten)]
    pub conv: Conventions,
    /// `grpo_passk` only: `mean_std` divides by σ_g, `mean` does not (verl's
    /// `norm_adv_by_std_in_grpo`, the one estimator besides `grpo` the trainer passes it to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm: Option<Norm>,
    /// `gae` only: λ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambda: Option<f64>,
}

impl Params {
    pub fn preset(estimator: Estimator, profile: Profile) -> Self {
        Params {
            // verl's `AlgoConfig`: γ = 1, λ = 1.
            conv: Conventions {
                gamma: 1.0,
                ..Conventions::of(profile)
            },
            norm: (estimator == Estimator::GrpoPassk).then_some(Norm::MeanStd),
            lambda: (estimator == Estimator::Gae).then_some(1.0),
        }
    }

    pub fn check(&self, label: &str) -> Result<()> {
        match self.lambda {
            Some(l) if !(0.0..=1.0).contains(&l) => Err(Error::Param(format!(
                "`{label}.lambda` = {l} is out of range [0, 1]"
            ))),
            _ => Ok(()),
        }
    }
}

/// Columns `adv_<name>`, `<name>_score` (s of the row's batch row) and the estimator's parts.
pub fn advantages(batch: &StepBatch, estimator: Estimator, params: &Params) -> Result<Advantages> {
    let label = estimator.name();
    let vb = VerlBatch::new(batch, &params.conv);
    let (mean, std) = vb.group_mean_std(&vb.score, params.conv.std_ddof);
    let eps = params.conv.eps;
    let grpo = || vb.by_group(|g, s| (s - mean[g]) / (std[g] + eps));
    let centred = || vb.by_group(|g, s| s - mean[g]);
    let out = |per_unit: &[f64]| {
        Advantages::new(label, vb.per_row(per_unit)).part(
            label,
            "score",
            Values::F64(vb.per_row(&vb.score)),
        )
    };
    Ok(match estimator {
        Estimator::GrpoVectorized => out(&grpo())
            .part(label, "mean", Values::F64(vb.per_row_of_group(&mean)))
            .part(label, "std", Values::F64(vb.per_row_of_group(&std))),
        Estimator::GrpoPassk => {
            let norm = params.norm.unwrap_or(Norm::MeanStd);
            let (advantage, note) = pass_at_k(&vb, &std, norm, eps)?;
            let mut a = out(&advantage).part(label, "std", Values::F64(vb.per_row_of_group(&std)));
            a.notes.extend(note);
            a
        }
        Estimator::RlooVectorized => {
            let (advantage, baseline) = leave_one_out(&vb);
            out(&advantage).part(label, "baseline", Values::F64(vb.per_row(&baseline)))
        }
        Estimator::Opo => {
            let tokens = vb.tokens(label)?;
            let baseline = length_weighted_baseline(&vb, &tokens);
            let advantage: Vec<f64> = (0..vb.score.len())
                .map(|b| vb.score[b] - baseline[b])
                .collect();
            let n: Vec<i64> = tokens.per_unit.iter().map(|&n| n as i64).collect();
            out(&advantage)
                .part(label, "baseline", Values::F64(vb.per_row(&baseline)))
                .part(label, "tokens", Values::I64(vb.per_row(&n)))
        }
        Estimator::Gpg => {
            let alpha = gpg_alpha(&vb);
            let advantage: Vec<f64> = centred()
                .iter()
                .enumerate()
                .map(|(b, x)| alpha[b] * x)
                .collect();
            out(&advantage)
                .part(label, "mean", Values::F64(vb.per_row_of_group(&mean)))
                .part(label, "alpha", Values::F64(vb.per_row(&alpha)))
        }
        Estimator::ReinforcePlusPlusBaseline => {
            let tokens = vb.tokens(label)?;
            let advantage = whitened(&vb, &tokens, &centred(), label)?;
            out(&advantage).part(label, "mean", Values::F64(vb.per_row_of_group(&mean)))
        }
        Estimator::Gdpo => {
            let tokens = vb.tokens(label)?;
            let grpo = grpo();
            let advantage = whitened(&vb, &tokens, &grpo, label)?;
            out(&advantage).part(label, "grpo", Values::F64(vb.per_row(&grpo)))
        }
        Estimator::Remax => {
            let baseline = greedy_rewards(&vb)?;
            let advantage = vb.by_group(|g, s| s - baseline[g]);
            out(&advantage).part(
                label,
                "baseline",
                Values::F64(vb.per_row_of_group(&baseline)),
            )
        }
        Estimator::ReinforcePlusPlus | Estimator::Gae => {
            let tokens = vb.tokens(label)?;
            let values;
            let recursion = if estimator == Estimator::Gae {
                values = critic_values(batch)?;
                Recursion::Gae {
                    gamma: params.conv.gamma,
                    lambda: params.lambda.unwrap_or(1.0),
                    values: &values,
                }
            } else {
                Recursion::Returns {
                    gamma: params.conv.gamma,
                }
            };
            let (first, last) = token_advantages(&vb, &tokens, &recursion, label)?;
            Advantages::new(label, first)
                .part(label, "score", Values::F64(vb.per_row(&vb.score)))
                .part(label, "last_token", Values::F64(last))
        }
    })
}

/// Pass@k: the group's best batch row gets r₁ − r₂ (over σ_g + ε), every other row 0; the note
/// says in how many groups the two best rows are steps of one trajectory.
fn pass_at_k(
    vb: &VerlBatch,
    std: &[f64],
    norm: Norm,
    eps: f64,
) -> Result<(Vec<f64>, Option<String>)> {
    let mut advantage = vec![0.0; vb.score.len()];
    let mut same_trajectory = 0;
    for (g, &group_std) in std.iter().enumerate().take(vb.n_groups()) {
        let range = vb.group(g);
        if range.len() < 2 {
            return Err(Error::Param(format!(
                "grpo_passk: {} has one {}; verl's Pass@k needs at least two samples per group (`compute_grpo_passk_outcome_advantage` raises)",
                vb.group_name(g),
                vb.unit_name()
            )));
        }
        // The first of the best, then the best of the rest (torch.topk's two).
        let best = range.clone().fold(
            range.start,
            |i, b| if vb.score[b] > vb.score[i] { b } else { i },
        );
        let second = range
            .clone()
            .filter(|&b| b != best)
            .fold(None, |i: Option<usize>, b| match i {
                Some(i) if vb.score[i] >= vb.score[b] => Some(i),
                _ => Some(b),
            })
            .expect("a group of two or more rows has a second");
        let margin = vb.score[best] - vb.score[second];
        advantage[best] = match norm {
            Norm::MeanStd => margin / (group_std + eps),
            Norm::Mean => margin,
        };
        if vb.layout == StatsOver::Rows && vb.traj(best) == vb.traj(second) {
            same_trajectory += 1;
        }
    }
    let note = (same_trajectory > 0).then(|| {
        format!(
            "grpo_passk: in {same_trajectory} of {} groups the two best step rows are steps of one trajectory, so r₁ − r₂ = 0 there and every row of the group gets 0 (verl-agent's step layout); `--set grpo_passk.stats_over=trajectories` ranks whole trajectories, as verl's own agent loop does",
            vb.n_groups()
        )
    });
    Ok((advantage, note))
}

/// `rloo_vectorized`'s advantage s − b and its leave-one-out mean b = (Σ_g s − s)/(n_g − 1) per
/// batch row; both 0 in a group of one row.
fn leave_one_out(vb: &VerlBatch) -> (Vec<f64>, Vec<f64>) {
    let mut advantage = vec![0.0; vb.score.len()];
    let mut baseline = vec![0.0; vb.score.len()];
    for g in 0..vb.n_groups() {
        let range = vb.group(g);
        let n = range.len();
        if n > 1 {
            let sum: f64 = vb.score[range.clone()].iter().sum();
            for b in range {
                baseline[b] = (sum - vb.score[b]) / (n - 1) as f64;
                advantage[b] = vb.score[b] - baseline[b];
            }
        }
    }
    (advantage, baseline)
}

/// OPO's baseline Σ_g n_b·s_b / Σ_g n_b per batch row; 0 in a group of one row.
fn length_weighted_baseline(vb: &VerlBatch, tokens: &Tokens) -> Vec<f64> {
    let mut baseline = vec![0.0; vb.score.len()];
    for g in 0..vb.n_groups() {
        let range = vb.group(g);
        if range.len() > 1 {
            let n: f64 = range.clone().map(|b| tokens.per_unit[b] as f64).sum();
            let weighted: f64 = range
                .clone()
                .map(|b| tokens.per_unit[b] as f64 * vb.score[b])
                .sum();
            for b in range {
                baseline[b] = weighted / n;
            }
        }
    }
    baseline
}

/// GPG's α = |batch| / max(1, #{b : s_b ≠ 0}) of each batch row's iteration.
fn gpg_alpha(vb: &VerlBatch) -> Vec<f64> {
    let mut alpha = vec![0.0; vb.score.len()];
    for groups in vb.iterations() {
        let (n, nonzero) = vb.units_of(groups).fold((0usize, 0usize), |(n, nz), b| {
            (n + 1, nz + usize::from(vb.score[b] != 0.0))
        });
        let a = n as f64 / nonzero.max(1) as f64;
        for b in vb.units_of(groups) {
            alpha[b] = a;
        }
    }
    alpha
}

/// `values` (one per batch row, on each of its tokens) whitened over each iteration's tokens.
fn whitened(vb: &VerlBatch, tokens: &Tokens, values: &[f64], label: &str) -> Result<Vec<f64>> {
    let mut out = vec![0.0; values.len()];
    for groups in vb.iterations() {
        let w = Whitening::of(|emit| {
            for b in vb.units_of(groups) {
                emit(values[b], tokens.per_unit[b]);
            }
        })
        .ok_or_else(|| one_token(vb, groups, label))?;
        for b in vb.units_of(groups) {
            out[b] = w.apply(values[b]);
        }
    }
    Ok(out)
}

fn one_token(vb: &VerlBatch, groups: &[u32], label: &str) -> Error {
    Error::Param(format!(
        "{label}: {} has a single response token; verl's whitening (`masked_whiten`) needs at least two (it raises)",
        vb.iteration_name(groups)
    ))
}

/// The backward recursion a token-level estimator runs along a batch row's response tokens.
enum Recursion<'a> {
    /// REINFORCE++: G_t = r_t + γ·G_(t+1).
    Returns { gamma: f64 },
    /// GAE: A_t = r_t + γ·V_(t+1) − V_t + γλ·A_(t+1), V per step row.
    Gae {
        gamma: f64,
        lambda: f64,
        values: &'a [f64],
    },
}

impl Recursion<'_> {
    /// Visits batch row b's tokens last first in runs of one value, as `visit(row, k, count,
    /// value)`: the run's tokens are those with k … k + count − 1 of the row's tokens after
    /// them. The score is the last token's reward, every other token's is 0.
    fn run(
        &self,
        vb: &VerlBatch,
        tokens: &Tokens,
        b: usize,
        mut visit: impl FnMut(u32, u64, u64, f64),
    ) {
        let mut reward = vb.score[b];
        let (mut running, mut next_value) = (0.0, 0.0);
        for &row in vb.rows(b).iter().rev() {
            let n = tokens.per_row[row as usize];
            let mut k = 0;
            while k < n {
                let r = std::mem::take(&mut reward);
                let x = match *self {
                    Recursion::Returns { gamma } => r + gamma * running,
                    Recursion::Gae {
                        gamma,
                        lambda,
                        values,
                    } => {
                        let v = values[row as usize];
                        let a = r + gamma * next_value - v + gamma * lambda * running;
                        next_value = v;
                        a
                    }
                };
                // Past a row's last token the recursion is one map (no reward, V_next = the
                // row's own V): once a value repeats, every earlier token of the row has it, so a
                // response of any length costs no more than the map takes to settle.
                if k > 0 && x.to_bits() == running.to_bits() {
                    visit(row, k, n - k, x);
                    k = n;
                } else {
                    visit(row, k, 1, x);
                    running = x;
                    k += 1;
                }
            }
        }
    }
}

/// The whitened token values of each step row's first and last response token.
fn token_advantages(
    vb: &VerlBatch,
    tokens: &Tokens,
    recursion: &Recursion,
    label: &str,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = vb.batch.len();
    let (mut first, mut last) = (vec![0.0; n], vec![0.0; n]);
    for groups in vb.iterations() {
        let w = Whitening::of(|emit| {
            for b in vb.units_of(groups) {
                recursion.run(vb, tokens, b, |_, _, count, x| emit(x, count));
            }
        })
        .ok_or_else(|| one_token(vb, groups, label))?;
        for b in vb.units_of(groups) {
            recursion.run(vb, tokens, b, |row, k, count, x| {
                let row = row as usize;
                if k == 0 {
                    last[row] = w.apply(x);
                }
                if k + count == tokens.per_row[row] {
                    first[row] = w.apply(x);
                }
            });
        }
    }
    Ok((first, last))
}

/// ReMax's baseline per group: the logged `reward_baseline`, one value per group.
fn greedy_rewards(vb: &VerlBatch) -> Result<Vec<f64>> {
    let batch = vb.batch;
    let column = batch.opt_f64s(REWARD_BASELINE).ok_or_else(|| {
        let accepted = field(REWARD_BASELINE)
            .map_or_else(|| format!("`{REWARD_BASELINE}`"), describe_accepted);
        Error::Param(format!(
            "remax needs the reward of each group's greedy rollout (ReMax's baseline, verl's `reward_baselines`): log a {accepted} column"
        ))
    })?;
    (0..vb.n_groups())
        .map(|g| {
            let mut value: Option<(f64, u32)> = None;
            for r in batch.group_rows(g) {
                let Some(x) = column.get(r as usize) else {
                    continue;
                };
                match value {
                    None => value = Some((x, r)),
                    Some((first, at)) if first != x => {
                        return Err(Error::Param(format!(
                            "remax: {} has two greedy rewards: `reward_baseline` is {first} at {} and {x} at {} (one value per group)",
                            vb.group_name(g),
                            row_name(batch, at as usize),
                            row_name(batch, r as usize)
                        )))
                    }
                    Some(_) => {}
                }
            }
            value.map(|(x, _)| x).ok_or_else(|| {
                Error::Param(format!(
                    "remax: {} has no `reward_baseline` on any row (the greedy rollout's reward is needed per group)",
                    vb.group_name(g)
                ))
            })
        })
        .collect()
}

/// The logged critic value V of every step row.
fn critic_values(batch: &StepBatch) -> Result<Vec<f64>> {
    let column = batch.opt_f64s(VALUE).ok_or_else(|| {
        let accepted = field(VALUE).map_or_else(|| format!("`{VALUE}`"), describe_accepted);
        Error::Param(format!(
            "gae needs the critic's value of every step: log a {accepted} column (V(s_t), the same on every token of the step)"
        ))
    })?;
    (0..batch.len())
        .map(|r| {
            column.get(r).ok_or_else(|| {
                Error::Param(format!(
                    "gae: {} has no `value` (V is needed on every step)",
                    row_name(batch, r)
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch, batch_with_columns, Row};
    use crate::schema::columns::{ITERATION, N_TOKENS};
    use polars::prelude::Column;

    // Every expected number below is worked out by hand from the equations in the header
    // (verl@1dda039 core_algos.py); whitened values by masked_whiten's formula on the tokens
    // listed beside them.

    /// Group `g`: trajectory `a` (rewards 0, 1: R = 1) and `b` (one step, R = 0). In the step
    /// layout the scores of rows [a0, a1, b0] are [1, 1, 0]: μ = 2/3, σ = √(1/3) = 0.5773503.
    const TWO_TRAJ: &[Row] = &[
        ("g", "a", 0, "x", 0.0, true),
        ("g", "a", 1, "y", 1.0, true),
        ("g", "b", 0, "x", 0.0, true),
    ];

    fn params(estimator: Estimator, over: StatsOver) -> Params {
        let mut p = Params::preset(estimator, Profile::Verl);
        p.conv.stats_over = over;
        p.conv.invalid_penalty = 0.0;
        p
    }

    fn run(b: &StepBatch, estimator: Estimator, over: StatsOver) -> Advantages {
        advantages(b, estimator, &params(estimator, over)).unwrap()
    }

    fn with_tokens(rows: &[Row], n: &[i64]) -> StepBatch {
        batch_with_columns(rows, vec![Column::new(N_TOKENS.into(), n.to_vec())])
    }

    #[test]
    fn grpo_vectorized_is_grpo_with_singletons_at_mu_0_sigma_1() {
        let mut rows = TWO_TRAJ.to_vec();
        rows.push(("h", "c", 0, "x", 2.0, true));
        let a = run(&batch(&rows), Estimator::GrpoVectorized, StatsOver::Rows);
        // (1 − 2/3)/(√(1/3) + 1e-6), (0 − 2/3)/(√(1/3) + 1e-6); the group of one: 2/(1 + 1e-6).
        assert_close(
            a.advantage(),
            &[0.5773493, 0.5773493, -1.1546985, 2.0 / (1.0 + 1e-6)],
            1e-6,
        );
    }

    #[test]
    fn grpo_passk_over_step_rows_is_zero_and_says_why() {
        // The two best rows (1, 1) are a's two steps: r₁ − r₂ = 0 everywhere.
        let a = run(&batch(TWO_TRAJ), Estimator::GrpoPassk, StatsOver::Rows);
        assert_eq!(a.advantage(), &[0.0, 0.0, 0.0]);
        assert!(a.notes[0].contains("in 1 of 1 groups"), "{:?}", a.notes);
    }

    #[test]
    fn grpo_passk_over_trajectories_rewards_the_best_alone() {
        // Scores [1, 0]: σ = √(1/2); a's rows get 1/(0.7071068 + 1e-6), b's 0.
        let b = batch(TWO_TRAJ);
        let a = run(&b, Estimator::GrpoPassk, StatsOver::Trajectories);
        assert_close(a.advantage(), &[1.4142116, 1.4142116, 0.0], 1e-6);
        assert!(a.notes.is_empty());
        let mut p = params(Estimator::GrpoPassk, StatsOver::Trajectories);
        p.norm = Some(Norm::Mean);
        let a = advantages(&b, Estimator::GrpoPassk, &p).unwrap();
        assert_eq!(a.advantage(), &[1.0, 1.0, 0.0]);
    }

    #[test]
    fn grpo_passk_ties_at_the_top_give_zero_and_the_margin_is_to_the_second() {
        let b = batch(&[
            ("g", "a", 0, "x", 1.0, true),
            ("g", "b", 0, "x", 1.0, true),
            ("g", "c", 0, "x", 0.0, true),
            ("h", "d", 0, "x", 0.0, true),
            ("h", "e", 0, "x", 2.0, true),
            ("h", "f", 0, "x", 1.0, true),
        ]);
        // g: r₁ = r₂ = 1 → 0. h: [0, 2, 1], σ = 1: e gets (2 − 1)/(1 + 1e-6).
        let a = run(&b, Estimator::GrpoPassk, StatsOver::Trajectories);
        assert_close(
            a.advantage(),
            &[0.0, 0.0, 0.0, 0.0, 1.0 / (1.0 + 1e-6), 0.0],
            1e-12,
        );
    }

    #[test]
    fn grpo_passk_refuses_a_group_of_one_naming_it() {
        let mut rows = TWO_TRAJ.to_vec();
        rows.push(("lonely", "c", 0, "x", 2.0, true));
        let p = params(Estimator::GrpoPassk, StatsOver::Rows);
        let err = advantages(&batch(&rows), Estimator::GrpoPassk, &p).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("group `lonely` has one step row"),
            "{message}"
        );
    }

    #[test]
    fn rloo_vectorized_leaves_one_out_and_gives_a_singleton_zero() {
        let mut rows = TWO_TRAJ.to_vec();
        rows.push(("h", "c", 0, "x", 2.0, true));
        let a = run(&batch(&rows), Estimator::RlooVectorized, StatsOver::Rows);
        // [1, 1, 0]: (3·1 − 2)/2 = 0.5, 0.5, (0 − 2)/2 = −1; the group of one: 0 (`rloo`: 2).
        assert_eq!(a.advantage(), &[0.5, 0.5, -1.0, 0.0]);
    }

    #[test]
    fn opo_weighs_the_baseline_by_response_length() {
        // Tokens [3, 1, 2] on rows [a0, a1, b0]: step rows b = (3 + 1)/6 = 2/3; trajectories a
        // (4 tokens, s = 1) and b (2 tokens, s = 0) give the same 4/6. A group of one keeps s.
        let mut rows = TWO_TRAJ.to_vec();
        rows.push(("h", "c", 0, "x", 2.0, true));
        let b = with_tokens(&rows, &[3, 1, 2, 5]);
        for over in [StatsOver::Rows, StatsOver::Trajectories] {
            let a = run(&b, Estimator::Opo, over);
            assert_close(
                a.advantage(),
                &[1.0 / 3.0, 1.0 / 3.0, -2.0 / 3.0, 2.0],
                1e-12,
            );
        }
    }

    #[test]
    fn gpg_scales_by_the_share_of_nonzero_scores_per_iteration() {
        // Iteration 1: scores [1, 1, 0], α = 3/2: 1.5·(s − 2/3) = [0.5, 0.5, −1]. Iteration 2: one
        // group, scores [2, 0, 0, 0], μ = 0.5, α = 4/1: [6, −2, −2, −2].
        let rows: &[Row] = &[
            ("g", "a", 0, "x", 0.0, true),
            ("g", "a", 1, "y", 1.0, true),
            ("g", "b", 0, "x", 0.0, true),
            ("g", "c", 0, "x", 2.0, true),
            ("g", "d", 0, "x", 0.0, true),
            ("g", "e", 0, "x", 0.0, true),
            ("g", "f", 0, "x", 0.0, true),
        ];
        let b = batch_with_columns(
            rows,
            vec![Column::new(ITERATION.into(), [1i64, 1, 1, 2, 2, 2, 2])],
        );
        let a = run(&b, Estimator::Gpg, StatsOver::Rows);
        assert_close(
            a.advantage(),
            &[0.5, 0.5, -1.0, 6.0, -2.0, -2.0, -2.0],
            1e-12,
        );
    }

    #[test]
    fn all_zero_scores_give_zero_everywhere() {
        let b = batch(&[
            ("g", "a", 0, "x", 0.0, true),
            ("g", "a", 1, "y", 0.0, true),
            ("g", "b", 0, "x", 0.0, true),
        ]);
        // Every estimator that needs no logged signal: those `--methods verl` runs.
        for estimator in Estimator::ALL
            .into_iter()
            .filter(|e| crate::methods::VERL.contains(&e.name()))
        {
            for over in [StatsOver::Rows, StatsOver::Trajectories] {
                let a = run(&b, estimator, over);
                assert_eq!(a.advantage(), &[0.0; 3], "{} {over:?}", estimator.name());
            }
        }
    }

    #[test]
    fn reinforce_plus_plus_whitens_the_scores_over_step_rows() {
        // γ = 1, one token per row: whiten([1, 1, 0]) = [0.5773503, 0.5773503, −1.1547005].
        let a = run(
            &batch(TWO_TRAJ),
            Estimator::ReinforcePlusPlus,
            StatsOver::Rows,
        );
        assert_close(a.advantage(), &[0.5773503, 0.5773503, -1.1547005], 1e-6);
    }

    #[test]
    fn reinforce_plus_plus_discounts_over_the_response_tokens_of_a_trajectory() {
        // γ = 0.5, tokens [2, 1] on a's rows and 1 on b's. a's tokens G = [0.25, 0.5 | 1], b's
        // [0]: whiten([0.25, 0.5, 1, 0]) = [−0.4391550, 0.1463850, 1.3174651, −1.0246950]. A row
        // gets its first token's value; `_last_token` its last.
        let b = with_tokens(TWO_TRAJ, &[2, 1, 1]);
        let mut p = params(Estimator::ReinforcePlusPlus, StatsOver::Trajectories);
        p.conv.gamma = 0.5;
        let a = advantages(&b, Estimator::ReinforcePlusPlus, &p).unwrap();
        assert_close(a.advantage(), &[-0.4391550, 1.3174651, -1.0246950], 1e-6);
        let Some(Values::F64(last)) = a.column("reinforce_plus_plus_last_token") else {
            panic!("no last-token column")
        };
        assert_close(last, &[0.1463850, 1.3174651, -1.0246950], 1e-6);
    }

    #[test]
    fn a_response_of_a_trillion_tokens_is_whitened_in_runs() {
        // γ = 1: every token of a carries 1, of b 0, N = 2·10¹² tokens: m ≈ 1/2, v ≈ 1/4, so ±1.
        let rows: &[Row] = &[("g", "a", 0, "x", 1.0, true), ("g", "b", 0, "x", 0.0, true)];
        let b = with_tokens(rows, &[1_000_000_000_000, 1_000_000_000_000]);
        let a = run(&b, Estimator::ReinforcePlusPlus, StatsOver::Rows);
        assert_close(a.advantage(), &[1.0, -1.0], 1e-6);
    }

    #[test]
    fn reinforce_plus_plus_baseline_and_gdpo_weigh_rows_by_their_tokens() {
        // Tokens [1, 1, 4]. Baseline: s − μ = [1/3, 1/3, −2/3] on 1, 1 and 4 tokens, whitened:
        // [1.2909944, 1.2909944, −0.6454972]. GDPO: whiten(grpo) of [0.5773493, 0.5773493,
        // −1.1546985] on the same tokens: the same numbers (grpo is s − μ scaled).
        let b = with_tokens(TWO_TRAJ, &[1, 1, 4]);
        for estimator in [Estimator::ReinforcePlusPlusBaseline, Estimator::Gdpo] {
            let a = run(&b, estimator, StatsOver::Rows);
            assert_close(a.advantage(), &[1.2909944, 1.2909944, -0.6454972], 1e-6);
        }
    }

    #[test]
    fn whitening_one_token_is_an_error_naming_the_iteration() {
        let b = batch(&[("g", "a", 0, "x", 1.0, true)]);
        let p = params(Estimator::ReinforcePlusPlus, StatsOver::Rows);
        let message = advantages(&b, Estimator::ReinforcePlusPlus, &p)
            .unwrap_err()
            .to_string();
        assert!(message.contains("a single response token"), "{message}");
    }

    #[test]
    fn remax_subtracts_the_group_s_greedy_reward() {
        let rows: &[Row] = &[
            ("g", "a", 0, "x", 0.0, true),
            ("g", "a", 1, "y", 1.0, true),
            ("g", "b", 0, "x", 0.0, true),
            ("h", "c", 0, "x", 2.0, true),
        ];
        // g's greedy rollout scored 0.5 (logged on a1 only), h's 3: [0.5, 0.5, −0.5, −1].
        let baseline = vec![None, Some(0.5), None, Some(3.0)];
        let b = batch_with_columns(
            rows,
            vec![Column::new(REWARD_BASELINE.into(), baseline.clone())],
        );
        let a = run(&b, Estimator::Remax, StatsOver::Rows);
        assert_eq!(a.advantage(), &[0.5, 0.5, -0.5, -1.0]);
        let missing = advantages(
            &batch(rows),
            Estimator::Remax,
            &params(Estimator::Remax, StatsOver::Rows),
        )
        .unwrap_err()
        .to_string();
        assert!(missing.contains("`reward_baseline`"), "{missing}");
        let mut two = baseline;
        two[0] = Some(0.25);
        let b = batch_with_columns(rows, vec![Column::new(REWARD_BASELINE.into(), two)]);
        let message = advantages(
            &b,
            Estimator::Remax,
            &params(Estimator::Remax, StatsOver::Rows),
        )
        .unwrap_err()
        .to_string();
        assert!(
            message.contains("group `g` has two greedy rewards"),
            "{message}"
        );
    }

    #[test]
    fn gae_per_step_row_and_per_trajectory() {
        // V = [0.2, 0.6, 0.1]. γ = λ = 1: A = s − V = [0.8, 0.4, −0.1] in both layouts, whitened
        // [0.9609876, 0.0739221, −1.0349098].
        let b = batch_with_columns(TWO_TRAJ, vec![Column::new(VALUE.into(), [0.2, 0.6, 0.1])]);
        for over in [StatsOver::Rows, StatsOver::Trajectories] {
            let a = run(&b, Estimator::Gae, over);
            assert_close(a.advantage(), &[0.9609876, 0.0739221, -1.0349098], 1e-6);
        }
        // γ = 0.5 over a's turns: a1 δ = 1 − 0.6 = 0.4; a0 δ = 0.5·0.6 − 0.2 = 0.1, A = 0.1 +
        // 0.5·0.4 = 0.3; b −0.1: whiten([0.3, 0.4, −0.1]) = [0.3779644, 0.7559289, −1.1338934].
        let mut p = params(Estimator::Gae, StatsOver::Trajectories);
        p.conv.gamma = 0.5;
        let a = advantages(&b, Estimator::Gae, &p).unwrap();
        assert_close(a.advantage(), &[0.3779644, 0.7559289, -1.1338934], 1e-6);
        let message = advantages(&batch(TWO_TRAJ), Estimator::Gae, &p)
            .unwrap_err()
            .to_string();
        assert!(message.contains("`value`"), "{message}");
    }

    #[test]
    fn gae_counts_every_token_of_a_step() {
        // One row of 3 tokens (V = 0.5, s = 1) and one of 1 token (V = 0, s = 0), γ = λ = 1:
        // A = s − V on every token: [0.5, 0.5, 0.5 | 0], whitened: m = 0.375,
        // v = (3·0.125² + 0.375²)/4·4/3 = 0.0625, so 0.125/0.25 = 0.5 and −0.375/0.25 = −1.5.
        let rows: &[Row] = &[("g", "a", 0, "x", 1.0, true), ("g", "b", 0, "x", 0.0, true)];
        let b = batch_with_columns(
            rows,
            vec![
                Column::new(VALUE.into(), [0.5, 0.0]),
                Column::new(N_TOKENS.into(), [3i64, 1]),
            ],
        );
        let a = run(&b, Estimator::Gae, StatsOver::Rows);
        assert_close(a.advantage(), &[0.5, -1.5], 1e-6);
    }

    #[test]
    fn the_penalty_lowers_an_invalid_step_row_s_score() {
        // verl-agent's layout with c = 0.1: a1 invalid → scores [1, 0.9, 0]; RLOO vectorized:
        // (3·1 − 1.9)/2 = 0.55, (3·0.9 − 1.9)/2 = 0.4, (0 − 1.9)/2 = −0.95.
        let mut rows = TWO_TRAJ.to_vec();
        rows[1].5 = false;
        let p = Params::preset(Estimator::RlooVectorized, Profile::Verl);
        let a = advantages(&batch(&rows), Estimator::RlooVectorized, &p).unwrap();
        assert_close(a.advantage(), &[0.55, 0.4, -0.95], 1e-12);
    }

    #[test]
    fn refused_and_batch_scoped_names() {
        assert!(refusal("optimal_token_baseline")
            .unwrap()
            .contains("sum_pi_squared"));
        assert!(refusal("grpo").is_none());
        let scoped: Vec<&str> = Estimator::ALL
            .into_iter()
            .filter(|e| e.batch_scoped())
            .map(Estimator::name)
            .collect();
        assert_eq!(
            scoped,
            [
                "gpg",
                "reinforce_plus_plus",
                "reinforce_plus_plus_baseline",
                "gdpo",
                "gae"
            ]
        );
    }
}
