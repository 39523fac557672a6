//! SPA: stepwise progress attribution (Wang et al. 2025, arXiv 2505.20732, Eq. 5–10, App. A;
//! `spec-spa-hisr.md` Part A), from logged signals: the progress estimator's per-step
//! contributions ĉ_t are read from the `progress` column, not trained here.
//!
//! r_t = α·ĉ_t + β·g_t                                                          (Eq. 8–9, A5)
//! - ĉ_t (Eq. 5–7): the estimator's contribution of step t, trained so that Σ_t ĉ_t ≈ R;
//!   Φ_t = Σ_{k≤t} ĉ_k is its cumulative progress (App. A: ĉ_t = Φ(e_t) − Φ(e_{t−1})).
//! - g_t (Eq. 9): 1 if a_t executed in the environment: `valid` (`grounding = valid`), or the
//!   released code's rule (`feedback`): 0 when the feedback after the action (`feedback`, else
//!   `next_obs`) contains `grounding_pattern` ("Nothing happens"); the last step is always 1.
//! - G_t = Σ_{k≥t} γ^{k−t} r_k (Eq. 10's return).
//! - A_t = Σ_k (γλ)^k δ_{t+k}, δ_t = r_t + γ·V_{t+1} − V_t, V after the last step 0 (GAE, A5), with
//!   V from the logged `value` column; without one the advantage is critic-free: V ≡ 0, so
//!   A_t = Σ_k (γλ)^k r_{t+k}. `whiten`: A ← (A − μ)/√(σ² + 1e-8) over each iteration's rows
//!   (the whole input without an `iteration` column), σ² unbiased, as trl's `masked_whiten`.
//! - Variants of ĉ_t (`variant`): `paper` the logged `progress`; `mean` R/n and `random` U[0, 1)
//!   (§5.1's baselines, A7; `random` draws from `seed` and the step's iteration, trajectory id and
//!   position, so a seed reproduces it whatever the row order); `repo` R − the mean R of the
//!   group's other rollouts (R alone without others), which the released `prm/rl_data_org.py`
//!   writes over every turn value (the RLOO advantage, [`super::rloo`]).
//!   Ablations: β = 0 "w/o grounding", α = 0 "w/o stepwise progress".
//! - `steptool_position_weight`: StepTool's `compute_rewards` adds step k (0-based, n steps) as
//!   r_k·(n−1−k), so the last step's reward is dropped (A5; off in the paper).
//!
//! Profiles (reference: SPA-RL-Agent `prm/rl_data_org.py` and `ppo/step_ppotrainer.py`, from
//! StepTool, on trl 0.10.1):
//! - `paper`: variant `paper`, g_t from `valid`, α = 1, β = 0.5, γ = 0.99, λ = 0.95, no position
//!   weight, no whitening.
//! - `verl`: what the released code feeds PPO, per step: variant `repo`, `feedback` grounding,
//!   the StepTool position weight, whitening; α, β, γ, λ as in `paper`. Not reproduced: the code's
//!   GAE runs per token with a per-token KL term (0 at the start, when the LoRA adapters are zero)
//!   and whitens over the PPO batch, not the iteration.

use super::step_rl::{row_name, Grounding, StepRl};
use super::{rloo, uniform, Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::Profile;
use crate::schema::columns::PROGRESS;
use crate::schema::{describe_accepted, field};
use serde::{Deserialize, Serialize};

/// Where ĉ_t comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// The logged `progress` column (the paper).
    Paper,
    /// R − mean R of the group's other rollouts on every step (the released code).
    Repo,
    /// R/n on every step (the paper's `mean` baseline).
    Mean,
    /// U[0, 1) per step, seeded (the paper's `random` baseline).
    Random,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    /// `paper` (ĉ_t from `progress`), `repo` (the released code's leave-one-out outcome), `mean`
    /// (R/n), `random` (U[0, 1)).
    pub variant: Variant,
    /// α, the weight of ĉ_t.
    pub alpha: f64,
    /// β, the weight of g_t.
    pub beta: f64,
    /// StepTool's position weight: step k of n scores r_k·(n−1−k).
    pub steptool_position_weight: bool,
    /// Seed of the `random` variant (also `--seed`).
    pub seed: u64,
    #[serde(flatten)]
    pub rl: StepRl,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            variant: Variant::Paper,
            alpha: 1.0,
            beta: 0.5,
            steptool_position_weight: false,
            seed: 0,
            rl: StepRl::paper(),
        }
    }

    pub fn verl() -> Self {
        Params {
            variant: Variant::Repo,
            steptool_position_weight: true,
            rl: StepRl {
                grounding: Grounding::Feedback,
                whiten: true,
                ..StepRl::paper()
            },
            ..Self::paper()
        }
    }

    pub fn preset(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Self::paper(),
            Profile::Verl => Self::verl(),
        }
    }

    pub fn check(&self) -> Result<()> {
        self.rl.check("spa")
    }
}

/// Φ_t = Σ_{k≤t} ĉ_k along each trajectory (App. A's cumulative progress).
pub fn potential(batch: &StepBatch, progress: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; progress.len()];
    for traj in &batch.trajs {
        let mut run = 0.0;
        for &r in &traj.rows {
            run += progress[r as usize];
            out[r as usize] = run;
        }
    }
    out
}

/// Grounding accuracy (§4.1, A6): the share of grounded steps of each trajectory averaged over
/// trajectories (macro), and the share over all steps (micro).
pub fn grounding_accuracy(batch: &StepBatch, grounding: &[f64]) -> (f64, f64) {
    let per_traj: f64 = batch
        .trajs
        .iter()
        .map(|t| t.rows.iter().map(|&r| grounding[r as usize]).sum::<f64>() / t.rows.len() as f64)
        .sum();
    let macro_share = per_traj / batch.trajs.len().max(1) as f64;
    let micro_share = grounding.iter().sum::<f64>() / grounding.len().max(1) as f64;
    (macro_share, micro_share)
}

/// ĉ_t per row for the variant.
fn contributions(batch: &StepBatch, params: &Params) -> Result<Vec<f64>> {
    match params.variant {
        Variant::Paper => {
            let column = batch.opt_f64s(PROGRESS).ok_or_else(|| {
                let accepted = field(PROGRESS).map_or_else(|| format!("`{PROGRESS}`"), describe_accepted);
                Error::Param(format!(
                    "spa needs the per-step progress ĉ_t: log a {accepted} column, or use `--set spa.variant=mean` (R/n), `--set spa.variant=random` (U[0, 1)) or `--set spa.variant=repo` (the released code's leave-one-out outcome)"
                ))
            })?;
            (0..batch.len())
                .map(|r| {
                    column.get(r).ok_or_else(|| {
                        Error::Param(format!(
                            "spa: {} has no `progress` (ĉ_t is needed on every step)",
                            row_name(batch, r)
                        ))
                    })
                })
                .collect()
        }
        Variant::Mean => Ok(batch
            .traj_of_row
            .iter()
            .map(|&t| {
                let traj = &batch.trajs[t as usize];
                traj.episode_return / traj.rows.len() as f64
            })
            .collect()),
        Variant::Repo => Ok(rloo::advantages(batch, &rloo::Params::paper())?
            .advantage()
            .to_vec()),
        Variant::Random => Ok((0..batch.len())
            .map(|r| {
                let traj = &batch.trajs[batch.traj_of_row[r] as usize];
                let iteration = batch.groups[traj.group as usize].iteration;
                // The method's name in the key keeps these draws apart from MGR's gate under one seed.
                let key = format!("spa/{iteration:?}/{}", traj.id);
                uniform(params.seed, &key, u64::from(batch.position[r]))
            })
            .collect()),
    }
}

/// Columns `adv_spa`, `spa_progress` (ĉ_t), `spa_potential` (Φ_t), `spa_grounding` (g_t),
/// `spa_reward` (r_t, position-weighted if asked), `spa_return` (G_t).
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let progress = contributions(batch, params)?;
    let grounding = params.rl.grounding(batch);
    let mut reward: Vec<f64> = progress
        .iter()
        .zip(&grounding)
        .map(|(c, g)| params.alpha * c + params.beta * g)
        .collect();
    if params.steptool_position_weight {
        for traj in &batch.trajs {
            let n = traj.rows.len();
            for (k, &r) in traj.rows.iter().enumerate() {
                reward[r as usize] *= (n - 1 - k) as f64;
            }
        }
    }
    let (returns, advantage, critic_free) =
        params.rl.returns_and_advantages(batch, &reward, "spa")?;
    let (macro_share, micro_share) = grounding_accuracy(batch, &grounding);
    let mut out = Advantages::new("spa", advantage)
        .part("spa", "progress", Values::F64(progress.clone()))
        .part("spa", "potential", Values::F64(potential(batch, &progress)))
        .part("spa", "grounding", Values::F64(grounding))
        .part("spa", "reward", Values::F64(reward))
        .part("spa", "return", Values::F64(returns));
    out.notes.extend(critic_free);
    if params.variant == Variant::Repo && batch.has(PROGRESS) {
        out.notes.push(
            "spa: variant `repo` (the released code) puts the leave-one-out outcome on every step; the logged `progress` is not used (`--set spa.variant=paper` uses it)".into(),
        );
    }
    out.notes.push(format!(
        "spa: grounding accuracy {:.2}% (macro over trajectories; {:.2}% of all steps)",
        100.0 * macro_share,
        100.0 * micro_share
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch, batch_with_columns, Row};
    use crate::methods::part;
    use crate::methods::step_rl::gae;
    use crate::schema::columns::{STEP, VALUE};
    use polars::prelude::Column;
    use std::collections::BTreeSet;

    /// T-SPA-1's trajectory: n = 4, R = 1, c = [0.05, 0.20, −0.10, 0.80], g = [1, 1, 0, 1], and
    /// V = [0.9, 1.1, 1.0, 0.7] when `with_value`.
    fn t_spa_1(with_value: bool) -> StepBatch {
        let rows: [Row; 4] = [
            ("g", "a", 1, "o1", 0.0, true),
            ("g", "a", 2, "o2", 0.0, true),
            ("g", "a", 3, "o3", 0.0, false),
            ("g", "a", 4, "o4", 1.0, true),
        ];
        let mut extra = vec![Column::new(PROGRESS.into(), [0.05, 0.20, -0.10, 0.80])];
        if with_value {
            extra.push(Column::new(VALUE.into(), [0.9, 1.1, 1.0, 0.7]));
        }
        batch_with_columns(&rows, extra)
    }

    // spec-spa-hisr.md A9, T-SPA-1: Φ, r, G (γ = 0.99), GAE with V (γ = 0.99, λ = 0.95).
    #[test]
    fn vector_a9_t_spa_1_fused_reward_returns_gae() {
        let a = advantages(&t_spa_1(true), &Params::paper()).unwrap();
        assert_close(part(&a, "spa_potential"), &[0.05, 0.25, 0.15, 0.95], 1e-4);
        assert_close(part(&a, "spa_reward"), &[0.55, 0.70, -0.10, 1.30], 1e-4);
        assert_close(
            part(&a, "spa_return"),
            &[2.4064, 1.8751, 1.1870, 1.3000],
            1e-4,
        );
        assert_close(a.advantage(), &[1.4330, 0.7379, 0.1573, 0.6000], 1e-4);
        assert!(
            a.notes.iter().all(|n| !n.contains("critic-free")),
            "{:?}",
            a.notes
        );
    }

    // A9, T-SPA-1: δ = [0.7390, 0.5900, −0.4070, 0.6000] (GAE with λ = 0 is δ).
    #[test]
    fn vector_a9_t_spa_1_td_errors() {
        let b = t_spa_1(true);
        let delta = gae(
            &b,
            &[0.55, 0.70, -0.10, 1.30],
            &[0.9, 1.1, 1.0, 0.7],
            0.99,
            0.0,
        );
        assert_close(&delta, &[0.7390, 0.5900, -0.4070, 0.6000], 1e-4);
    }

    // A9, T-SPA-1: G with γ = 1 = [2.45, 1.9, 1.2, 1.3].
    #[test]
    fn vector_a9_t_spa_1_returns_gamma_1() {
        let p = Params {
            rl: StepRl {
                gamma: 1.0,
                ..StepRl::paper()
            },
            ..Params::paper()
        };
        let a = advantages(&t_spa_1(true), &p).unwrap();
        assert_close(part(&a, "spa_return"), &[2.45, 1.9, 1.2, 1.3], 1e-4);
    }

    // A9, T-SPA-1: whitened A (mean, unbiased std over the 4 steps, +1e-8 under the root).
    #[test]
    fn vector_a9_t_spa_1_whitened() {
        let p = Params {
            rl: StepRl {
                whiten: true,
                ..StepRl::paper()
            },
            ..Params::paper()
        };
        let a = advantages(&t_spa_1(true), &p).unwrap();
        assert_close(a.advantage(), &[1.3253, 0.0111, -1.0867, -0.2497], 1e-4);
    }

    // A9, T-SPA-1: critic-free (V ≡ 0) A = [2.2014, 1.7559, 1.12265, 1.3000], with no `value`
    // column and with `use_value = false`.
    #[test]
    fn vector_a9_t_spa_1_critic_free() {
        let expected = [2.2014, 1.7559, 1.12265, 1.3000];
        let a = advantages(&t_spa_1(false), &Params::paper()).unwrap();
        assert_close(a.advantage(), &expected, 1e-4);
        assert_eq!(
            a.notes.iter().filter(|n| n.contains("critic-free")).count(),
            1
        );
        let p = Params {
            rl: StepRl {
                use_value: false,
                ..StepRl::paper()
            },
            ..Params::paper()
        };
        assert_close(
            advantages(&t_spa_1(true), &p).unwrap().advantage(),
            &expected,
            1e-4,
        );
    }

    // A9, T-SPA-2: α = 1, β = 0 gives r = c; α = 0, β = 0.5 gives [0.5, 0.5, 0, 0.5]; the `mean`
    // variant gives ĉ = R/n = [0.25; 4].
    #[test]
    fn vector_a9_t_spa_2_ablations() {
        let b = t_spa_1(true);
        let no_grounding = advantages(
            &b,
            &Params {
                beta: 0.0,
                ..Params::paper()
            },
        )
        .unwrap();
        assert_close(
            part(&no_grounding, "spa_reward"),
            &[0.05, 0.20, -0.10, 0.80],
            1e-4,
        );
        let no_progress = advantages(
            &b,
            &Params {
                alpha: 0.0,
                ..Params::paper()
            },
        )
        .unwrap();
        assert_close(
            part(&no_progress, "spa_reward"),
            &[0.5, 0.5, 0.0, 0.5],
            1e-4,
        );
        let mean = advantages(
            &b,
            &Params {
                variant: Variant::Mean,
                ..Params::paper()
            },
        )
        .unwrap();
        assert_close(part(&mean, "spa_progress"), &[0.25; 4], 1e-4);
    }

    /// T-SPA-3's group: rollouts with R = [1, 0, 1, 1]; rollout 1 has 4 steps, and the observation
    /// after its third step says "Nothing happens." (grounding [0.5, 0.5, 0.0, 0.5]).
    fn t_spa_3() -> StepBatch {
        batch(&[
            ("g", "1", 0, "You are in the middle of a room.", 0.0, true),
            ("g", "1", 1, "You arrive at countertop 1.", 0.0, true),
            ("g", "1", 2, "You pick up the apple 1.", 0.0, true),
            ("g", "1", 3, "Nothing happens.", 1.0, true),
            ("g", "2", 0, "You are in the middle of a room.", 0.0, true),
            ("g", "3", 0, "You are in the middle of a room.", 1.0, true),
            ("g", "4", 0, "You are in the middle of a room.", 1.0, true),
        ])
    }

    // A9, T-SPA-3 (`verl`: the released code): leave-one-out values [0.3333, −1, 0.3333, 0.3333],
    // rollout 1's scores [0.8333, 0.8333, 0.3333, 0.8333], with the StepTool position weight
    // [2.5, 1.6667, 0.3333, 0.0].
    #[test]
    fn vector_a9_t_spa_3_repo_variant_verl() {
        let b = t_spa_3();
        let unweighted = advantages(
            &b,
            &Params {
                steptool_position_weight: false,
                ..Params::verl()
            },
        )
        .unwrap();
        let progress = part(&unweighted, "spa_progress");
        assert_close(
            &[progress[0], progress[4], progress[5], progress[6]],
            &[0.3333, -1.0, 0.3333, 0.3333],
            1e-4,
        );
        assert_close(
            &part(&unweighted, "spa_reward")[..4],
            &[0.8333, 0.8333, 0.3333, 0.8333],
            1e-4,
        );
        let weighted = advantages(&b, &Params::verl()).unwrap();
        assert_close(
            &part(&weighted, "spa_reward")[..4],
            &[2.5, 1.6667, 0.3333, 0.0],
            1e-4,
        );
        // The `paper` profile needs the logged `progress` this group lacks.
        match advantages(&b, &Params::paper()) {
            Err(Error::Param(m)) => {
                assert!(m.contains("`progress`") && m.contains("spa.variant"), "{m}")
            }
            other => panic!("expected a parameter error, got {other:?}"),
        }
    }

    // A9, T-SPA-4: g = [1,1,0,1], [1,0,0], [1,1,1,1,1] → per trajectory [0.75, 0.3333, 1.0],
    // macro 0.6944, micro 0.75.
    #[test]
    fn vector_a9_t_spa_4_grounding_accuracy() {
        let valid = [
            true, true, false, true, true, false, false, true, true, true, true, true,
        ];
        let trajs = ["a", "a", "a", "a", "b", "b", "b", "c", "c", "c", "c", "c"];
        let rows: Vec<Row> = trajs
            .iter()
            .zip(valid)
            .enumerate()
            .map(|(i, (&t, v))| ("g", t, i as i64, "o", 0.0, v))
            .collect();
        let b = batch(&rows);
        let g = StepRl::paper().grounding(&b);
        let (macro_share, micro_share) = grounding_accuracy(&b, &g);
        assert!((macro_share - 0.6944).abs() < 1e-4, "{macro_share}");
        assert!((micro_share - 0.75).abs() < 1e-4, "{micro_share}");
    }

    // Part C property: γ = 1, β = 0 ⇒ G_1 = Σ ĉ = 0.95 (App. A: G_t = R̂ − Φ_{t−1}).
    #[test]
    fn property_c_gamma_1_beta_0_first_return_is_sum_of_progress() {
        let p = Params {
            beta: 0.0,
            rl: StepRl {
                gamma: 1.0,
                ..StepRl::paper()
            },
            ..Params::paper()
        };
        let a = advantages(&t_spa_1(true), &p).unwrap();
        let (g, phi) = (part(&a, "spa_return"), part(&a, "spa_potential"));
        assert!((g[0] - 0.95).abs() < 1e-12);
        for t in 1..4 {
            assert!((g[t] - (0.95 - phi[t - 1])).abs() < 1e-12);
        }
    }

    /// Two trajectories of a group, "a" (3 steps, the second not valid) and "b" (2 steps), with
    /// their rows in the given order of (traj, step).
    fn two_trajectories(order: &[(&'static str, i64)]) -> StepBatch {
        let rows: Vec<Row> = order
            .iter()
            .map(|&(t, step)| ("g", t, step, "o", 0.0, !(t == "a" && step == 1)))
            .collect();
        batch(&rows)
    }

    /// (traj id, step, ĉ_t, r_t) per row of a `random`-variant run, sorted by (traj id, step).
    fn random_run(b: &StepBatch, p: &Params) -> Vec<(String, i64, f64, f64)> {
        let a = advantages(b, p).unwrap();
        let (c, r) = (part(&a, "spa_progress"), part(&a, "spa_reward"));
        let steps = b.opt_i64s(STEP).unwrap();
        let mut out: Vec<_> = (0..b.len())
            .map(|row| {
                let traj = &b.trajs[b.traj_of_row[row] as usize].id;
                (traj.to_string(), steps.get(row).unwrap(), c[row], r[row])
            })
            .collect();
        out.sort_by(|x, y| (&x.0, x.1).cmp(&(&y.0, y.1)));
        out
    }

    // A7's `random` baseline: ĉ_t ~ U[0, 1), reproducible for a seed, another seed draws anew,
    // the row order does not matter, and r_t = α·ĉ_t + β·g_t as for the logged progress.
    #[test]
    fn random_variant_is_seeded_uniform_and_row_order_free() {
        let in_order = two_trajectories(&[("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]);
        let shuffled = two_trajectories(&[("b", 1), ("a", 2), ("b", 0), ("a", 0), ("a", 1)]);
        let p = |seed| Params {
            variant: Variant::Random,
            seed,
            ..Params::paper()
        };
        let run = random_run(&in_order, &p(7));
        for (_, _, c, _) in &run {
            assert!((0.0..1.0).contains(c), "{c}");
        }
        let distinct: BTreeSet<u64> = run.iter().map(|x| x.2.to_bits()).collect();
        assert_eq!(distinct.len(), run.len(), "{run:?}");
        assert_eq!(random_run(&in_order, &p(7)), run);
        assert_eq!(random_run(&shuffled, &p(7)), run);
        let other = random_run(&in_order, &p(8));
        assert!(run.iter().zip(&other).all(|(x, y)| x.2 != y.2), "{other:?}");
        // g = 1 but on a's step 1 (`valid` false); α = 1, β = 0.5.
        for (traj, step, c, r) in &run {
            let g = if traj == "a" && *step == 1 { 0.0 } else { 1.0 };
            assert!(
                (r - (c + 0.5 * g)).abs() < 1e-12,
                "{traj} {step}: {r} vs {c}"
            );
        }
        let weighted = random_run(
            &in_order,
            &Params {
                alpha: 2.0,
                beta: 0.25,
                ..p(7)
            },
        );
        for ((traj, step, c, r), x) in weighted.iter().zip(&run) {
            let g = if traj == "a" && *step == 1 { 0.0 } else { 1.0 };
            assert_eq!(*c, x.2);
            assert!(
                (r - (2.0 * c + 0.25 * g)).abs() < 1e-12,
                "{traj} {step}: {r}"
            );
        }
    }

    #[test]
    fn feedback_grounding_reads_the_logged_feedback() {
        let b = t_spa_3();
        let p = StepRl {
            grounding: Grounding::Feedback,
            grounding_pattern: "countertop".into(),
            ..StepRl::paper()
        };
        assert_eq!(&p.grounding(&b)[..4], &[0.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn missing_progress_and_value_are_parameter_errors() {
        let b = batch_with_columns(
            &[("g", "a", 0, "o", 0.0, true), ("g", "a", 1, "o", 1.0, true)],
            vec![
                Column::new(PROGRESS.into(), [Some(0.5), None]),
                Column::new(VALUE.into(), [Some(0.1), None]),
            ],
        );
        match advantages(&b, &Params::paper()) {
            Err(Error::Param(m)) => assert!(
                m.contains("trajectory `a` step 1") && m.contains("`progress`"),
                "{m}"
            ),
            other => panic!("expected a parameter error, got {other:?}"),
        }
        match advantages(
            &b,
            &Params {
                variant: Variant::Mean,
                ..Params::paper()
            },
        ) {
            Err(Error::Param(m)) => assert!(
                m.contains("`value`") && m.contains("spa.use_value=false"),
                "{m}"
            ),
            other => panic!("expected a parameter error, got {other:?}"),
        }
    }
}
