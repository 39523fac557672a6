//! SPA's progress estimator on the LM backbone, as the paper trains it: the policy's own
//! transformer with LoRA adapters and a regression head on the hidden state of the step's last
//! token, ĉ_t = σ_R · (w · h_t + b), trained only on (Σ_t ĉ_t − R)² per trajectory. The same
//! readout at segment ends gives HISR's SPRM, as in [`super::ngram`].
//!
//! Step t is read as one text, `Task: …\nObservation: …\nAction: …` (the observation before the
//! action, never the one after), tokenized with the backbone's tokenizer, keeping its last
//! `max_step_tokens` tokens so that the action always survives truncation. The head starts at
//! zero (R̂ = 0 before training, as the small model) and its output is scaled by σ_R, the RMS of
//! the training returns. Held-out calibration is K-fold by task, as for the small model.
//!
//! Saved as a folder: the PEFT adapter (`adapter_config.json`, `adapter_model.safetensors`, which
//! PEFT loads onto the backbone), `head.safetensors` (`head.weight` `[1, hidden]`, `head.bias`
//! `[1]`) and `config.json` (`model_type: credit-progress-lm`, the backbone's path, σ_R, …).

use super::shared::{
    folds, return_scale, trainable, HeldOutPredictions, PassCounter, Passes, ProgressReport,
    Readout, StepModel, StepText, Trajectory, CONFIG,
};
use crate::arch::Config;
use crate::device::DeviceKind;
use crate::error::{Context, Error, Result};
use crate::load::Tokenizer;
use crate::lora::{self, LoraConfig, ADAPTER_CONFIG, ADAPTER_WEIGHTS};
use crate::memory;
use crate::model::{Model, Pass};
use crate::optim::{clip_grad_norm, gradients, shuffled_epochs, AdamW, AdamWConfig};
use crate::rng::SplitMix64;
use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const MODEL_TYPE: &str = "credit-progress-lm";
pub const HEAD: &str = "head.safetensors";

/// Training flags.
#[derive(Clone, Debug)]
pub struct BackboneTrain {
    /// The Hugging Face model directory (or GGUF file) whose transformer reads the steps.
    pub backbone: PathBuf,
    pub readout: Readout,
    pub lora: LoraConfig,
    pub epochs: usize,
    pub lr: f64,
    /// Trajectories per optimizer step.
    pub batch: usize,
    /// A step's text keeps its last this many tokens.
    pub max_step_tokens: usize,
    pub weight_decay: f64,
    pub max_grad_norm: f64,
    /// Cross-validation folds by task (capped at the number of tasks); 0 or 1 skips calibration.
    pub folds: usize,
    pub seed: u64,
    pub device: DeviceKind,
    pub checkpoint_layers: bool,
}

impl BackboneTrain {
    /// LoRA rank 8 on every projection, AdamW lr 1e-4 (the usual LoRA rate), 5 epochs of 4
    /// trajectories per update, 256 tokens per step, 5 folds.
    pub fn new(backbone: PathBuf) -> Self {
        BackboneTrain {
            backbone,
            readout: Readout::Step,
            lora: LoraConfig::default(),
            epochs: 5,
            lr: 1e-4,
            batch: 4,
            max_step_tokens: 256,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
            folds: 5,
            seed: 0,
            device: DeviceKind::Cpu,
            checkpoint_layers: false,
        }
    }

    /// Checks every flag before any work; messages name the `credit train progress|sprm` flag.
    pub fn check(&self) -> Result<()> {
        self.lora.check()?;
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(Error::Params(format!(
                "`--lr {}`: must be a positive number",
                self.lr
            )));
        }
        for (flag, value) in [
            ("--epochs", self.epochs),
            ("--batch-size", self.batch),
            ("--max-step-tokens", self.max_step_tokens),
        ] {
            if value == 0 {
                return Err(Error::Params(format!("`{flag} 0`: must be at least 1")));
            }
        }
        Ok(())
    }
}

/// `config.json` of a saved estimator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackboneConfig {
    pub model_type: String,
    pub readout: Readout,
    /// Absolute path of the backbone the adapter belongs to.
    pub backbone: PathBuf,
    pub lora: LoraConfig,
    pub max_step_tokens: usize,
    /// σ_R: the head's output unit.
    pub return_scale: f64,
}

/// The estimator: the backbone with its adapters, the head and the tokenizer.
pub struct BackboneProgress {
    config: BackboneConfig,
    model: Model,
    head_w: Var,
    head_b: Var,
    tokenizer: Tokenizer,
}

/// A step as token ids: the last `max` tokens of its text.
fn step_ids(tokenizer: &Tokenizer, step: &StepText, max: usize) -> Result<Vec<u32>> {
    let text = format!(
        "Task: {}\nObservation: {}\nAction: {}",
        step.task, step.obs, step.action
    );
    let mut ids = tokenizer.encode(&text, true)?;
    if ids.len() > max {
        ids.drain(..ids.len() - max);
    }
    Ok(ids)
}

impl BackboneProgress {
    fn fresh(
        base: &HashMap<String, Tensor>,
        model_config: &Config,
        config: BackboneConfig,
        opts: &BackboneTrain,
    ) -> Result<Self> {
        let adapters = lora::init_adapters(model_config, &config.lora, opts.seed)?;
        let device = opts.device.device()?;
        let mut model = Model::from_tensors_lora(
            model_config.clone(),
            base.clone(),
            adapters.into_iter().collect(),
            &config.lora,
            &device,
            opts.device.compute_dtype(),
            &config.backbone,
        )?;
        model.set_checkpointing(opts.checkpoint_layers);
        let h = model_config.hidden_size;
        let zeros = |n: usize| {
            Tensor::zeros((1, n), DType::F32, &device).and_then(|t| Var::from_tensor(&t))
        };
        let head_w = zeros(h).ctx("initialising the head")?;
        let head_b =
            Var::from_tensor(&Tensor::zeros(1, DType::F32, &device).ctx("initialising the head")?)
                .ctx("initialising the head")?;
        Ok(BackboneProgress {
            config,
            model,
            head_w,
            head_b,
            tokenizer: Tokenizer::load(&opts.backbone)?,
        })
    }

    pub fn config(&self) -> &BackboneConfig {
        &self.config
    }

    /// Adapters, then the head: what the optimizer updates.
    fn trained(&self) -> Vec<(String, Var)> {
        let mut out = self.model.params().to_vec();
        out.push(("head.weight".into(), self.head_w.clone()));
        out.push(("head.bias".into(), self.head_b.clone()));
        out
    }

    /// ĉ of every step of `steps` (token ids), `[N]` f32 in units of R.
    fn values(&self, steps: &[&[u32]], pass: Pass) -> Result<Tensor> {
        let device = self.model.device();
        let t = steps.iter().map(|s| s.len()).max().unwrap_or(1).max(1);
        let mut ids = Vec::with_capacity(steps.len() * t);
        let mut last = Vec::with_capacity(steps.len());
        for (b, s) in steps.iter().enumerate() {
            ids.extend_from_slice(s);
            ids.resize((b + 1) * t, 0);
            last.push((b * t + s.len().max(1) - 1) as u32);
        }
        let ids = Tensor::from_vec(ids, (steps.len(), t), device).ctx("packing steps")?;
        let last = Tensor::from_vec(last, steps.len(), device).ctx("packing steps")?;
        let h = self.model.hidden_states(&ids, &last, pass)?;
        h.to_dtype(DType::F32)
            .and_then(|h| h.matmul(&self.head_w.as_tensor().t()?))
            .and_then(|c| c.broadcast_add(self.head_b.as_tensor())?.squeeze(1))
            .and_then(|c| c * self.config.return_scale)
            .ctx("progress head")
    }

    /// ĉ of every step of one trajectory (token ids), scored without a graph.
    fn step_values(&self, ids: &[Vec<u32>]) -> Result<Vec<f64>> {
        let steps: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
        let c: Vec<f32> = self
            .values(&steps, Pass::Score)?
            .to_vec1()
            .ctx("progress forward pass")?;
        Ok(c.into_iter().map(f64::from).collect())
    }

    /// R̂ of each trajectory, `[B]`: Σ of ĉ over its readout steps.
    fn predicted_returns(&self, batch: &[&Example], pass: Pass) -> Result<Tensor> {
        let steps: Vec<&[u32]> = batch
            .iter()
            .flat_map(|e| e.ids.iter().map(Vec::as_slice))
            .collect();
        let n = steps.len();
        let mut readout = vec![0f32; batch.len() * n];
        let mut row = 0;
        for (b, e) in batch.iter().enumerate() {
            for &r in &e.readout {
                if r {
                    readout[b * n + row] = 1.0;
                }
                row += 1;
            }
        }
        let device = self.model.device();
        let readout =
            Tensor::from_vec(readout, (batch.len(), n), device).ctx("packing trajectories")?;
        let c = self.values(&steps, pass)?;
        c.unsqueeze(1)
            .and_then(|c| readout.matmul(&c)?.squeeze(1))
            .ctx("summing readouts")
    }

    /// Writes the folder described in the module documentation (created if missing).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let base = self.config.backbone.display().to_string();
        write_json(
            &dir.join(ADAPTER_CONFIG),
            &self.config.lora.peft_config(&base),
        )?;
        let adapters: HashMap<String, Tensor> = self
            .model
            .params()
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        save_tensors(&dir.join(ADAPTER_WEIGHTS), &adapters)?;
        let head = HashMap::from([
            ("head.weight".to_string(), self.head_w.as_tensor().clone()),
            ("head.bias".to_string(), self.head_b.as_tensor().clone()),
        ]);
        save_tensors(&dir.join(HEAD), &head)?;
        write_json(&dir.join(CONFIG), &self.config)
    }

    /// Reads a folder written by [`BackboneProgress::save`]; the backbone is read from the path
    /// its config records, onto `device`.
    pub fn load(dir: &Path, device: DeviceKind) -> Result<Self> {
        let path = dir.join(CONFIG);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let config: BackboneConfig = serde_json::from_str(&text).map_err(|e| Error::Json {
            path: path.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        let read = |name: &str| {
            let p = dir.join(name);
            candle_core::safetensors::load(&p, &candle_core::Device::Cpu).map_err(|e| {
                Error::Model {
                    path: p.clone(),
                    message: e.to_string(),
                }
            })
        };
        let adapters = read(ADAPTER_WEIGHTS)?;
        let mut head = read(HEAD)?;
        let model = crate::load::load_model_lora(&config.backbone, device, &config.lora, adapters)
            .map_err(|e| Error::Model {
                path: dir.to_path_buf(),
                message: format!("loading its backbone {}: {e}", config.backbone.display()),
            })?;
        let device = model.device().clone();
        let h = model.config().hidden_size;
        let mut var = |name: &str, shape: &[usize]| -> Result<Var> {
            let t = head.remove(name).ok_or_else(|| Error::Model {
                path: dir.join(HEAD),
                message: format!("tensor `{name}` is missing"),
            })?;
            if t.dims() != shape {
                return Err(Error::Model {
                    path: dir.join(HEAD),
                    message: format!("`{name}` has shape {:?}, expected {shape:?}", t.dims()),
                });
            }
            let t = t
                .to_dtype(DType::F32)
                .and_then(|t| t.to_device(&device))
                .ctx("loading the head")?;
            Var::from_tensor(&t).ctx("loading the head")
        };
        let (head_w, head_b) = (var("head.weight", &[1, h])?, var("head.bias", &[1])?);
        let tokenizer = Tokenizer::load(&config.backbone)?;
        Ok(BackboneProgress {
            config,
            model,
            head_w,
            head_b,
            tokenizer,
        })
    }
}

impl StepModel for BackboneProgress {
    fn readout(&self) -> Readout {
        self.config.readout
    }

    fn save(&self, dir: &Path) -> Result<()> {
        BackboneProgress::save(self, dir)
    }

    fn predict(&self, steps: &[StepText]) -> Result<Vec<f64>> {
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        let ids = steps
            .iter()
            .map(|s| step_ids(&self.tokenizer, s, self.config.max_step_tokens))
            .collect::<Result<Vec<_>>>()?;
        self.step_values(&ids)
    }
}

fn save_tensors(path: &Path, tensors: &HashMap<String, Tensor>) -> Result<()> {
    credit_output::write_file_at(path, |tmp| {
        candle_core::safetensors::save(tensors, tmp).ctx(&format!("writing {}", path.display()))
    })
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::Params(format!("serializing {}: {e}", path.display())))?;
    Ok(credit_output::write_file(path, |f| f.write_all(&text))?)
}

/// One trajectory as token ids.
struct Example {
    ids: Vec<Vec<u32>>,
    readout: Vec<bool>,
    ret: f64,
}

/// Trains a fresh estimator on `train` (indices into `examples`); returns it and the epoch losses.
fn fit(
    examples: &[Example],
    train: &[usize],
    base: &HashMap<String, Tensor>,
    model_config: &Config,
    config: &BackboneConfig,
    opts: &BackboneTrain,
    trained_on: &mut dyn FnMut(usize),
) -> Result<(BackboneProgress, Vec<f64>)> {
    let est = BackboneProgress::fresh(base, model_config, config.clone(), opts)?;
    let trained = est.trained();
    let mut optim = AdamW::new(
        &trained,
        AdamWConfig {
            weight_decay: opts.weight_decay,
            ..AdamWConfig::default()
        },
    )?;
    let device = est.model.device().clone();
    let mut batches = 0;
    let epoch_loss = shuffled_epochs(train, opts.seed, opts.epochs, opts.batch, |chunk, _| {
        let batch: Vec<&Example> = chunk.iter().map(|&i| &examples[i]).collect();
        let target: Vec<f32> = batch.iter().map(|e| e.ret as f32).collect();
        let target = Tensor::from_vec(target, batch.len(), &device).ctx("targets")?;
        let pass = Pass::Train {
            dropout_seed: SplitMix64::stream(opts.seed, &[batches]),
        };
        batches += 1;
        let loss = (est.predicted_returns(&batch, pass)? - target)
            .and_then(|d| d.sqr()?.mean_all())
            .ctx("progress loss")?;
        let value = f64::from(loss.to_scalar::<f32>().ctx("reading the loss")?);
        let store = est.model.backward(&loss)?;
        let mut grads = gradients(&store, &trained)?;
        clip_grad_norm(&mut grads, opts.max_grad_norm)?;
        optim.step(&grads, opts.lr)?;
        trained_on(chunk.len());
        Ok(value)
    })?;
    Ok((est, epoch_loss))
}

/// Cross-validates by task (when `opts.folds` > 1 and there are two folds or more), then trains
/// the estimator to keep on every trajectory that has a readout and a finite return. `progress`
/// is told the [`Passes`] made after each update.
pub fn train_backbone_progress(
    trajs: &[Trajectory],
    opts: &BackboneTrain,
    progress: &mut dyn FnMut(Passes),
) -> Result<(BackboneProgress, ProgressReport)> {
    opts.check()?;
    let started = Instant::now();
    let usable = trainable(trajs);
    if usable.is_empty() {
        return Err(Error::Params(
            "no trajectory to train on: each one has no readout step or a non-finite return".into(),
        ));
    }
    let returns: Vec<f64> = usable.iter().map(|t| t.ret).collect();
    let backbone = opts
        .backbone
        .canonicalize()
        .map_err(|e| Error::io(&opts.backbone, e))?;
    let config = BackboneConfig {
        model_type: MODEL_TYPE.into(),
        readout: opts.readout,
        backbone: backbone.clone(),
        lora: opts.lora.clone(),
        max_step_tokens: opts.max_step_tokens,
        return_scale: return_scale(&usable),
    };
    let (_, model_config) = crate::load::read_config(&backbone)?;
    let base = crate::load::read_weights(&backbone)?;
    let tokenizer = Tokenizer::load(&backbone)?;
    let examples = usable
        .iter()
        .map(|t| {
            let ids = t
                .steps
                .iter()
                .map(|s| step_ids(&tokenizer, s, opts.max_step_tokens))
                .collect::<Result<Vec<_>>>()?;
            Ok(Example {
                ids,
                readout: t.steps.iter().map(|s| s.readout).collect(),
                ret: t.ret,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let (opts, checkpointing) = &checkpointing(opts, &model_config, &examples);
    let keys: Vec<&str> = usable.iter().map(|t| t.key.as_str()).collect();
    let (fold_of, k, split_by) = folds(&keys, opts.folds);
    let mut passes = PassCounter::new(examples.len(), k, opts.epochs, progress);
    let mut fit_on = |train: &[usize]| {
        let trained_on = &mut |n| passes.add(n);
        fit(
            &examples,
            train,
            &base,
            &model_config,
            &config,
            opts,
            trained_on,
        )
    };
    let heldout = if k >= 2 {
        let mut predictions = HeldOutPredictions::new(examples.len());
        for fold in 0..k {
            let (held, train): (Vec<usize>, Vec<usize>) =
                (0..examples.len()).partition(|&i| fold_of[i] == fold);
            let (est, _) = fit_on(&train)?;
            let mean = train.iter().map(|&i| returns[i]).sum::<f64>() / train.len() as f64;
            for &i in &held {
                let values = est.step_values(&examples[i].ids)?;
                predictions.record(i, &usable[i].steps, &values, mean);
            }
        }
        Some(predictions.calibration(&returns, k, split_by, opts.readout))
    } else {
        None
    };
    let all: Vec<usize> = (0..examples.len()).collect();
    let (est, epoch_loss) = fit_on(&all)?;
    let report = ProgressReport {
        readout: opts.readout,
        trajectories: examples.len(),
        epoch_loss,
        heldout,
        seconds: started.elapsed().as_secs_f64(),
        checkpointing: checkpointing.clone(),
    };
    Ok((est, report))
}

/// `opts` with checkpointing turned on when the activations of the largest update (the `batch`
/// trajectories with the most steps, each step a sequence as long as the longest) would take
/// more than [`memory::activation_budget`]; with the note that says so.
fn checkpointing(
    opts: &BackboneTrain,
    model_config: &Config,
    examples: &[Example],
) -> (BackboneTrain, Option<String>) {
    let mut opts = opts.clone();
    if opts.checkpoint_layers {
        return (opts, None);
    }
    let mut steps: Vec<usize> = examples.iter().map(|e| e.ids.len()).collect();
    steps.sort_unstable_by(|a, b| b.cmp(a));
    let sequences: usize = steps.iter().take(opts.batch).sum();
    let tokens = examples
        .iter()
        .flat_map(|e| e.ids.iter().map(Vec::len))
        .max()
        .unwrap_or(0);
    let Some((needed, budget)) = memory::over_budget(model_config, sequences, tokens, opts.device)
    else {
        return (opts, None);
    };
    opts.checkpoint_layers = true;
    (
        opts,
        Some(memory::checkpointing_note(
            needed,
            budget,
            "--max-step-tokens",
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn examples(trajectories: usize, steps: usize, tokens: usize) -> Vec<Example> {
        (0..trajectories)
            .map(|_| Example {
                ids: vec![vec![1; tokens]; steps],
                readout: vec![true; steps],
                ret: 1.0,
            })
            .collect()
    }

    #[test]
    fn the_backbone_checkpoints_when_an_update_would_not_fit() {
        let config = Config::smollm2_135m();
        let opts = BackboneTrain::new(PathBuf::from("model.gguf"));
        // An update: the 4 longest trajectories' steps, as long as the longest step.
        let big = examples(6, 20, 256);
        let needed = memory::activation_bytes(&config, 4 * 20, 256, DeviceKind::Cpu);
        let (checked, note) = checkpointing(&opts, &config, &big);
        assert_eq!(
            checked.checkpoint_layers,
            needed > memory::activation_budget(DeviceKind::Cpu)
        );
        assert!(
            needed > 64 << 30,
            "{needed}: more than any machine here has"
        );
        assert!(checked.checkpoint_layers && note.unwrap().contains("--max-step-tokens"));
        // Two 1-step trajectories of 8 tokens: kept.
        let (kept, note) = checkpointing(&opts, &config, &examples(2, 1, 8));
        assert!(!kept.checkpoint_layers && note.is_none());
        // Asked for: on, and nothing to say.
        let asked = BackboneTrain {
            checkpoint_layers: true,
            ..opts
        };
        let (on, note) = checkpointing(&asked, &config, &examples(2, 1, 8));
        assert!(on.checkpoint_layers && note.is_none());
    }
}
