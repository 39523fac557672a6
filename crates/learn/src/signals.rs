//! Signal models at work: the logged trajectories as the models read them, and the models of
//! `credit train progress` / `credit train sprm` filling SPA's `progress` and HISR's
//! `segment_reward` columns of logs that lack them ([`Signals`], a [`Fill`] of the run layer).
//!
//! Step t's input is (task, obs before the action, action); R is the trajectory's episode return;
//! the split key is the task, else the group. Segments are HISR's (`hisr::segmentation`), so
//! training and filling read out at the same steps.

use anyhow::{bail, Context, Result};
use credit_core::methods::hisr;
use credit_core::run::Fill;
use credit_core::schema::columns::{ACTION, PROGRESS, REWARD, SEGMENT_REWARD, TASK};
use credit_core::StepBatch;
use credit_train::signal::{load_step_model, Readout, StepModel, StepText, Trajectory};
use credit_train::DeviceKind;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Each trajectory's steps as the model reads them, in `batch.trajs` order; `readout` marks every
/// step, or the last step of each of HISR's segments under `hisr` (only then are the logs segmented).
pub fn trajectories(
    batch: &StepBatch,
    readout: Readout,
    hisr: &hisr::Params,
) -> Result<Vec<Trajectory>> {
    let segments = match readout {
        Readout::Step => None,
        Readout::SegmentEnd => Some(hisr::segmentation(batch, hisr.segments, &hisr.rl)?.ranges),
    };
    // The model reads what the policy read: `policy_obs` beside a logged state, else the state.
    let columns = [batch.texts(TASK), batch.policy_texts(), batch.texts(ACTION)];
    let rewards = batch.f64s(REWARD)?;
    let text = |column: usize, r: u32| {
        columns[column]
            .and_then(|c| c.get(r as usize))
            .unwrap_or("")
            .to_string()
    };
    Ok(batch
        .trajs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let first = t.rows.first().map_or(0, |&r| r as usize);
            let key = columns[0].and_then(|c| c.get(first)).map_or_else(
                || batch.groups[t.group as usize].id.to_string(),
                str::to_string,
            );
            let mut steps: Vec<StepText> = t
                .rows
                .iter()
                .map(|&r| StepText {
                    task: text(0, r),
                    obs: text(1, r),
                    action: text(2, r),
                    readout: segments.is_none(),
                    reward: rewards[r as usize],
                })
                .collect();
            for range in segments.iter().flat_map(|s| &s[i]) {
                if let Some(step) = range.end.checked_sub(1).and_then(|k| steps.get_mut(k)) {
                    step.readout = true;
                }
            }
            Trajectory {
                key,
                steps,
                ret: t.episode_return,
            }
        })
        .collect())
}

/// A model given with `--progress-model` / `--sprm-model`, loaded once (a backbone estimator's
/// LM on the CPU).
struct SignalModel {
    dir: PathBuf,
    model: Box<dyn StepModel>,
    column: &'static str,
}

impl SignalModel {
    /// Loads the model in `dir`, which must be of the `expected` kind.
    fn load(dir: &Path, expected: Readout) -> Result<Self> {
        let model = load_step_model(dir, DeviceKind::Cpu)
            .with_context(|| format!("loading the model in {}", dir.display()))?;
        let readout = model.readout();
        if readout != expected {
            let (flag, trained_by) = match readout {
                Readout::Step => ("--progress-model", "credit train progress"),
                Readout::SegmentEnd => ("--sprm-model", "credit train sprm"),
            };
            bail!(
                "{} holds a `{trained_by}` model (readout {}); pass it with {flag}",
                dir.display(),
                readout.label()
            );
        }
        let column = match readout {
            Readout::Step => PROGRESS,
            Readout::SegmentEnd => SEGMENT_REWARD,
        };
        Ok(SignalModel {
            dir: dir.to_path_buf(),
            model,
            column,
        })
    }

    /// Fills the column the model predicts (`progress` on every step, `segment_reward` at the ends
    /// of `hisr`'s segments) when the logs lack it; returns whether it did.
    fn fill(&self, batch: &mut StepBatch, hisr: &hisr::Params) -> Result<bool> {
        if batch.has(self.column) {
            return Ok(false);
        }
        let readout = self.model.readout();
        let mut values = vec![None; batch.len()];
        for (traj, t) in trajectories(batch, readout, hisr)?.iter().zip(&batch.trajs) {
            let predicted = self.model.predict(&traj.steps)?;
            for ((c, step), &r) in predicted.into_iter().zip(&traj.steps).zip(&t.rows) {
                if step.readout {
                    values[r as usize] = Some(c);
                }
            }
        }
        batch.with_column_opt_f64(self.column, values)?;
        Ok(true)
    }
}

/// The signal models given, loaded, with HISR's segmenter for the segment-end model.
pub struct Signals {
    models: Vec<SignalModel>,
    hisr: hisr::Params,
}

impl Signals {
    /// The `credit train progress` model in `progress` and the `credit train sprm` model in
    /// `sprm`, each checked to be of its kind.
    pub fn load(progress: Option<&Path>, sprm: Option<&Path>, hisr: &hisr::Params) -> Result<Self> {
        let mut models = Vec::new();
        if let Some(dir) = progress {
            models.push(SignalModel::load(dir, Readout::Step)?);
        }
        if let Some(dir) = sprm {
            models.push(SignalModel::load(dir, Readout::SegmentEnd)?);
        }
        Ok(Signals {
            models,
            hisr: hisr.clone(),
        })
    }
}

impl Fill for Signals {
    /// `batch` with what the models predict filled in (the batch itself when no model is given),
    /// and one note per model saying whether it was used.
    fn fill<'a>(
        &self,
        batch: &'a StepBatch,
    ) -> credit_core::Result<(Cow<'a, StepBatch>, Vec<String>)> {
        if self.models.is_empty() {
            return Ok((Cow::Borrowed(batch), Vec::new()));
        }
        let mut filled = batch.clone();
        let mut notes = Vec::new();
        for m in &self.models {
            let used = m
                .fill(&mut filled, &self.hisr)
                .map_err(|e| credit_core::Error::Fill(format!("{e:#}")))?;
            notes.push(if used {
                format!(
                    "`{}` filled from the model in {}",
                    m.column,
                    m.dir.display()
                )
            } else {
                format!(
                    "the logs carry `{}`; the model in {} was not used",
                    m.column,
                    m.dir.display()
                )
            });
        }
        Ok((Cow::Owned(filled), notes))
    }
}
