//! `credit-train`: trains from a hand-off file written by `credit train policy … --handoff FILE`,
//! for a GPU machine that has the model but not the logs (or not polars): build it here with
//! `scripts/build-cuda.sh` and carry it, or there with
//! `cargo build --release -p credit-train --features cuda`.

use credit_train::train::{train, Event};
use credit_train::{DeviceKind, RunOptions};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str =
    "usage: credit-train HANDOFF.jsonl --model DIR|FILE.gguf --out DIR [--device cpu|cuda] [--resume]

Trains a Hugging Face causal LM (Qwen2/Llama family; or a llama .gguf file) on the samples and hyper-parameters of a
hand-off file written by `credit train policy … --handoff HANDOFF.jsonl`, and writes a checkpoint
in the Hugging Face layout to --out (with metrics.jsonl), or a PEFT adapter when the hand-off asks
for LoRA (`--lora-rank`). --resume continues that checkpoint.";

struct Args {
    handoff: PathBuf,
    model: PathBuf,
    out: PathBuf,
    device: DeviceKind,
    resume: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut handoff, mut model, mut out, mut device, mut resume) =
        (None, None, None, DeviceKind::Cpu, false);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("`{flag}` needs a value"));
        match arg.as_str() {
            "--model" => model = Some(PathBuf::from(value("--model")?)),
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--device" => {
                device = value("--device")?
                    .parse()
                    .map_err(|e: credit_train::Error| e.to_string())?
            }
            "--resume" => resume = true,
            "-h" | "--help" => return Err(String::new()),
            flag if flag.starts_with('-') => return Err(format!("unknown flag `{flag}`")),
            path if handoff.is_none() => handoff = Some(PathBuf::from(path)),
            extra => {
                return Err(format!(
                    "unexpected argument `{extra}`: one hand-off file per run"
                ))
            }
        }
    }
    Ok(Args {
        handoff: handoff.ok_or("missing the hand-off file")?,
        model: model.ok_or("missing `--model DIR|FILE.gguf`")?,
        out: out.ok_or("missing `--out DIR`")?,
        device,
        resume,
    })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
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
                "step {} loss {:.4} kl {} clip {:.3} grad-norm {:.3} {:.0} tokens/s",
                m.step,
                m.loss,
                m.kl.map_or("-".into(), |k| format!("{k:.4}")),
                m.clip_frac,
                m.grad_norm,
                m.tokens_per_s
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
