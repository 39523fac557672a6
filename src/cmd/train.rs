//! `credit train policy --model DIR|FILE.gguf --method NAME [PATHS] --out DIR`: fine-tune a causal LM on the
//! logged steps with one method's advantages: the samples are `credit_learn::samples`, the
//! training `credit_train::train`; this file checks the flags and draws the progress. See
//! docs/training.md.

use super::{load, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{bail, Result};
use credit_core::project::ProjectFile;
use credit_learn::policy::{Policy, Prepared, Trained};
use credit_train::lora::LoraConfig;
use credit_train::signal::Readout;
use credit_train::train::Event;
use credit_train::TrainConfig;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
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
    /// Peak learning rate [default: 1e-6].
    #[arg(long, value_name = "X")]
    lr: Option<f64>,
    /// Passes over the samples [default: 1].
    #[arg(long, value_name = "N", conflicts_with = "steps")]
    epochs: Option<u64>,
    /// Optimizer steps in total, instead of --epochs.
    #[arg(long, value_name = "N")]
    steps: Option<u64>,
    /// Samples per forward/backward pass [default: 4].
    #[arg(long, value_name = "N")]
    batch_size: Option<usize>,
    /// Micro-batches accumulated into one optimizer step [default: 1].
    #[arg(long, value_name = "N")]
    grad_accum: Option<usize>,
    /// PPO clip range ε [default: 0.2].
    #[arg(long, value_name = "X")]
    clip_eps: Option<f64>,
    /// β of the low-variance KL penalty to the initial model; 0 turns it off [default: 0.01].
    #[arg(long, value_name = "X")]
    kl_coef: Option<f64>,
    /// Optimizer steps of linear learning-rate warm-up [default: 0].
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,
    /// Global gradient-norm clip [default: 1.0].
    #[arg(long, value_name = "X")]
    max_grad_norm: Option<f64>,
    /// Also save a checkpoint every N optimizer steps (always at the end).
    #[arg(long, value_name = "N")]
    save_every: Option<u64>,
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
    /// Train LoRA adapters of rank R over the frozen model instead of every weight; the
    /// checkpoint is a PEFT adapter (adapter_config.json, adapter_model.safetensors).
    #[arg(long, value_name = "R")]
    lora_rank: Option<usize>,
    /// LoRA's α: the update is scaled by α/r [default: 16].
    #[arg(long, value_name = "A", requires = "lora_rank")]
    lora_alpha: Option<f64>,
    /// Dropout on the adapters' input while training [default: 0.05].
    #[arg(long, value_name = "P", requires = "lora_rank")]
    lora_dropout: Option<f64>,
    /// The projections to adapt [default: q,k,v,o,gate,up,down].
    #[arg(long, value_name = "LIST", requires = "lora_rank")]
    lora_targets: Option<String>,
    /// Also write the base weights with the adapter folded in (W + B·A·α/r) to OUT/merged/.
    #[arg(long, requires = "lora_rank")]
    merge: bool,
    /// Recompute each transformer block in the backward pass instead of keeping its
    /// activations: less memory for long prompts, about a third more compute. Without it, a run
    /// does so by itself (and says so) when a micro-batch's activations would take more than
    /// half the memory free on the device in use (the GPU's, or the machine's).
    #[arg(long)]
    checkpoint_layers: bool,
}

const DEFAULT_MAX_PROMPT_TOKENS: usize = 1024;

impl Args {
    /// Whether the command prints JSON (`--format json`).
    pub fn json(&self) -> bool {
        let globals = match &self.command {
            TrainCommand::Policy(a) => &a.globals,
            TrainCommand::Progress(a) | TrainCommand::Sprm(a) => a.globals(),
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
        config: train_config(&args, &resolved.project)?,
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
    let hidden = json || !std::io::stderr().is_terminal();
    let bar = if hidden {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    let (mut total, mut saved) = (0, None);
    let out = policy.out.clone().unwrap_or_default();
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
            total = total_steps;
            bar.set_length(total_steps);
            bar.set_position(start_step);
            bar.reset_eta();
        }
        Event::Step(m) => {
            bar.set_position(m.step);
            bar.set_message(m.progress());
            let note = interrupted(m.step, total, saved, &out);
            *crate::ON_INTERRUPT
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = note;
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
        Event::Saved { step, .. } => saved = Some(step),
    })?;
    bar.finish_and_clear();
    Ok(trained)
}

/// What a training stopped by a signal after `step` of `total` says (`saved`: the step of its
/// last checkpoint, in `out`).
fn interrupted(step: u64, total: u64, saved: Option<u64>, out: &std::path::Path) -> String {
    let out = out.display();
    match saved {
        Some(k) => format!("interrupted after step {step} of {total}: the checkpoint of step {k} is in {out}; continue it with the same command and --resume"),
        None => format!("interrupted after step {step} of {total}, before the first checkpoint (--save-every N saves one every N steps): {out} keeps the steps' metrics.jsonl"),
    }
}

/// The flags over `TrainConfig`'s defaults; `--seed` (shared with MGR's gate) seeds the shuffle
/// (and LoRA's initial A).
fn train_config(args: &PolicyArgs, project: &ProjectFile) -> Result<TrainConfig> {
    let d = TrainConfig::default();
    let lora = match args.lora_rank {
        None => None,
        Some(rank) => {
            let l = LoraConfig::default();
            Some(LoraConfig {
                rank,
                alpha: args.lora_alpha.unwrap_or(l.alpha),
                dropout: args.lora_dropout.unwrap_or(l.dropout),
                targets: match &args.lora_targets {
                    Some(list) => credit_train::lora::parse_targets(list)?,
                    None => l.targets,
                },
                merge: args.merge,
            })
        }
    };
    Ok(TrainConfig {
        lr: args.lr.unwrap_or(d.lr),
        epochs: args.epochs.unwrap_or(d.epochs),
        steps: args.steps,
        batch_size: args.batch_size.unwrap_or(d.batch_size),
        grad_accum: args.grad_accum.unwrap_or(d.grad_accum),
        clip_eps: args.clip_eps.unwrap_or(d.clip_eps),
        kl_coef: args.kl_coef.unwrap_or(d.kl_coef),
        warmup_steps: args.warmup.unwrap_or(d.warmup_steps),
        max_grad_norm: args.max_grad_norm.unwrap_or(d.max_grad_norm),
        seed: args.methods.seed.or(project.seed).unwrap_or(d.seed),
        save_every: args.save_every,
        adamw: d.adamw,
        lora,
        checkpoint_layers: args.checkpoint_layers,
    })
}
