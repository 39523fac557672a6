//! The training loop: shuffled micro-batches, gradient accumulation into one AdamW update per
//! optimizer step, a metrics line per step, checkpoints, and progress events for the caller to
//! draw (the library never prints).
//!
//! Optimizer step k (0-based) trains on the k-th slice of `batch_size × grad_accum` samples of
//! epoch ⌊k / steps_per_epoch⌋'s permutation (a seeded shuffle), so the data order depends only on
//! the step, and a resumed run sees exactly the samples the uninterrupted run would have.
//!
//! Before the first step, when the KL penalty is on or some samples carry no logged log-prob, one
//! pass scores every action token with the initial model. Those log-probs are the KL reference
//! π_ref, and the "old" policy of samples without a logged one: the first update on them is then
//! on-policy (ratio 1, as verl when it recomputes `old_log_prob` with the actor), and later
//! epochs are clipped against the initial policy.
//!
//! A step whose gradient norm is not finite skips its update, as verl does, and says so in its
//! metrics line; a run that has skipped every update when it comes to save a checkpoint fails
//! instead of saving the unchanged model under a trained step's number.

use crate::checkpoint::{self, Fingerprint, Saved, TrainerState};
use crate::config::TrainConfig;
use crate::data::{prepare, Sample};
use crate::device::DeviceKind;
use crate::error::{Context, Error, Result};
use crate::memory;
use crate::model::Model;
use crate::objective;
use crate::optim::{clip_grad_norm, warmup_lr, AdamW};
use crate::rng::SplitMix64;
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where to read the model, where to write, on what device.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub model_dir: PathBuf,
    /// The checkpoint folder: Hugging Face layout plus `trainer_state.json` and `metrics.jsonl`.
    pub out_dir: PathBuf,
    pub device: DeviceKind,
    /// Continue the checkpoint in `out_dir` instead of starting from `model_dir`.
    pub resume: bool,
}

/// One optimizer step's line of `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// 1-based: the number of updates done after this step.
    pub step: u64,
    /// Fractional epochs done.
    pub epoch: f64,
    pub lr: f64,
    /// The objective: pg_loss + β·kl.
    pub loss: f64,
    /// Token mean of the clipped surrogate.
    pub pg_loss: f64,
    /// Token mean of k3 against the initial model (absent when it was not scored).
    pub kl: Option<f64>,
    /// Share of action tokens whose clipped branch was taken.
    pub clip_frac: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// False when the gradient was not finite and the update was skipped (as verl does).
    pub updated: bool,
    pub samples: usize,
    /// Action tokens (the loss's denominator).
    pub action_tokens: usize,
    /// Prompt and action tokens through the model.
    pub tokens: usize,
    /// `tokens` per second of this step (forward, backward and update).
    pub tokens_per_s: f64,
    pub elapsed_s: f64,
}

/// What the library reports while it runs.
pub enum Event<'a> {
    /// Scoring the samples with the initial model: `done` of `total` samples.
    Scoring {
        done: usize,
        total: usize,
    },
    Started {
        start_step: u64,
        total_steps: u64,
    },
    /// Activation checkpointing turned on by itself: a micro-batch's activations (`needed`
    /// bytes, [`crate::memory::activation_bytes`]) exceed what they may take (`budget`).
    Checkpointing {
        needed: u64,
        budget: u64,
    },
    Step(&'a StepMetrics),
    Saved {
        step: u64,
        dir: &'a Path,
    },
}

#[derive(Clone, Debug)]
pub struct Summary {
    pub start_step: u64,
    /// Optimizer steps completed, counting those before a resume.
    pub steps: u64,
    pub last: Option<StepMetrics>,
    /// This run's steps whose update was skipped (a non-finite gradient norm); fewer than its
    /// steps, or the run fails.
    pub skipped: u64,
    /// Mean over this run's steps.
    pub tokens_per_s: f64,
}

impl StepMetrics {
    /// A step on a progress bar: `loss 0.1234 · kl 0.0012 · clip 0.050 · 812 tok/s`.
    pub fn progress(&self) -> String {
        format!(
            "loss {:.4} · kl {} · clip {:.3} · {:.0} tok/s",
            self.loss,
            self.kl.map_or("-".into(), |k| format!("{k:.4}")),
            self.clip_frac,
            self.tokens_per_s
        )
    }
}

/// What a run whose update was skipped on some steps prints.
pub fn skipped_note(summary: &Summary) -> String {
    format!(
        "{} of steps {}..{} skipped their update (a non-finite gradient norm; `updated` is false on their lines of metrics.jsonl)",
        summary.skipped,
        summary.start_step + 1,
        summary.steps
    )
}

/// The steps of a run whose update was skipped, and why.
#[derive(Default)]
struct Skips {
    steps: u64,
    /// Those whose loss was not finite either (rather than only its gradient).
    loss_not_finite: u64,
}

impl Skips {
    fn count(&mut self, m: &StepMetrics) {
        if !m.updated {
            self.steps += 1;
            self.loss_not_finite += u64::from(!m.loss.is_finite());
        }
    }

    /// The error of a run, from `start_step`, that skipped every update of its steps so far.
    fn all_skipped(&self, start_step: u64) -> Error {
        Error::Untrained(format!(
            "every update was skipped: the gradient norm was not finite on all {} steps ({}..{}; the loss was not finite on {} of them), so the model did not change and is not saved as trained. Check the model's weights and hyper-parameters, or lower --lr",
            self.steps,
            start_step + 1,
            start_step + self.steps,
            self.loss_not_finite
        ))
    }
}

/// Trains on `samples` and writes the checkpoint to `run.out_dir`.
pub fn train(
    run: &RunOptions,
    config: &TrainConfig,
    samples: &[Sample],
    on_progress: &mut dyn FnMut(Event),
) -> Result<Summary> {
    config.check()?;
    if samples.is_empty() {
        return Err(Error::Params("no samples to train on".into()));
    }
    let out = &run.out_dir;
    // Checked before anything is written: the vocabulary of the model the run will train.
    let (_, model_config) = crate::load::read_config(&model_source(run, config)?)?;
    for (i, s) in samples.iter().enumerate() {
        s.check(i, model_config.vocab_size)?;
    }
    let total_steps = config.total_steps(samples.len());
    let fingerprint = Fingerprint::of(samples);
    let mut session = if run.resume {
        Session::resume(run, config, &fingerprint)?
    } else {
        Session::start(run, config, fingerprint)?
    };
    let start_step = session.state.step;
    if !config.checkpoint_layers {
        let longest = samples.iter().map(|s| s.input_ids.len()).max().unwrap_or(0);
        let micro_batch = config.batch_size.min(samples.len());
        if let Some((needed, budget)) =
            memory::over_budget(&model_config, micro_batch, longest, run.device)
        {
            session.model.set_checkpointing(true);
            on_progress(Event::Checkpointing { needed, budget });
        }
    }
    if start_step >= total_steps {
        return Err(Error::Params(format!(
            "the checkpoint in {} is at step {start_step}, and the run asks for {total_steps} steps in all: pass a larger --steps or --epochs to train further",
            out.display()
        )));
    }
    // offsets[i]: where sample i's action tokens start in the flat initial log-probs.
    let mut offsets = vec![0];
    for s in samples {
        offsets.push(offsets[offsets.len() - 1] + s.action_len());
    }
    let needs_init = config.kl_coef > 0.0
        || samples
            .iter()
            .any(|s| s.old_token_logprobs.is_none() && s.old_logprob.is_none());
    if needs_init && session.init_logprobs.is_none() {
        session.init_logprobs = Some(score(
            &session.model,
            samples,
            config.batch_size,
            on_progress,
        )?);
    }
    if let Some(init) = &session.init_logprobs {
        if init.len() != offsets[samples.len()] {
            return Err(Error::Checkpoint {
                path: out.join(checkpoint::OPTIMIZER),
                message: format!(
                    "holds {} initial log-probs for {} action tokens",
                    init.len(),
                    offsets[samples.len()]
                ),
            });
        }
    }

    on_progress(Event::Started {
        start_step,
        total_steps,
    });
    let metrics_path = out.join(checkpoint::METRICS);
    // Appended to a line per step, so not written whole: listed as credit's before it is opened.
    credit_output::claim(&metrics_path)?;
    let mut metrics_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .map_err(|e| Error::io(&metrics_path, e))?;
    let per_step = config.batch_size * config.grad_accum;
    let steps_per_epoch = config.steps_per_epoch(samples.len());
    let (mut perm, mut perm_epoch) = (Vec::new(), None);
    let (mut last, mut rate_sum, mut skips) = (None, 0.0, Skips::default());
    let run_start = Instant::now();

    for k in start_step..total_steps {
        let epoch = k / steps_per_epoch;
        if perm_epoch != Some(epoch) {
            perm = permutation(samples.len(), config.seed, epoch);
            perm_epoch = Some(epoch);
        }
        let j = (k % steps_per_epoch) as usize;
        let chosen: Vec<usize> =
            perm[j * per_step..((j + 1) * per_step).min(samples.len())].to_vec();
        let step_start = Instant::now();
        let lr = warmup_lr(config.lr, k, config.warmup_steps);
        let mut metrics = session.step(samples, &chosen, &offsets, config, lr, k)?;
        metrics.step = k + 1;
        metrics.epoch = (k + 1) as f64 / steps_per_epoch as f64;
        let seconds = step_start.elapsed().as_secs_f64();
        metrics.tokens_per_s = metrics.tokens as f64 / seconds.max(1e-9);
        metrics.elapsed_s = run_start.elapsed().as_secs_f64();
        rate_sum += metrics.tokens_per_s;
        let line = serde_json::to_string(&metrics).map_err(|e| Error::Json {
            path: metrics_path.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        writeln!(metrics_file, "{line}")
            .and_then(|()| metrics_file.flush())
            .map_err(|e| Error::io(&metrics_path, e))?;
        session.state.step = k + 1;
        on_progress(Event::Step(&metrics));
        skips.count(&metrics);
        if config.save_every.is_some_and(|n| (k + 1) % n == 0) || k + 1 == total_steps {
            // A checkpoint of a run that has not updated the model once would be the base model
            // under a trained step's number.
            if skips.steps == k + 1 - start_step {
                return Err(skips.all_skipped(start_step));
            }
            session.save(out, k + 1 == total_steps)?;
            on_progress(Event::Saved {
                step: k + 1,
                dir: out,
            });
        }
        last = Some(metrics);
    }
    let ran = (total_steps - start_step) as f64;
    Ok(Summary {
        start_step,
        steps: session.state.step,
        last,
        skipped: skips.steps,
        tokens_per_s: rate_sum / ran,
    })
}

/// The folder whose `config.json` describes the model a run trains: the source, or when resuming
/// full fine-tuning, the checkpoint (a LoRA checkpoint holds no base weights; its state names the
/// source).
fn model_source(run: &RunOptions, config: &TrainConfig) -> Result<PathBuf> {
    if !run.resume {
        return Ok(run.model_dir.clone());
    }
    match (&config.lora, checkpoint::read_state(&run.out_dir)?) {
        (Some(_), Some(state)) => Ok(state.source_model),
        _ => Ok(run.out_dir.clone()),
    }
}

/// A deterministic shuffle of 0..n for one epoch (Fisher–Yates over SplitMix64).
fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut rng = SplitMix64(seed ^ epoch.wrapping_mul(0xa076_1d64_78bd_642f));
    let mut p: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut p);
    p
}

/// Every action token's log-prob under `model`, in sample order, batch by batch.
pub fn score(
    model: &Model,
    samples: &[Sample],
    batch_size: usize,
    on_progress: &mut dyn FnMut(Event),
) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(samples.iter().map(Sample::action_len).sum());
    for (k, chunk) in samples.chunks(batch_size.max(1)).enumerate() {
        let refs: Vec<&Sample> = chunk.iter().collect();
        let prepared = prepare(&refs, model.device())?;
        out.extend(
            model
                .score_logprobs(&prepared.batch)?
                .detach()
                .to_vec1::<f32>()
                .ctx("scoring samples")?,
        );
        on_progress(Event::Scoring {
            done: (k * batch_size + chunk.len()).min(samples.len()),
            total: samples.len(),
        });
    }
    Ok(out)
}

/// The per-sample sum of action-token log-probs under `model` (a step's log-likelihood).
pub fn sequence_logprobs(model: &Model, samples: &[Sample], batch_size: usize) -> Result<Vec<f32>> {
    let tokens = score(model, samples, batch_size, &mut |_| {})?;
    let mut out = Vec::with_capacity(samples.len());
    let mut at = 0;
    for s in samples {
        out.push(tokens[at..at + s.action_len()].iter().sum());
        at += s.action_len();
    }
    Ok(out)
}

/// The model, optimizer and bookkeeping of a run in progress.
struct Session {
    model: Model,
    optimizer: AdamW,
    state: TrainerState,
    config_json: serde_json::Value,
    init_logprobs: Option<Vec<f32>>,
}

impl Session {
    fn start(run: &RunOptions, config: &TrainConfig, samples: Fingerprint) -> Result<Self> {
        let out = &run.out_dir;
        if let Some(state) = checkpoint::read_state(out)? {
            return Err(Error::Checkpoint {
                path: out.clone(),
                message: format!("already holds a checkpoint at step {}: pass --resume to continue it, or choose another --out", state.step),
            });
        }
        // The folder's manifest says it is credit's; anything else in it is not ours to replace.
        let others = |mut d: std::fs::ReadDir| {
            d.any(|e| e.is_ok_and(|e| e.file_name() != credit_output::MANIFEST))
        };
        if out.read_dir().is_ok_and(others) {
            return Err(Error::Checkpoint {
                path: out.clone(),
                message: "exists and is not empty: choose a new or empty --out folder".into(),
            });
        }
        let (config_json, model_config) = crate::load::read_config(&run.model_dir)?;
        let mut model = match &config.lora {
            None => crate::load::load_model(&run.model_dir, run.device)?,
            Some(lora) => {
                let adapters = crate::lora::init_adapters(&model_config, lora, config.seed)?;
                crate::load::load_model_lora(
                    &run.model_dir,
                    run.device,
                    lora,
                    adapters.into_iter().collect(),
                )?
            }
        };
        model.set_checkpointing(config.checkpoint_layers);
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        let optimizer = AdamW::new(model.params(), config.adamw.clone())?;
        let state = TrainerState {
            step: 0,
            config: config.clone(),
            // Absolute, so a resume from another folder still finds the tokenizer files to copy.
            source_model: run
                .model_dir
                .canonicalize()
                .unwrap_or_else(|_| run.model_dir.clone()),
            samples,
            credit_train_version: env!("CARGO_PKG_VERSION").into(),
        };
        Ok(Session {
            model,
            optimizer,
            state,
            config_json,
            init_logprobs: None,
        })
    }

    fn resume(run: &RunOptions, config: &TrainConfig, samples: &Fingerprint) -> Result<Self> {
        let out = &run.out_dir;
        let Some(mut state) = checkpoint::read_state(out)? else {
            return Err(Error::Checkpoint {
                path: out.join(checkpoint::TRAINER_STATE),
                message: "missing: --resume continues a checkpoint written by `credit train policy`; drop --resume to start one".into(),
            });
        };
        if state.config.resumable_part() != config.resumable_part() {
            return Err(Error::Checkpoint {
                path: out.join(checkpoint::TRAINER_STATE),
                message: format!(
                    "was written with other training flags; a resumed run may change only --steps/--epochs/--save-every/--merge/--checkpoint-layers\n  saved: {}\n  given: {}",
                    serde_json::to_string(&state.config.resumable_part()).unwrap_or_default(),
                    serde_json::to_string(&config.resumable_part()).unwrap_or_default()
                ),
            });
        }
        if &state.samples != samples {
            return Err(Error::Checkpoint {
                path: out.join(checkpoint::TRAINER_STATE),
                message: format!(
                    "was trained on other samples ({} samples, {} action tokens, hash {}; now {}, {}, {}): resume with the same logs, method and flags",
                    state.samples.count, state.samples.action_tokens, state.samples.hash, samples.count, samples.action_tokens, samples.hash
                ),
            });
        }
        // Full fine-tuning resumes from the checkpoint's weights; LoRA from the source model
        // (frozen, so unchanged) and the checkpoint's adapters.
        let (config_json, mut model) = match &config.lora {
            None => {
                let (config_json, model_config) = crate::load::read_config(out)?;
                let weights = out.join(crate::folder_layout::WEIGHTS);
                let (tensors, step) = checkpoint::read_stamped(&weights)?;
                checkpoint::check_step(&weights, step, &state)?;
                let model = Model::from_tensors(
                    model_config,
                    tensors,
                    &run.device.device()?,
                    run.device.compute_dtype(),
                    out,
                )?;
                (config_json, model)
            }
            Some(lora) => {
                let weights = out.join(crate::lora::ADAPTER_WEIGHTS);
                let (adapters, step) = checkpoint::read_stamped(&weights)?;
                checkpoint::check_step(&weights, step, &state)?;
                let source = &state.source_model;
                let model = crate::load::load_model_lora(source, run.device, lora, adapters)?;
                (crate::load::read_config(source)?.0, model)
            }
        };
        model.set_checkpointing(config.checkpoint_layers);
        let optimizer_path = out.join(checkpoint::OPTIMIZER);
        let (mut tensors, step) = checkpoint::read_stamped(&optimizer_path)?;
        checkpoint::check_step(&optimizer_path, step, &state)?;
        let init_logprobs = match tensors.remove(checkpoint::INIT_LOGPROBS) {
            Some(t) => Some(t.to_vec1::<f32>().ctx("reading init_logprobs")?),
            None => None,
        };
        let mut optimizer = AdamW::new(model.params(), config.adamw.clone())?;
        optimizer
            .load_state(&mut tensors, state.step)
            .map_err(|e| Error::Checkpoint {
                path: optimizer_path.clone(),
                message: e.to_string(),
            })?;
        checkpoint::truncate_metrics(&out.join(checkpoint::METRICS), state.step)?;
        state.config = config.clone();
        Ok(Session {
            model,
            optimizer,
            state,
            config_json,
            init_logprobs,
        })
    }

    /// `last`: the run's final save, which also writes merged LoRA weights when asked.
    fn save(&self, out: &Path, last: bool) -> Result<()> {
        let saved = Saved {
            state: &self.state,
            config_json: &self.config_json,
            optimizer: &self.optimizer,
            init_logprobs: self.init_logprobs.as_deref(),
            merge: last,
        };
        checkpoint::save(out, &self.model, &saved)
    }

    /// One optimizer step over `chosen` samples: forward/backward per micro-batch with the loss
    /// divided by the step's action-token count (token mean over the whole step), gradients
    /// summed, clipped, one AdamW update.
    fn step(
        &mut self,
        samples: &[Sample],
        chosen: &[usize],
        offsets: &[usize],
        config: &TrainConfig,
        lr: f64,
        k: u64,
    ) -> Result<StepMetrics> {
        let device = self.model.device().clone();
        let n_tokens: usize = chosen.iter().map(|&i| samples[i].action_len()).sum();
        let denom = n_tokens.max(1) as f64;
        let params: Vec<candle_core::Var> =
            self.model.params().iter().map(|(_, v)| v.clone()).collect();
        let mut grads: Vec<Option<Tensor>> = vec![None; params.len()];
        let (mut pg_sum, mut kl_sum, mut clip_sum, mut tokens) = (0.0, 0.0, 0.0, 0usize);
        let has_init = self.init_logprobs.is_some();

        for (m, micro) in chosen.chunks(config.batch_size).enumerate() {
            let refs: Vec<&Sample> = micro.iter().map(|&i| &samples[i]).collect();
            let prepared = prepare(&refs, &device)?;
            tokens += refs.iter().map(|s| s.input_ids.len()).sum::<usize>();
            let per_token =
                PerToken::build(samples, micro, offsets, self.init_logprobs.as_deref())?;
            let dropout_seed = SplitMix64::stream(config.seed, &[k, m as u64]);
            let logp = self.model.train_logprobs(&prepared.batch, dropout_seed)?;
            let terms = per_token
                .terms(&logp, &prepared.segment, micro.len(), config, &device)
                .ctx("computing the loss")?;
            pg_sum += scalar(&terms.pg)?;
            clip_sum += scalar(&terms.clipped)?;
            let mut loss = terms.pg;
            if let Some(kl) = terms.kl {
                kl_sum += scalar(&kl)?;
                if config.kl_coef > 0.0 {
                    loss = (loss + (kl * config.kl_coef).ctx("KL penalty")?).ctx("KL penalty")?;
                }
            }
            let loss = (loss / denom).ctx("token mean")?;
            let store = self.model.backward(&loss)?;
            for (acc, var) in grads.iter_mut().zip(&params) {
                if let Some(g) = store.get(var.as_tensor()) {
                    *acc = Some(match acc.take() {
                        Some(a) => (a + g).ctx("accumulating gradients")?,
                        None => g.clone(),
                    });
                }
            }
        }
        let mut grads: Vec<Tensor> = grads
            .into_iter()
            .zip(&params)
            .map(|(g, v)| g.map_or_else(|| v.as_tensor().zeros_like().ctx("zero gradient"), Ok))
            .collect::<Result<_>>()?;
        let grad_norm = clip_grad_norm(&mut grads, config.max_grad_norm)?;
        let updated = grad_norm.is_finite();
        if updated {
            self.optimizer.step(&grads, lr)?;
        }
        let (pg_loss, kl) = (pg_sum / denom, has_init.then_some(kl_sum / denom));
        Ok(StepMetrics {
            step: 0,
            epoch: 0.0,
            lr,
            loss: pg_loss + config.kl_coef * kl.unwrap_or(0.0),
            pg_loss,
            kl,
            clip_frac: clip_sum / denom,
            grad_norm,
            updated,
            samples: chosen.len(),
            action_tokens: n_tokens,
            tokens,
            tokens_per_s: 0.0,
            elapsed_s: 0.0,
        })
    }
}

fn scalar(sum_me: &Tensor) -> Result<f64> {
    sum_me
        .sum_all()
        .and_then(|s| s.to_dtype(DType::F64))
        .and_then(|s| s.to_scalar::<f64>())
        .ctx("reading a metric")
}

/// The per-token inputs of the objective for one micro-batch, in the order of its action tokens.
struct PerToken {
    advantage: Vec<f32>,
    /// log π_old per token; for a step with only a logged total, that total / |a|.
    old: Vec<f32>,
    /// 1 where the token's step uses the sequence ratio (only a total was logged).
    sequence: Vec<f32>,
    /// log π_ref per token (the initial model), when scored.
    reference: Option<Vec<f32>>,
    /// Action tokens per sample of the micro-batch.
    lengths: Vec<f32>,
}

struct Terms {
    /// Per-token clipped surrogate.
    pg: Tensor,
    clipped: Tensor,
    kl: Option<Tensor>,
}

impl PerToken {
    fn build(
        samples: &[Sample],
        micro: &[usize],
        offsets: &[usize],
        init: Option<&[f32]>,
    ) -> Result<Self> {
        let mut p = PerToken {
            advantage: Vec::new(),
            old: Vec::new(),
            sequence: Vec::new(),
            reference: init.map(|_| Vec::new()),
            lengths: Vec::new(),
        };
        for &i in micro {
            let s = &samples[i];
            let n = s.action_len();
            let initial = init.map(|lp| &lp[offsets[i]..offsets[i] + n]);
            p.advantage.extend(std::iter::repeat_n(s.advantage, n));
            p.lengths.push(n as f32);
            match (&s.old_token_logprobs, s.old_logprob, initial) {
                (Some(lps), _, _) => {
                    p.old.extend_from_slice(lps);
                    p.sequence.extend(std::iter::repeat_n(0.0, n));
                }
                (None, Some(total), _) => {
                    p.old.extend(std::iter::repeat_n(total / n as f32, n));
                    p.sequence.extend(std::iter::repeat_n(1.0, n));
                }
                (None, None, Some(lps)) => {
                    p.old.extend_from_slice(lps);
                    p.sequence.extend(std::iter::repeat_n(0.0, n));
                }
                (None, None, None) => {
                    return Err(Error::Sample {
                        index: i,
                        message: "no logged log-prob and the initial model was not scored".into(),
                    });
                }
            }
            if let (Some(r), Some(lps)) = (p.reference.as_mut(), initial) {
                r.extend_from_slice(lps);
            }
        }
        Ok(p)
    }

    fn terms(
        &self,
        logp: &Tensor,
        segment: &[u32],
        n_samples: usize,
        config: &TrainConfig,
        device: &Device,
    ) -> candle_core::Result<Terms> {
        let n = self.advantage.len();
        let vec = |v: &[f32]| Tensor::from_slice(v, n, device);
        let old = vec(&self.old)?;
        let mut policy = logp.clone();
        if self.sequence.iter().any(|&m| m > 0.0) {
            let seg = Tensor::from_slice(segment, n, device)?;
            let mean = objective::segment_mean(
                logp,
                &seg,
                &Tensor::from_slice(&self.lengths, n_samples, device)?,
            )?;
            let m = vec(&self.sequence)?;
            policy = ((logp * (1.0 - &m)?)? + (mean * m)?)?;
        }
        let log_ratio = (policy - old)?;
        let (pg, clipped) =
            objective::clipped_surrogate(&log_ratio, &vec(&self.advantage)?, config.clip_eps)?;
        let kl = match &self.reference {
            Some(r) => Some(objective::low_var_kl(logp, &vec(r)?)?),
            None => None,
        };
        Ok(Terms { pg, clipped, kl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_seeded_shuffle() {
        let p = permutation(10, 7, 0);
        let mut sorted = p.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_eq!(p, permutation(10, 7, 0));
        assert_ne!(p, permutation(10, 7, 1));
    }

    #[test]
    fn schedule_counts_partial_last_steps() {
        // 10 samples, 2 × 2 per step → steps of 4, 4, 2: 3 per epoch.
        let c = TrainConfig {
            batch_size: 2,
            grad_accum: 2,
            epochs: 2,
            ..TrainConfig::default()
        };
        assert_eq!((c.steps_per_epoch(10), c.total_steps(10)), (3, 6));
        assert_eq!(
            TrainConfig {
                steps: Some(5),
                ..c
            }
            .total_steps(10),
            5
        );
    }

    #[test]
    fn a_partly_skipped_run_says_how_many_steps() {
        let summary = Summary {
            start_step: 2,
            steps: 6,
            last: None,
            skipped: 1,
            tokens_per_s: 0.0,
        };
        assert_eq!(
            skipped_note(&summary),
            "1 of steps 3..6 skipped their update (a non-finite gradient norm; `updated` is false on their lines of metrics.jsonl)"
        );
    }

    #[test]
    fn bad_flags_are_named() {
        let e = TrainConfig {
            clip_eps: 1.5,
            ..TrainConfig::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--clip-eps"), "{e}");
        let e = TrainConfig {
            batch_size: 0,
            ..TrainConfig::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--batch-size"), "{e}");
    }

    #[test]
    fn sequence_ratio_spreads_the_logged_total_over_tokens() {
        // One sample, 2 action tokens with logp (−1, −3); logged total −3.0 →
        // log r = mean(−1, −3) − (−3.0 / 2) = −2 + 1.5 = −0.5 for both tokens; A = −1, ε = 0.2:
        // python3: import math; r = math.exp(-0.5); max(1 * r, 1 * max(r, 0.8)) → 0.8 per token,
        // from the clipped branch (r = 0.60653 < 1 − ε).
        let s = Sample {
            input_ids: vec![1, 2, 3],
            action_start: 1,
            advantage: -1.0,
            old_logprob: Some(-3.0),
            old_token_logprobs: None,
        };
        let p = PerToken::build(std::slice::from_ref(&s), &[0], &[0, 2], None).unwrap();
        let logp = Tensor::new(&[-1.0f32, -3.0], &Device::Cpu).unwrap();
        let terms = p
            .terms(&logp, &[0, 0], 1, &TrainConfig::default(), &Device::Cpu)
            .unwrap();
        let pg: Vec<f32> = terms.pg.to_vec1().unwrap();
        assert!(pg.iter().all(|v| (v - 0.8).abs() < 1e-6), "{pg:?}");
        assert_eq!(terms.clipped.to_vec1::<f32>().unwrap(), [1.0, 1.0]);
        assert!(terms.kl.is_none());
    }
}
