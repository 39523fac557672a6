//! `credit train progress|sprm [PATHS] --out DIR`: trains SPA's progress estimator (a readout every
//! step) or HISR's segmental process reward model (a readout at each segment's last step) on the
//! logged trajectories (`credit_learn::signals`, `credit_train::signal`); `--progress-model DIR`
//! / `--sprm-model DIR` ([`SignalModels`]) fill the `progress` / `segment_reward` column from them
//! in every command that reads logs.

use super::{load, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::Result;
use credit_core::methods::hisr;
use credit_learn::signals::{trajectories, Signals};
use credit_output::{Commit, OutputDir, Stale};
use credit_train::flags::EstimatorFlags;
use credit_train::signal::Readout;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct ProgressArgs {
    #[command(flatten)]
    pub globals: Globals,
    /// Folder for model.safetensors and config.json (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// HISR parameters that place the segments (`sprm`): `--set hisr.segments=rule`.
    #[arg(long = "set", value_name = "hisr.PARAM=VALUE")]
    set: Vec<String>,
    #[command(flatten)]
    estimator: EstimatorFlags,
}

pub fn train(args: ProgressArgs, readout: Readout) -> Result<ExitCode> {
    let json = args.globals.format == Format::Json;
    let (command, what) = match readout {
        Readout::Step => ("train progress", "the progress estimator"),
        Readout::SegmentEnd => ("train sprm", "the segment reward model"),
    };
    let backbone: Vec<&Path> = args.estimator.backbone.iter().map(PathBuf::as_path).collect();
    let methods = MethodArgs {
        set: args.set.clone(),
        ..MethodArgs::default()
    };
    let request = methods.request(&args.globals, &backbone);
    let resolved = request.resolve(None)?;
    let read = resolved.inputs(&request)?;
    OutputDir::check(&args.out, command, &read)?;
    let estimator = args.estimator.estimator(readout)?;
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
