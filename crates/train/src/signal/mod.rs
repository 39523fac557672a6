//! Signal models: SPA's progress estimator and HISR's segmental process reward model
//! (`spec-spa-hisr.md` A3, A4, A8, B4), the learned per-step signals that fill the `progress` and
//! `segment_reward` columns. One model family: a causal transformer over a trajectory's steps
//! with a scalar readout, trained only on (Σ readouts − R)² per trajectory.
//!
//! - [`Readout::Step`] (SPA, Eq. 5–7): ĉ_t at every step, Σ_t ĉ_t ≈ R.
//! - [`Readout::SegmentEnd`] (HISR's SPRM, Eq. 2–3): r̂_i at the last step of each segment,
//!   Σ_i r̂_i ≈ R — B4's "smallest faithful version", read out where the LLM's last token of the
//!   segment would be.
//!
//! Two step encoders: [`ngram`], a small transformer over hashed word n-grams trained from
//! scratch, and [`lm`], the policy's own LM with LoRA adapters and a regression head, as the
//! paper trains it. What both read and report is re-exported here; [`load_step_model`] opens a
//! saved model of either kind.

pub mod lm;
pub mod ngram;
mod shared;

pub use shared::{
    HeldOut, Passes, ProgressReport, Readout, StepModel, StepOrder, StepText, Trajectory, CONFIG,
};

use crate::device::DeviceKind;
use crate::error::{Error, Result};
use std::path::Path;

/// Loads the signal model saved in `dir`: the small model ([`ngram::ProgressModel`]) or one on
/// an LM backbone ([`lm::BackboneProgress`], its backbone onto `device`), by the `model_type` of
/// its `config.json`.
pub fn load_step_model(dir: &Path, device: DeviceKind) -> Result<Box<dyn StepModel>> {
    let path = dir.join(CONFIG);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Json {
        path: path.clone(),
        line: 0,
        message: e.to_string(),
    })?;
    match value.get("model_type").and_then(|v| v.as_str()) {
        Some(lm::MODEL_TYPE) => Ok(Box::new(lm::BackboneProgress::load(dir, device)?)),
        _ => Ok(Box::new(ngram::ProgressModel::load(dir)?)),
    }
}

/// The estimator a run trains, with its options: the small model or one on an LM backbone.
pub enum Estimator {
    Small(ngram::ProgressTrain),
    Backbone(lm::BackboneTrain),
}

impl Estimator {
    /// The options' own checks (before the logs are read, which can take a while).
    pub fn check(&self) -> Result<()> {
        match self {
            Estimator::Small(opts) => opts.check(),
            Estimator::Backbone(opts) => opts.check(),
        }
    }

    /// Trains on `trajs` ([`ngram::train_progress`], [`lm::train_backbone_progress`]);
    /// `progress` is told the passes made.
    pub fn train(
        &self,
        trajs: &[Trajectory],
        progress: &mut dyn FnMut(Passes),
    ) -> Result<(Box<dyn StepModel>, ProgressReport)> {
        Ok(match self {
            Estimator::Small(opts) => {
                let (model, report) = ngram::train_progress(trajs, opts, progress)?;
                (Box::new(model), report)
            }
            Estimator::Backbone(opts) => {
                let (model, report) = lm::train_backbone_progress(trajs, opts, progress)?;
                (Box::new(model), report)
            }
        })
    }
}
