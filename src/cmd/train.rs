//! `credit train policy --model DIR|FILE.gguf --method NAME [PATHS] --out DIR`: fine-tune a causal LM on the
//! logged steps with one method's advantages: the samples are `credit_learn::samples`, the
//! training `credit_train::train`; this file checks the flags and draws the progress. See
//! docs/training.md.

use super::{load, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{bail, Result};
use credit_learn::policy::{Policy, Prepared, Trained};
use credit_train::flags::PolicyFlags;
use credit_train::signal::Readout;
use credit_train::train::Event;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: TrainCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TrainCommand {
    /// Fine-tune a causal LM (Qwen2/Llama family) on the logged steps with the clipped PPO
    /// surrogate and one method's advantages; writes a Hugging Face checkpoint.
    Policy(Box<PolicyArgs>),
    /// Train SPA's progress estimator (per-step ĉ_t with Σĉ_t ≈ R) on the logged trajectories;
    /// `credit advantages --progress-model DIR` then fills the `progress` column from it.
    Progress(super::signals::ProgressArgs),
    /// Train HISR's segmental process reward model (r̂_i at each segment's last step, Σr̂_i ≈ R;
    /// segments from the `segment` column, else one per turn); `credit advantages --sprm-model
    /// DIR` then fills the `segment_reward` column from it.
    Sprm(super::signals::ProgressArgs),
}

#[derive(Debug, clap::Args)]
// One method's advantages are trained on: `--method NAME`; `--methods` is refused, naming it.
#[command(mut_arg("methods", |a| a.hide(true)))]
pub struct PolicyArgs {
    #[command(flatten)]
    globals: Globals,
    #[command(flatten)]
    methods: MethodArgs,
    /// The method whose advantages drive the update (e.g. gigpo; same names as `--methods`).
    #[arg(long, value_name = "NAME")]
    method: Option<String>,
    /// Hugging Face model directory (config.json, *.safetensors or shards + index,
    /// tokenizer.json), or a llama-architecture .gguf file (dequantised, tokenizer from its
    /// metadata).
    #[arg(long, value_name = "DIR|FILE.gguf")]
    model: PathBuf,
    /// Checkpoint folder (new or empty; with --resume, the checkpoint to continue).
    #[arg(long, value_name = "DIR", required_unless_present = "handoff")]
    out: Option<PathBuf>,
    /// Continue the checkpoint in --out (same logs, method and flags; --steps/--epochs may grow).
    #[arg(long)]
    resume: bool,
    /// `cpu`, or `cuda` in a build with `--features cuda` (bf16 compute, f32 master weights).
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    device: String,
    /// Keep the last N tokens of longer prompts [default: 1024].
    #[arg(long, value_name = "N")]
    max_prompt_tokens: Option<usize>,
    /// Train on the first N usable steps only, in input order (advantages use every row).
    #[arg(long, value_name = "N")]
    max_samples: Option<usize>,
    /// Write the prepared samples and flags to this JSONL file for the `credit-train` binary
    /// (e.g. on a GPU machine) instead of training here.
    #[arg(long, value_name = "FILE")]
    handoff: Option<PathBuf>,
    #[command(flatten)]
    train: PolicyFlags,
}

const DEFAULT_MAX_PROMPT_TOKENS: usize = 1024;

impl Args {
    /// Whether the command prints JSON (`--format json`).
    pub fn json(&self) -> bool {
        let globals = match &self.command {
            TrainCommand::Policy(a) => &a.globals,
            TrainCommand::Progress(a) | TrainCommand::Sprm(a) => &a.globals,
        };
        globals.format == Format::Json
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        TrainCommand::Policy(args) => policy(*args),
        TrainCommand::Progress(args) => super::signals::train(args, Readout::Step),
        TrainCommand::Sprm(args) => super::signals::train(args, Readout::SegmentEnd),
    }
}

fn policy(mut args: PolicyArgs) -> Result<ExitCode> {
    if let Some(list) = &args.methods.methods {
        bail!("`credit train policy` trains on one method's advantages: `--method {list}`, not `--methods`");
    }
    args.methods.methods = args.method.take();
    let request = args.methods.request(&args.globals, &[&args.model]);
    if args.methods.methods.is_none() && request.project()?.methods.is_none() {
        bail!("`credit train policy` needs the method whose advantages to train on: pass `--method NAME` (e.g. `--method gigpo`)");
    }
    let resolved = request.resolve(Some("gigpo"))?;
    let plan = &resolved.run.methods;
    let [method] = plan.methods.as_slice() else {
        bail!("`credit train policy` trains on one method's advantages, got {}: pass a single `--method NAME`", plan.methods.len());
    };
    let policy = Policy {
        config: args.train.config(args.methods.seed.or(resolved.project.seed))?,
        device: args.device.parse()?,
        max_prompt_tokens: args.max_prompt_tokens.unwrap_or(DEFAULT_MAX_PROMPT_TOKENS),
        max_samples: args.max_samples,
        model: args.model,
        out: args.out,
        handoff: args.handoff,
        resume: args.resume,
    };
    let json = args.globals.format == Format::Json;
    let read = resolved.inputs(&request)?;
    let tokenizer = policy.check(&read)?;
    let ingested = load(&resolved.run, json)?;
    let bar = crate::bars::spinner("", json);
    let prepared = policy.prepare(
        &ingested.batch,
        method,
        plan.profile,
        &tokenizer,
        &mut |stage| bar.set_message(stage.to_string()),
    )?;
    bar.finish_and_clear();
    if let (Some(warning), false) = (prepared.warning(), json) {
        eprintln!("warning: {warning}");
    }
    let (text, value) = match &policy.handoff {
        Some(path) => {
            let handoff = policy.handoff(path, &prepared)?;
            (handoff.text(), handoff.json())
        }
        None => {
            let trained = train_showing_progress(&policy, &read, &prepared, json)?;
            if let (Some(warning), false) = (trained.warning(), json) {
                eprintln!("warning: {warning}");
            }
            (trained.text(), trained.json())
        }
    };
    match json {
        true => outln!("{}", serde_json::to_string_pretty(&value)?),
        false => outln!("{text}"),
    }
    Ok(ExitCode::Ok)
}

/// Trains, showing the steps on a progress bar (hidden for JSON or when stderr is no terminal,
/// where the checkpointing note is printed as a line).
fn train_showing_progress(
    policy: &Policy,
    read: &credit_output::Inputs,
    prepared: &Prepared,
    json: bool,
) -> Result<Trained> {
    let hidden = !crate::bars::shown(json);
    let bar = if hidden {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    let trained = policy.train(read, prepared, &mut |event| match event {
        Event::Scoring { done, total } => {
            bar.set_message(format!("scoring with the initial model {done}/{total}"))
        }
        Event::Started {
            start_step,
            total_steps,
        } => {
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} steps · {msg} · ETA {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_length(total_steps);
            bar.set_position(start_step);
            bar.reset_eta();
        }
        Event::Step(m) => {
            bar.set_position(m.step);
            bar.set_message(m.progress());
        }
        Event::Checkpointing { needed, budget } => {
            let note =
                credit_train::memory::checkpointing_note(needed, budget, "--max-prompt-tokens");
            if hidden {
                eprintln!("note: {note}");
            } else {
                bar.println(format!("note: {note}"));
            }
        }
        Event::Saved { .. } => {}
    })?;
    bar.finish_and_clear();
    Ok(trained)
}
