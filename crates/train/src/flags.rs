//! The command-line flags that set the trainer's options, declared beside the options they fill
//! so that each default is written once: [`PolicyFlags`] → [`TrainConfig`] (`credit train
//! policy`), [`EstimatorFlags`] → [`Estimator`] (`credit train progress|sprm`). The `credit`
//! binary flattens them into its subcommands (`#[command(flatten)]`).

use crate::error::{Error, Result};
use crate::load::model_dir_problem;
use crate::lora::{parse_targets, LoraConfig};
use crate::signal::lm::BackboneTrain;
use crate::signal::ngram::ProgressTrain;
use crate::signal::{Estimator, Readout};
use crate::{DeviceKind, TrainConfig};
use std::path::PathBuf;

/// `credit train policy`'s hyper-parameters; unset ones take [`TrainConfig::default`]'s.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct PolicyFlags {
    /// Peak learning rate [default: 1e-6].
    #[arg(long, value_name = "X")]
    pub lr: Option<f64>,
    /// Passes over the samples [default: 1].
    #[arg(long, value_name = "N", conflicts_with = "steps")]
    pub epochs: Option<u64>,
    /// Optimizer steps in total, instead of --epochs.
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,
    /// Samples per forward/backward pass [default: 4].
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Micro-batches accumulated into one optimizer step [default: 1].
    #[arg(long, value_name = "N")]
    pub grad_accum: Option<usize>,
    /// PPO clip range ε [default: 0.2].
    #[arg(long, value_name = "X")]
    pub clip_eps: Option<f64>,
    /// β of the low-variance KL penalty to the initial model; 0 turns it off [default: 0.01].
    #[arg(long, value_name = "X")]
    pub kl_coef: Option<f64>,
    /// Optimizer steps of linear learning-rate warm-up [default: 0].
    #[arg(long, value_name = "N")]
    pub warmup: Option<u64>,
    /// Global gradient-norm clip [default: 1.0].
    #[arg(long, value_name = "X")]
    pub max_grad_norm: Option<f64>,
    /// Also save a checkpoint every N optimizer steps (always at the end).
    #[arg(long, value_name = "N")]
    pub save_every: Option<u64>,
    /// Train LoRA adapters of rank R over the frozen model instead of every weight; the
    /// checkpoint is a PEFT adapter (adapter_config.json, adapter_model.safetensors).
    #[arg(long, value_name = "R")]
    pub lora_rank: Option<usize>,
    /// LoRA's α: the update is scaled by α/r [default: 16].
    #[arg(long, value_name = "A", requires = "lora_rank")]
    pub lora_alpha: Option<f64>,
    /// Dropout on the adapters' input while training [default: 0.05].
    #[arg(long, value_name = "P", requires = "lora_rank")]
    pub lora_dropout: Option<f64>,
    /// The projections to adapt [default: q,k,v,o,gate,up,down].
    #[arg(long, value_name = "LIST", requires = "lora_rank")]
    pub lora_targets: Option<String>,
    /// Also write the base weights with the adapter folded in (W + B·A·α/r) to OUT/merged/.
    #[arg(long, requires = "lora_rank")]
    pub merge: bool,
    /// Recompute each transformer block in the backward pass instead of keeping its
    /// activations: less memory for long prompts, about a third more compute. Without it, a run
    /// does so by itself (and says so) when a micro-batch's activations would take more than
    /// half the memory free on the device in use (the GPU's, or the machine's).
    #[arg(long)]
    pub checkpoint_layers: bool,
}

impl PolicyFlags {
    /// The flags over [`TrainConfig`]'s defaults; `seed` (`--seed`, shared with MGR's gate, or
    /// the project file's) seeds the shuffle, LoRA's initial A and its dropout masks.
    pub fn config(&self, seed: Option<u64>) -> Result<TrainConfig> {
        let d = TrainConfig::default();
        let lora = match self.lora_rank {
            None => None,
            Some(rank) => {
                let l = LoraConfig::default();
                Some(LoraConfig {
                    rank,
                    alpha: self.lora_alpha.unwrap_or(l.alpha),
                    dropout: self.lora_dropout.unwrap_or(l.dropout),
                    targets: match &self.lora_targets {
                        Some(list) => parse_targets(list)?,
                        None => l.targets,
                    },
                    merge: self.merge,
                })
            }
        };
        Ok(TrainConfig {
            lr: self.lr.unwrap_or(d.lr),
            epochs: self.epochs.unwrap_or(d.epochs),
            steps: self.steps,
            batch_size: self.batch_size.unwrap_or(d.batch_size),
            grad_accum: self.grad_accum.unwrap_or(d.grad_accum),
            clip_eps: self.clip_eps.unwrap_or(d.clip_eps),
            kl_coef: self.kl_coef.unwrap_or(d.kl_coef),
            warmup_steps: self.warmup.unwrap_or(d.warmup_steps),
            max_grad_norm: self.max_grad_norm.unwrap_or(d.max_grad_norm),
            seed: seed.unwrap_or(d.seed),
            save_every: self.save_every,
            adamw: d.adamw,
            lora,
            checkpoint_layers: self.checkpoint_layers,
        })
    }
}

/// The options of SPA's progress estimator and HISR's segment reward model: the small model's
/// ([`ProgressTrain`]), or with `--backbone` an LM's ([`BackboneTrain`]); unset ones take their
/// defaults.
#[derive(Clone, Debug, clap::Args)]
pub struct EstimatorFlags {
    /// Passes over the training trajectories [default: 20].
    #[arg(long, value_name = "N")]
    pub epochs: Option<usize>,
    /// AdamW learning rate [default: 1e-3].
    #[arg(long, value_name = "X")]
    pub lr: Option<f64>,
    /// Trajectories per update [default: 4].
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Share of input features dropped per update [default: 0.5].
    #[arg(long, value_name = "P")]
    pub dropout: Option<f64>,
    /// Width of the step encoder [default: 64].
    #[arg(long, value_name = "H")]
    pub hidden: Option<usize>,
    /// Hash buckets per text field [default: 4096].
    #[arg(long, value_name = "N")]
    pub buckets: Option<usize>,
    /// Cross-validation folds by task for the held-out calibration; 1 skips it [default: 5].
    #[arg(long, value_name = "K")]
    pub folds: Option<usize>,
    /// Seed of the initial weights, the shuffling and the dropout [default: 0].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Train the estimator on this Hugging Face LM folder or llama .gguf file (LoRA + a
    /// regression head on each step's last token) instead of the small model [defaults then:
    /// --epochs 5, --lr 1e-4].
    #[arg(long, value_name = "MODEL_DIR|FILE.gguf", conflicts_with_all = ["hidden", "buckets", "dropout"])]
    pub backbone: Option<PathBuf>,
    /// LoRA rank of the backbone's adapters (α = 2r, every projection) [default: 8].
    #[arg(long, value_name = "R", requires = "backbone")]
    pub lora_rank: Option<usize>,
    /// A step's text keeps its last N tokens on the backbone [default: 256].
    #[arg(long, value_name = "N", requires = "backbone")]
    pub max_step_tokens: Option<usize>,
    /// `cpu`, or `cuda` in a build with `--features cuda`, for the backbone.
    #[arg(
        long,
        value_name = "DEVICE",
        default_value = "cpu",
        requires = "backbone"
    )]
    pub device: String,
    /// Recompute each backbone block in the backward pass (less memory, more compute).
    #[arg(long, requires = "backbone")]
    pub checkpoint_layers: bool,
}

impl EstimatorFlags {
    /// The estimator these flags ask for, reading out at `readout`, checked (before the logs are
    /// read, which can take a while).
    pub fn estimator(&self, readout: Readout) -> Result<Estimator> {
        let estimator = match &self.backbone {
            Some(dir) => Estimator::Backbone(self.backbone_opts(dir, readout)?),
            None => Estimator::Small(self.small_model_opts(readout)),
        };
        estimator.check()?;
        Ok(estimator)
    }

    fn backbone_opts(&self, dir: &std::path::Path, readout: Readout) -> Result<BackboneTrain> {
        if let Some(problem) = model_dir_problem(dir) {
            return Err(Error::Params(format!(
                "`--backbone {}`: {problem}",
                dir.display()
            )));
        }
        let d = BackboneTrain::new(dir.to_path_buf());
        let rank = self.lora_rank.unwrap_or(d.lora.rank);
        Ok(BackboneTrain {
            readout,
            lora: LoraConfig {
                rank,
                alpha: 2.0 * rank as f64,
                ..d.lora.clone()
            },
            epochs: self.epochs.unwrap_or(d.epochs),
            lr: self.lr.unwrap_or(d.lr),
            batch: self.batch_size.unwrap_or(d.batch),
            max_step_tokens: self.max_step_tokens.unwrap_or(d.max_step_tokens),
            folds: self.folds.unwrap_or(d.folds),
            seed: self.seed.unwrap_or(d.seed),
            device: self.device.parse::<DeviceKind>()?,
            checkpoint_layers: self.checkpoint_layers,
            ..d
        })
    }

    fn small_model_opts(&self, readout: Readout) -> ProgressTrain {
        let d = ProgressTrain::default();
        ProgressTrain {
            readout,
            epochs: self.epochs.unwrap_or(d.epochs),
            lr: self.lr.unwrap_or(d.lr),
            batch: self.batch_size.unwrap_or(d.batch),
            dropout: self.dropout.unwrap_or(d.dropout),
            hidden: self.hidden.unwrap_or(d.hidden),
            buckets: self.buckets.unwrap_or(d.buckets),
            folds: self.folds.unwrap_or(d.folds),
            seed: self.seed.unwrap_or(d.seed),
            ..d
        }
    }
}
