//! `credit train progress [PATHS] --out DIR`: trains SPA's progress estimator (`credit_train::progress`)
//! on the logged trajectories, and `credit advantages --progress-model DIR` fills the `progress`
//! column from it. Step t's input is (task, obs before the action, action); R is the trajectory's
//! episode return; the split key is the task, else the group.

use super::{load, Format, Globals};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use anyhow::{Context, Result};
use credit_core::schema::columns::{ACTION, OBS, PROGRESS, TASK};
use credit_core::StepBatch;
use credit_train::progress::{train_progress, ProgressModel, ProgressTrain, StepText, Trajectory};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct ProgressArgs {
    #[command(flatten)]
    globals: Globals,
    /// Folder for model.safetensors and config.json (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Passes over the training trajectories [default: 10].
    #[arg(long, value_name = "N")]
    epochs: Option<usize>,
    /// AdamW learning rate [default: 1e-3].
    #[arg(long, value_name = "X")]
    lr: Option<f64>,
    /// Seed of the initial weights and the shuffling [default: 0].
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Width of the step encoder [default: 64].
    #[arg(long, value_name = "H")]
    hidden: Option<usize>,
}

/// Each trajectory's steps as the estimator reads them, in `batch.trajs` order.
fn trajectories(batch: &StepBatch) -> Vec<Trajectory> {
    let text = |column: &str, r: usize| {
        batch
            .texts(column)
            .and_then(|c| c.get(r))
            .unwrap_or("")
            .to_string()
    };
    batch
        .trajs
        .iter()
        .map(|t| {
            let first = t.rows.first().map_or(0, |&r| r as usize);
            let key = batch
                .tasks()
                .and_then(|c| c.get(first))
                .map_or_else(|| batch.groups[t.group as usize].id.clone(), str::to_string);
            Trajectory {
                key,
                steps: t
                    .rows
                    .iter()
                    .map(|&r| StepText {
                        task: text(TASK, r as usize),
                        obs: text(OBS, r as usize),
                        action: text(ACTION, r as usize),
                    })
                    .collect(),
                ret: t.episode_return,
            }
        })
        .collect()
}

pub fn train(args: ProgressArgs) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let json = args.globals.format == Format::Json;
    let ingested = load(&args.globals, &project)?;
    let defaults = ProgressTrain::default();
    let opts = ProgressTrain {
        epochs: args.epochs.unwrap_or(defaults.epochs),
        lr: args.lr.unwrap_or(defaults.lr),
        seed: args.seed.unwrap_or(defaults.seed),
        hidden: args.hidden.unwrap_or(defaults.hidden),
        ..defaults
    };
    let bar = crate::progress::spinner("training the progress estimator", json);
    let (model, report) = train_progress(&trajectories(&ingested.batch), &opts)?;
    bar.finish_and_clear();
    model
        .save(&args.out)
        .with_context(|| format!("saving to {}", args.out.display()))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"out": args.out, "report": report}))?
        );
    } else {
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
        println!(
            "trained on {} trajectories, {} held out (split by {}), {} epochs in {:.1}s",
            report.train_trajectories,
            report.heldout_trajectories,
            report.split_by,
            report.epoch_loss.len(),
            report.seconds
        );
        println!(
            "train loss {} → {}",
            fmt(report.epoch_loss.first().copied()),
            fmt(report.epoch_loss.last().copied())
        );
        println!(
            "held-out MSE(Σĉ, R) {} · constant (train mean R) {} · Pearson r {}",
            fmt(report.heldout_mse),
            fmt(report.constant_mse),
            fmt(report.pearson)
        );
        println!("saved to {}", args.out.display());
    }
    Ok(ExitCode::Ok)
}

/// Fills `progress` (ĉ_t) from the estimator in `dir` when the logs lack it; returns whether it did.
pub fn fill(batch: &mut StepBatch, dir: &Path) -> Result<bool> {
    if batch.has(PROGRESS) {
        return Ok(false);
    }
    let model = ProgressModel::load(dir)
        .with_context(|| format!("loading the progress model in {}", dir.display()))?;
    let mut values = vec![0.0; batch.len()];
    for (traj, t) in trajectories(batch).iter().zip(&batch.trajs) {
        for (c, &r) in model.predict(&traj.steps)?.into_iter().zip(&t.rows) {
            values[r as usize] = c;
        }
    }
    batch.with_column_f64(PROGRESS, values)?;
    Ok(true)
}
