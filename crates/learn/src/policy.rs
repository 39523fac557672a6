//! `credit train policy`'s run once its flags are resolved ([`Policy`]): the checks made before
//! the logs are read, the samples (one method's advantages over the batch, tokenized), then
//! either the hand-off file for `credit-train` or the training into the checkpoint folder; and
//! what each says ([`Handoff`], [`Trained`]).

use crate::samples::samples;
use anyhow::{bail, Context, Result};
use credit_core::methods::Method;
use credit_core::profile::Profile;
use credit_core::StepBatch;
use credit_output::interrupt::say_when_interrupted;
use credit_output::{Commit, Inputs, OutputDir, Stale};
use credit_train::data::Sample;
use credit_train::load::{model_dir_problem, Tokenizer};
use credit_train::train::{Event, Summary};
use credit_train::{DeviceKind, RunOptions, TrainConfig};
use std::path::{Path, PathBuf};

/// What `credit train policy` was asked to do.
pub struct Policy {
    /// A Hugging Face model folder or a llama .gguf file.
    pub model: PathBuf,
    /// The checkpoint folder (`None` with `handoff`).
    pub out: Option<PathBuf>,
    /// Write the samples and flags here for `credit-train` instead of training.
    pub handoff: Option<PathBuf>,
    pub device: DeviceKind,
    pub resume: bool,
    /// A prompt keeps its last N tokens.
    pub max_prompt_tokens: usize,
    /// Train on the first N usable steps only.
    pub max_samples: Option<usize>,
    pub config: TrainConfig,
}

/// The steps to train on.
pub struct Prepared {
    pub samples: Vec<Sample>,
    /// Rows without an action.
    pub skipped: usize,
    /// The method's label and preset.
    pub method: &'static str,
    pub preset: Profile,
}

impl Policy {
    /// Everything that can be checked before the logs are read (which can take a while): the
    /// flags, the output under the output rule (`read`: what the run reads), the model folder;
    /// returns the model's tokenizer.
    pub fn check(&self, read: &Inputs) -> Result<Tokenizer> {
        self.config.check()?;
        if self.max_prompt_tokens == 0 {
            bail!("`--max-prompt-tokens 0`: must be at least 1");
        }
        if self.max_samples == Some(0) {
            bail!("`--max-samples 0`: must be at least 1");
        }
        match (&self.handoff, &self.out) {
            (Some(path), _) => read.check(path)?,
            (None, Some(out)) => OutputDir::check(out, "train policy", read)?,
            (None, None) => bail!("`--out DIR` is required unless --handoff is given"),
        }
        if let Some(problem) = model_dir_problem(&self.model) {
            bail!("`--model {}`: {problem}", self.model.display());
        }
        Tokenizer::load(&self.model).context("reading the model's tokenizer")
    }

    /// `method`'s advantages over `batch`, and the steps with an action tokenized; `stage` is
    /// told each stage as it begins.
    pub fn prepare(
        &self,
        batch: &StepBatch,
        method: &Method,
        preset: Profile,
        tokenizer: &Tokenizer,
        stage: &mut dyn FnMut(&str),
    ) -> Result<Prepared> {
        let computing = format!("computing {}", method.label());
        stage(&computing);
        let result = method.advantages(batch).context(computing)?;
        stage("tokenizing");
        let (samples, skipped) = samples(
            batch,
            result.advantage(),
            tokenizer,
            self.max_prompt_tokens,
            self.max_samples,
        )?;
        if samples.is_empty() {
            bail!("no step has an action to train on ({skipped} rows without one)");
        }
        Ok(Prepared {
            samples,
            skipped,
            method: method.label(),
            preset,
        })
    }

    /// Writes the samples and the training flags to the hand-off file.
    pub fn handoff(&self, path: &Path, prepared: &Prepared) -> Result<Handoff> {
        credit_train::data::write_handoff(path, &self.config, &prepared.samples)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Handoff {
            path: path.to_path_buf(),
            model: self.model.clone(),
            samples: prepared.samples.len(),
            method: prepared.method,
            preset: prepared.preset,
        })
    }

    /// Trains into the checkpoint folder (`read`: what the run reads), telling `on_event` how
    /// it goes. Checkpoints land as they are made: a stopped run keeps them for `--resume`, and
    /// a signal's note says where it stopped ([`interrupted`]).
    pub fn train(
        &self,
        read: &Inputs,
        prepared: &Prepared,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Trained> {
        let Some(out) = self.out.clone() else {
            bail!("`--out DIR` is required unless --handoff is given")
        };
        let out_dir = OutputDir::open(&out, "train policy", read, Commit::AsWritten)?;
        let options = RunOptions {
            model_dir: self.model.clone(),
            out_dir: out.clone(),
            device: self.device,
            resume: self.resume,
        };
        let (mut total, mut saved) = (0, None);
        let mut on_event = |event: Event| {
            match &event {
                Event::Started { total_steps, .. } => total = *total_steps,
                Event::Step(m) => say_when_interrupted(interrupted(m.step, total, saved, &out)),
                Event::Saved { step, .. } => saved = Some(*step),
                _ => {}
            }
            on_event(event)
        };
        let summary =
            credit_train::train::train(&options, &self.config, &prepared.samples, &mut on_event)
                .with_context(|| format!("training on {}", self.model.display()))?;
        out_dir.finish(Stale::Remove)?;
        Ok(Trained {
            merged: self
                .config
                .lora
                .as_ref()
                .filter(|l| l.merge)
                .map(|_| out.join(credit_train::lora::MERGED_DIR)),
            metrics: out.join(credit_train::checkpoint::METRICS),
            out,
            lora: self.config.lora.is_some(),
            summary,
            method: prepared.method,
            preset: prepared.preset,
            samples: prepared.samples.len(),
            skipped_rows: prepared.skipped,
        })
    }
}

impl Prepared {
    /// The warning a run with rows left out prints.
    pub fn warning(&self) -> Option<String> {
        (self.skipped > 0).then(|| {
            format!(
                "skipped {} without an `action`",
                credit_core::wording::plural(self.skipped, "row")
            )
        })
    }
}

/// A hand-off file written.
pub struct Handoff {
    path: PathBuf,
    model: PathBuf,
    samples: usize,
    method: &'static str,
    preset: Profile,
}

impl Handoff {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"handoff": self.path, "samples": self.samples, "method": self.method, "preset": self.preset})
    }

    pub fn text(&self) -> String {
        format!(
            "wrote {} samples ({} advantages) and the training flags to {}\ntrain them with: credit-train {} --model {} --out DIR [--device cuda]",
            self.samples,
            self.method,
            self.path.display(),
            self.path.display(),
            self.model.display()
        )
    }
}

/// A finished training run.
pub struct Trained {
    out: PathBuf,
    lora: bool,
    merged: Option<PathBuf>,
    metrics: PathBuf,
    summary: Summary,
    method: &'static str,
    preset: Profile,
    samples: usize,
    skipped_rows: usize,
}

impl Trained {
    /// The warning a run whose update was skipped on some steps prints.
    pub fn warning(&self) -> Option<String> {
        (self.summary.skipped > 0).then(|| credit_train::train::skipped_note(&self.summary))
    }

    pub fn json(&self) -> serde_json::Value {
        let s = &self.summary;
        serde_json::json!({
            "out": self.out,
            "lora": self.lora,
            "merged": self.merged,
            "metrics": self.metrics,
            "method": self.method,
            "preset": self.preset,
            "samples": self.samples,
            "skipped_rows": self.skipped_rows,
            "steps": s.steps,
            "skipped_steps": s.skipped,
            "tokens_per_s": s.tokens_per_s,
            "last": s.last,
        })
    }

    pub fn text(&self) -> String {
        let s = &self.summary;
        let mut lines = vec![format!(
            "trained steps {}..{} on {} samples ({} advantages, preset {}); {} in {}",
            s.start_step + 1,
            s.steps,
            self.samples,
            self.method,
            self.preset,
            if self.lora {
                "PEFT adapter"
            } else {
                "checkpoint"
            },
            self.out.display()
        )];
        lines.extend(
            self.merged
                .iter()
                .map(|dir| format!("merged model in {}", dir.display())),
        );
        lines.extend(s.last.iter().map(|m| {
            format!(
                "last step: loss {:.4}, kl {}, clip fraction {:.3}, grad norm {:.3}",
                m.loss,
                m.kl.map_or("-".into(), |k| format!("{k:.4}")),
                m.clip_frac,
                m.grad_norm
            )
        }));
        lines.push(format!(
            "{:.0} tokens/s; metrics in {}",
            s.tokens_per_s,
            self.metrics.display()
        ));
        lines.join("\n")
    }
}

/// What a training stopped by a signal after `step` of `total` says (`saved`: the step of its
/// last checkpoint, in `out`).
fn interrupted(step: u64, total: u64, saved: Option<u64>, out: &Path) -> String {
    let out = out.display();
    match saved {
        Some(k) => format!("interrupted after step {step} of {total}: the checkpoint of step {k} is in {out}; continue it with the same command and --resume"),
        None => format!("interrupted after step {step} of {total}, before the first checkpoint (--save-every N saves one every N steps): {out} keeps the steps' metrics.jsonl"),
    }
}
