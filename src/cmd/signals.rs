//! `credit train progress|sprm [PATHS] --out DIR`: trains SPA's progress estimator (a readout every
//! step) or HISR's segmental process reward model (a readout at each segment's last step) on the
//! logged trajectories (`credit_learn::signals`, `credit_train::signal`); `--progress-model DIR`
//! / `--sprm-model DIR` ([`SignalModels`]) fill the `progress` / `segment_reward` column from them
//! in every command that reads logs.

use super::{load, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{bail, Result};
use credit_core::methods::hisr;
use credit_learn::signals::{trajectories, Signals};
use credit_output::{Commit, OutputDir, Stale};
use credit_train::load::model_dir_problem;
use credit_train::signal::lm::BackboneTrain;
use credit_train::signal::ngram::ProgressTrain;
use credit_train::signal::{Estimator, Readout};
use credit_train::DeviceKind;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct ProgressArgs {
    #[command(flatten)]
    globals: Globals,
    /// Folder for model.safetensors and config.json (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Passes over the training trajectories [default: 20].
    #[arg(long, value_name = "N")]
    epochs: Option<usize>,
    /// AdamW learning rate [default: 1e-3].
    #[arg(long, value_name = "X")]
    lr: Option<f64>,
    /// Trajectories per update [default: 4].
    #[arg(long, value_name = "N")]
    batch_size: Option<usize>,
    /// Share of input features dropped per update [default: 0.5].
    #[arg(long, value_name = "P")]
    dropout: Option<f64>,
    /// Width of the step encoder [default: 64].
    #[arg(long, value_name = "H")]
    hidden: Option<usize>,
    /// Hash buckets per text field [default: 4096].
    #[arg(long, value_name = "N")]
    buckets: Option<usize>,
    /// Cross-validation folds by task for the held-out calibration; 1 skips it [default: 5].
    #[arg(long, value_name = "K")]
    folds: Option<usize>,
    /// Seed of the initial weights, the shuffling and the dropout [default: 0].
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// HISR parameters that place the segments (`sprm`): `--set hisr.segments=rule`.
    #[arg(long = "set", value_name = "hisr.PARAM=VALUE")]
    set: Vec<String>,
    /// Train the estimator on this Hugging Face LM folder or llama .gguf file (LoRA + a
    /// regression head on each step's last token) instead of the small model [defaults then:
    /// --epochs 5, --lr 1e-4].
    #[arg(long, value_name = "MODEL_DIR|FILE.gguf", conflicts_with_all = ["hidden", "buckets", "dropout"])]
    backbone: Option<PathBuf>,
    /// LoRA rank of the backbone's adapters (α = 2r, every projection) [default: 8].
    #[arg(long, value_name = "R", requires = "backbone")]
    lora_rank: Option<usize>,
    /// A step's text keeps its last N tokens on the backbone [default: 256].
    #[arg(long, value_name = "N", requires = "backbone")]
    max_step_tokens: Option<usize>,
    /// `cpu`, or `cuda` in a build with `--features cuda`, for the backbone.
    #[arg(
        long,
        value_name = "DEVICE",
        default_value = "cpu",
        requires = "backbone"
    )]
    device: String,
    /// Recompute each backbone block in the backward pass (less memory, more compute).
    #[arg(long, requires = "backbone")]
    checkpoint_layers: bool,
}

pub fn train(args: ProgressArgs, readout: Readout) -> Result<ExitCode> {
    let json = args.globals.format == Format::Json;
    let (command, what) = match readout {
        Readout::Step => ("train progress", "the progress estimator"),
        Readout::SegmentEnd => ("train sprm", "the segment reward model"),
    };
    let backbone: Vec<&Path> = args.backbone.iter().map(PathBuf::as_path).collect();
    let methods = MethodArgs {
        set: args.set.clone(),
        ..MethodArgs::default()
    };
    let request = methods.request(&args.globals, &backbone);
    let resolved = request.resolve(None)?;
    let read = resolved.inputs(&request)?;
    OutputDir::check(&args.out, command, &read)?;
    // The flags are checked before the logs are read, which can take a while.
    let estimator = match &args.backbone {
        Some(dir) => Estimator::Backbone(backbone_opts(&args, dir, readout)?),
        None => Estimator::Small(small_model_opts(&args, readout)),
    };
    estimator.check()?;
    let ingested = load(&resolved.run, json)?;
    let trajs = trajectories(&ingested.batch, readout, &resolved.run.hisr)?;
    let bar = crate::bars::passes(&format!("training {what}"), json);
    let (model, report) = estimator.train(&trajs, &mut |p| crate::bars::update_passes(&bar, p))?;
    // The model's files go into the folder output once it is trained.
    let out = OutputDir::open(&args.out, command, &read, Commit::Whole)?;
    model.save(&args.out)?;
    out.finish(Stale::Remove)?;
    bar.finish_and_clear();
    if json {
        let value = serde_json::json!({"out": args.out, "report": report});
        outln!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::Ok);
    }
    if let Some(note) = &report.checkpointing {
        eprintln!("note: {note}");
    }
    outln!("{}\nsaved to {}", report.text(what), args.out.display());
    Ok(ExitCode::Ok)
}

/// The backbone estimator's flags over its defaults.
fn backbone_opts(args: &ProgressArgs, dir: &Path, readout: Readout) -> Result<BackboneTrain> {
    if let Some(problem) = model_dir_problem(dir) {
        bail!("`--backbone {}`: {problem}", dir.display());
    }
    let d = BackboneTrain::new(dir.to_path_buf());
    let rank = args.lora_rank.unwrap_or(d.lora.rank);
    Ok(BackboneTrain {
        readout,
        lora: credit_train::lora::LoraConfig {
            rank,
            alpha: 2.0 * rank as f64,
            ..d.lora.clone()
        },
        epochs: args.epochs.unwrap_or(d.epochs),
        lr: args.lr.unwrap_or(d.lr),
        batch: args.batch_size.unwrap_or(d.batch),
        max_step_tokens: args.max_step_tokens.unwrap_or(d.max_step_tokens),
        folds: args.folds.unwrap_or(d.folds),
        seed: args.seed.unwrap_or(d.seed),
        device: args.device.parse::<DeviceKind>()?,
        checkpoint_layers: args.checkpoint_layers,
        ..d
    })
}

/// The small model's flags over its defaults.
fn small_model_opts(args: &ProgressArgs, readout: Readout) -> ProgressTrain {
    let defaults = ProgressTrain::default();
    ProgressTrain {
        readout,
        epochs: args.epochs.unwrap_or(defaults.epochs),
        lr: args.lr.unwrap_or(defaults.lr),
        batch: args.batch_size.unwrap_or(defaults.batch),
        dropout: args.dropout.unwrap_or(defaults.dropout),
        hidden: args.hidden.unwrap_or(defaults.hidden),
        buckets: args.buckets.unwrap_or(defaults.buckets),
        folds: args.folds.unwrap_or(defaults.folds),
        seed: args.seed.unwrap_or(defaults.seed),
        ..defaults
    }
}

impl ProgressArgs {
    pub fn globals(&self) -> &Globals {
        &self.globals
    }
}

/// Trained signal models that fill missing columns before any method or analysis reads them.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SignalModels {
    /// A `credit train progress` model: fills the `progress` column (ĉ_t, for `spa` and the
    /// progress statistics) of logs that lack it.
    #[arg(long, value_name = "DIR")]
    pub progress_model: Option<PathBuf>,
    /// A `credit train sprm` model: fills the `segment_reward` column (r̂_i at each segment's
    /// last step, for `hisr` and the segment statistics) of logs that lack it.
    #[arg(long, value_name = "DIR")]
    pub sprm_model: Option<PathBuf>,
}

impl SignalModels {
    /// The model folders given (inputs of the run).
    pub fn paths(&self) -> Vec<&Path> {
        self.progress_model
            .iter()
            .chain(&self.sprm_model)
            .map(PathBuf::as_path)
            .collect()
    }

    pub fn load(&self, hisr: &hisr::Params) -> Result<Signals> {
        Signals::load(
            self.progress_model.as_deref(),
            self.sprm_model.as_deref(),
            hisr,
        )
    }
}
