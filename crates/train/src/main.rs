//! `credit-train`: trains from a hand-off file written by `credit train policy … --handoff FILE`,
//! for a GPU machine that has the model but not the logs (or not polars): build it here with
//! `scripts/build-cuda.sh` and carry it, or there with
//! `cargo build --release -p credit-train --features cuda`.

use clap::Parser;
use credit_train::train::{train, Event};
use credit_train::{DeviceKind, RunOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// Trains a Hugging Face causal LM (Qwen2/Llama family; or a llama .gguf file) on the samples and
/// hyper-parameters of a hand-off file written by `credit train policy … --handoff HANDOFF.jsonl`,
/// and writes a checkpoint in the Hugging Face layout to --out (with metrics.jsonl), or a PEFT
/// adapter when the hand-off asks for LoRA (`--lora-rank`).
#[derive(Parser)]
#[command(name = "credit-train", version, max_term_width = 100)]
struct Args {
    /// The hand-off file (one per run).
    #[arg(value_name = "HANDOFF.jsonl")]
    handoff: PathBuf,
    /// Hugging Face model directory, or a llama-architecture .gguf file.
    #[arg(long, value_name = "DIR|FILE.gguf")]
    model: PathBuf,
    /// Checkpoint folder (new or empty; with --resume, the checkpoint to continue).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// `cpu`, or `cuda` in a build with `--features cuda`.
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    device: DeviceKind,
    /// Continue the checkpoint in --out.
    #[arg(long)]
    resume: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    credit_output::interrupt::install();
    let run = || -> credit_train::Result<()> {
        if let Some(problem) = credit_train::load::model_dir_problem(&args.model) {
            return Err(credit_train::Error::Params(format!(
                "`--model {}`: {problem}",
                args.model.display()
            )));
        }
        let (config, samples) = credit_train::data::read_handoff(&args.handoff)?;
        let inputs = credit_output::Inputs::new([&args.handoff, &args.model]);
        let out = credit_output::OutputDir::open(
            &args.out,
            "train policy",
            &inputs,
            credit_output::Commit::AsWritten,
        )?;
        let options = RunOptions {
            model_dir: args.model.clone(),
            out_dir: args.out.clone(),
            device: args.device,
            resume: args.resume,
        };
        let summary = train(&options, &config, &samples, &mut |event| match event {
            Event::Scoring { done, total } => {
                eprintln!("scoring with the initial model: {done}/{total} samples")
            }
            Event::Started {
                start_step,
                total_steps,
            } => eprintln!(
                "training steps {}..{total_steps} on {} samples",
                start_step + 1,
                samples.len()
            ),
            Event::Step(m) => eprintln!(
                "step {}: {} · grad-norm {:.3}",
                m.step,
                m.progress(),
                m.grad_norm
            ),
            Event::Checkpointing { needed, budget } => {
                eprintln!(
                    "{}",
                    credit_train::memory::checkpointing_note(
                        needed,
                        budget,
                        "--max-prompt-tokens (in the handoff)",
                    )
                )
            }
            Event::Saved { step, dir } => eprintln!("saved step {step} to {}", dir.display()),
        })?;
        println!(
            "trained {} steps; checkpoint in {} ({:.0} tokens/s)",
            summary.steps,
            args.out.display(),
            summary.tokens_per_s
        );
        if summary.skipped > 0 {
            eprintln!("warning: {}", credit_train::train::skipped_note(&summary));
        }
        Ok(out.finish(credit_output::Stale::Remove)?)
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
