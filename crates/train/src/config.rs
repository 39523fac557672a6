//! `credit train policy`'s hyper-parameters: what the hand-off file carries, what a checkpoint
//! records to refuse a resume with other settings, and their checks (messages name the flags).

use crate::error::{Error, Result};
use crate::lora::LoraConfig;
use crate::optim::AdamWConfig;
use serde::{Deserialize, Serialize};

/// Hyper-parameters. Defaults follow verl-agent's GiGPO/GRPO examples where they set one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainConfig {
    /// Peak learning rate [1e-6, verl's actor default].
    pub lr: f64,
    /// Passes over the samples, when `steps` is not set [1].
    pub epochs: u64,
    /// Optimizer steps to run in total (overrides `epochs`).
    pub steps: Option<u64>,
    /// Samples per forward/backward pass (micro-batch) [4].
    pub batch_size: usize,
    /// Micro-batches accumulated into one optimizer step [1].
    pub grad_accum: usize,
    /// PPO clip range ε [0.2].
    pub clip_eps: f64,
    /// β of the low-variance KL penalty to the initial model; 0 turns it off [0.01].
    pub kl_coef: f64,
    /// Optimizer steps of linear learning-rate warm-up [0].
    pub warmup_steps: u64,
    /// Global gradient-norm clip [1.0].
    pub max_grad_norm: f64,
    /// Seeds the shuffling of samples [0].
    pub seed: u64,
    /// Also save a checkpoint every this many optimizer steps (always at the end).
    pub save_every: Option<u64>,
    pub adamw: AdamWConfig,
    /// Train LoRA adapters over the frozen model instead of every weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// Recompute each transformer block in the backward pass instead of keeping its activations.
    pub checkpoint_layers: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            lr: 1e-6,
            epochs: 1,
            steps: None,
            batch_size: 4,
            grad_accum: 1,
            clip_eps: 0.2,
            kl_coef: 0.01,
            warmup_steps: 0,
            max_grad_norm: 1.0,
            seed: 0,
            save_every: None,
            adamw: AdamWConfig::default(),
            lora: None,
            checkpoint_layers: false,
        }
    }
}

impl TrainConfig {
    /// Checks every field; messages name the `credit train policy` flag.
    pub fn check(&self) -> Result<()> {
        let fail = |m: &str| Err(Error::Params(m.to_string()));
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return fail("`--lr` must be a positive number");
        }
        if self.steps.is_none() && self.epochs == 0 {
            return fail("`--epochs` must be at least 1 (or give `--steps`)");
        }
        if self.steps == Some(0) {
            return fail("`--steps` must be at least 1");
        }
        if self.batch_size == 0 || self.grad_accum == 0 {
            return fail("`--batch-size` and `--grad-accum` must be at least 1");
        }
        if !(self.clip_eps > 0.0 && self.clip_eps < 1.0) {
            return fail("`--clip-eps` must be in (0, 1), e.g. 0.2");
        }
        if !(self.kl_coef.is_finite() && self.kl_coef >= 0.0) {
            return fail("`--kl-coef` must be ≥ 0 (0 turns the KL penalty off)");
        }
        if !(self.max_grad_norm.is_finite() && self.max_grad_norm > 0.0) {
            return fail("`--max-grad-norm` must be a positive number");
        }
        if self.save_every == Some(0) {
            return fail("`--save-every` must be at least 1");
        }
        let a = &self.adamw;
        if !(a.beta1 >= 0.0
            && a.beta1 < 1.0
            && a.beta2 >= 0.0
            && a.beta2 < 1.0
            && a.eps > 0.0
            && a.weight_decay >= 0.0)
        {
            return fail("AdamW needs 0 ≤ β₁, β₂ < 1, ε > 0 and weight decay ≥ 0");
        }
        match &self.lora {
            Some(lora) => lora.check(),
            None => Ok(()),
        }
    }

    /// Optimizer steps per pass over `n` samples.
    pub fn steps_per_epoch(&self, n: usize) -> u64 {
        n.div_ceil(self.batch_size * self.grad_accum) as u64
    }

    pub fn total_steps(&self, n: usize) -> u64 {
        self.steps.unwrap_or(self.epochs * self.steps_per_epoch(n))
    }

    /// The fields a resumed run may change: how long it runs, how often it saves, whether it
    /// checkpoints activations and whether it writes merged LoRA weights.
    pub(crate) fn resumable_part(&self) -> TrainConfig {
        TrainConfig {
            epochs: 0,
            steps: None,
            save_every: None,
            checkpoint_layers: false,
            lora: self.lora.clone().map(|l| LoraConfig { merge: false, ..l }),
            ..self.clone()
        }
    }
}
