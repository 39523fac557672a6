//! The step-level RL that SPA and HISR share (spec-spa-hisr A5, B7): grounding g_t from `valid`
//! or from the feedback after the action, discounted returns, GAE against the logged `value` (or
//! critic-free), and per-iteration whitening as trl's `masked_whiten`.

use super::group_stats::mean_std;
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::schema::columns::{FEEDBACK, NEXT_OBS, STEP, VALUE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How g_t is read from the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grounding {
    /// The `valid` column (default true).
    Valid,
    /// 0 when the feedback after the action contains `grounding_pattern`; the last step 1.
    Feedback,
}

/// Grounding, discounting and advantage estimation: the step-level RL that SPA and HISR share
/// (A5, B7). Field names are the `--set` names of both methods.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRl {
    pub grounding: Grounding,
    /// The text that marks an action as not executed (`grounding = feedback`).
    pub grounding_pattern: String,
    /// γ.
    pub gamma: f64,
    /// λ of GAE.
    pub lambda: f64,
    /// GAE against the logged `value` column when there is one; `false`: critic-free (V ≡ 0).
    pub use_value: bool,
    /// Whiten the advantages per iteration.
    pub whiten: bool,
}

impl StepRl {
    /// The paper's step-level PPO: grounding from `valid`, γ = 0.99, λ = 0.95, no whitening.
    pub fn paper() -> Self {
        StepRl {
            grounding: Grounding::Valid,
            grounding_pattern: "Nothing happens".into(),
            gamma: 0.99,
            lambda: 0.95,
            use_value: true,
            whiten: false,
        }
    }

    pub fn check(&self, label: &str) -> Result<()> {
        if !(0.0..=1.0).contains(&self.lambda) {
            return Err(Error::Param(format!(
                "{label}.lambda = {} is out of range [0, 1]",
                self.lambda
            )));
        }
        if self.grounding_pattern.is_empty() {
            return Err(Error::Param(format!(
                "{label}.grounding_pattern must not be empty"
            )));
        }
        Ok(())
    }

    /// g_t per row: 1 (grounded) or 0.
    pub fn grounding(&self, batch: &StepBatch) -> Vec<f64> {
        match self.grounding {
            Grounding::Valid => batch
                .valid()
                .into_iter()
                .map(|v| if v { 1.0 } else { 0.0 })
                .collect(),
            Grounding::Feedback => {
                let failed = self.feedback_failed(batch);
                let mut g = vec![1.0; batch.len()];
                for traj in &batch.trajs {
                    // The released code reads the *next* observation: the last step has none.
                    let Some((_, earlier)) = traj.rows.split_last() else {
                        continue;
                    };
                    for &r in earlier {
                        if failed[r as usize] {
                            g[r as usize] = 0.0;
                        }
                    }
                }
                g
            }
        }
    }

    /// Per row, whether the feedback after the action (`feedback`, else `next_obs`) contains
    /// `grounding_pattern`.
    pub fn feedback_failed(&self, batch: &StepBatch) -> Vec<bool> {
        let text = batch.texts(FEEDBACK).or_else(|| batch.texts(NEXT_OBS));
        let pattern = self.grounding_pattern.as_str();
        (0..batch.len())
            .map(|r| {
                text.and_then(|c| c.get(r))
                    .is_some_and(|t| t.contains(pattern))
            })
            .collect()
    }

    /// G_t at γ and A_t (GAE against the logged `value`, else critic-free), whitened if asked,
    /// and the note to give when the advantages are critic-free.
    pub fn returns_and_advantages(
        &self,
        batch: &StepBatch,
        rewards: &[f64],
        label: &str,
    ) -> Result<(Vec<f64>, Vec<f64>, Option<String>)> {
        let returns = batch.discounted_returns(rewards, self.gamma);
        let (values, note) = match batch.opt_f64s(VALUE) {
            Some(column) if self.use_value => {
                let values = (0..batch.len())
                    .map(|r| {
                        column.get(r).ok_or_else(|| {
                            Error::Param(format!(
                                "{label}: {} has no `value` (GAE needs V(s_t) on every step; `--set {label}.use_value=false` runs critic-free)",
                                row_name(batch, r)
                            ))
                        })
                    })
                    .collect::<Result<Vec<f64>>>()?;
                (values, None)
            }
            logged => {
                let why = if logged.is_some() {
                    "`use_value = false`"
                } else {
                    "no `value` column"
                };
                let note = format!(
                    "{label}: critic-free advantages ({why}): V ≡ 0, so A_t = Σ_k (γλ)^k r_(t+k)"
                );
                (vec![0.0; batch.len()], Some(note))
            }
        };
        let mut advantage = gae(batch, rewards, &values, self.gamma, self.lambda);
        if self.whiten {
            whiten(batch, &mut advantage);
        }
        Ok((returns, advantage, note))
    }
}

/// "trajectory `a` step 3": where a per-row problem is.
pub(crate) fn row_name(batch: &StepBatch, r: usize) -> String {
    let traj = &batch.trajs[batch.traj_of_row[r] as usize].id;
    match batch.opt_i64s(STEP).and_then(|c| c.get(r)) {
        Some(step) => format!("trajectory `{traj}` step {step}"),
        None => format!("trajectory `{traj}` row {r}"),
    }
}

/// GAE per trajectory: δ_t = r_t + γ·V_{t+1} − V_t (V after the last step 0), A_t = Σ_k (γλ)^k δ_{t+k}.
pub fn gae(
    batch: &StepBatch,
    rewards: &[f64],
    values: &[f64],
    gamma: f64,
    lambda: f64,
) -> Vec<f64> {
    let mut delta = vec![0.0; rewards.len()];
    for traj in &batch.trajs {
        for (k, &r) in traj.rows.iter().enumerate() {
            let next = traj.rows.get(k + 1).map_or(0.0, |&n| values[n as usize]);
            delta[r as usize] = rewards[r as usize] + gamma * next - values[r as usize];
        }
    }
    batch.discounted_returns(&delta, gamma * lambda)
}

/// (A − μ)/√(σ² + 1e-8) over each iteration's rows, σ² with ddof 1 (trl's `masked_whiten`).
pub fn whiten(batch: &StepBatch, values: &mut [f64]) {
    let mut scopes: BTreeMap<Option<i64>, Vec<u32>> = BTreeMap::new();
    for (g, group) in batch.groups.iter().enumerate() {
        scopes
            .entry(group.iteration)
            .or_default()
            .extend(batch.group_rows(g));
    }
    for rows in scopes.values() {
        let x: Vec<f64> = rows.iter().map(|&r| values[r as usize]).collect();
        let (mean, std) = mean_std(&x, 1);
        let scale = (std * std + 1e-8).sqrt();
        for &r in rows {
            values[r as usize] = (values[r as usize] - mean) / scale;
        }
    }
}
