//! The small signal model: a one-block causal transformer over hashed word n-grams of each step,
//! trained from scratch in seconds on the CPU.
//!
//! Step t's input is (task text, the observation before the action, the action), never the
//! observation after it: each field is a bag of hashed lower-cased word uni- and bigrams with its
//! own hash salt, log(1 + count), plus the position features 1[t = 0] and t / n_max (A8). The
//! model: `Linear(F→d)`, one pre-RMSNorm causal self-attention block (h_t sees steps 1..t only),
//! then a `d → d → 1` SiLU head. The head's output is scaled by σ_R, the RMS of the training
//! returns, so one learning rate serves returns of 0.5 and of 10; it starts at zero, so training
//! starts from R̂ = 0 rather than from a random sum that grows with the trajectory's length.
//!
//! Trajectories are few and correlated within a task, so training uses input dropout and the
//! held-out calibration is K-fold by task (every task held out once, pooled), not one split.

use super::shared::{
    folds, return_scale, salted_hash, trainable, HeldOutPredictions, PassCounter, Passes,
    ProgressReport, Readout, StepModel, StepText, Trajectory, CONFIG,
};
use crate::error::{Context, Error, Result};
use crate::optim::{clip_grad_norm, gradients, shuffled_epochs, AdamW, AdamWConfig};
use crate::rng::SplitMix64;
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{ops, RmsNorm};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

pub const WEIGHTS: &str = "model.safetensors";
const MODEL_TYPE: &str = "credit-progress";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressConfig {
    pub readout: Readout,
    /// Hash buckets per text field.
    pub buckets: usize,
    pub hidden: usize,
    /// The longest training trajectory, for the position feature t / n_max.
    pub max_steps: usize,
    /// σ_R: the head's output unit.
    pub return_scale: f64,
    pub rms_norm_eps: f64,
}

impl ProgressConfig {
    /// Three hashed text fields, then the position features.
    fn width(&self) -> usize {
        self.text_width() + POSITION_FEATURES
    }

    fn text_width(&self) -> usize {
        3 * self.buckets
    }
}

/// Training flags.
#[derive(Clone, Debug)]
pub struct ProgressTrain {
    pub readout: Readout,
    pub epochs: usize,
    pub lr: f64,
    pub seed: u64,
    pub hidden: usize,
    pub buckets: usize,
    /// Trajectories per optimizer step.
    pub batch: usize,
    pub weight_decay: f64,
    pub max_grad_norm: f64,
    /// Share of input features zeroed per training step.
    pub dropout: f64,
    /// Cross-validation folds by task (capped at the number of tasks); 0 or 1 skips calibration.
    pub folds: usize,
}

impl Default for ProgressTrain {
    /// A8's recommendation (AdamW lr 1e-3, wd 0.01, grad-clip 1.0) with a batch of 4, not 16:
    /// logs of a few dozen trajectories would otherwise give one update per epoch.
    fn default() -> Self {
        ProgressTrain {
            readout: Readout::Step,
            epochs: 20,
            lr: 1e-3,
            seed: 0,
            hidden: 64,
            buckets: 1 << 12,
            batch: 4,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
            dropout: 0.5,
            folds: 5,
        }
    }
}

/// 1[t = 0] and t / n_max, after the text features.
const POSITION_FEATURES: usize = 2;

const SALTS: [u64; 3] = [0x7461_736b, 0x6f62_7376, 0x6163_7469];

/// A step's non-zero features as (index, value), sorted by index.
type Sparse = Vec<(u32, f32)>;

/// Hashed uni- and bigram counts of each field, log(1 + count), then the position features.
fn step_features(step: &StepText, t: usize, config: &ProgressConfig) -> Sparse {
    let mut counts: BTreeMap<u32, f32> = BTreeMap::new();
    for (i, text) in [&step.task, &step.obs, &step.action]
        .into_iter()
        .enumerate()
    {
        let lower = text.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let mut bump = |key: &str| {
            let bucket = (salted_hash(SALTS[i], key) % config.buckets as u64) as usize;
            *counts
                .entry((i * config.buckets + bucket) as u32)
                .or_default() += 1.0;
        };
        for w in &words {
            bump(w);
        }
        for pair in words.windows(2) {
            bump(&format!("{} {}", pair[0], pair[1]));
        }
    }
    let mut out: Sparse = counts.into_iter().map(|(k, c)| (k, c.ln_1p())).collect();
    let position = config.text_width() as u32;
    if t == 0 {
        out.push((position, 1.0));
    }
    out.push((position + 1, t as f32 / config.max_steps.max(1) as f32));
    out
}

fn trajectory_features(steps: &[StepText], config: &ProgressConfig) -> Vec<Sparse> {
    steps
        .iter()
        .enumerate()
        .map(|(t, s)| step_features(s, t, config))
        .collect()
}

/// Several trajectories as one forward pass: their steps stacked, attention kept within each
/// trajectory and causal, and a `[B, N]` matrix summing each trajectory's readouts. Features stay
/// sparse: step n's embedding is Σ_k value_k · E[index_k], a gather and an `index_add`, so a pass
/// costs the non-zero features, not N × the vocabulary of hash buckets.
struct Packed {
    /// Per non-zero feature: its bucket, its value (`[nnz, 1]`) and its packed step.
    index: Tensor,
    value: Tensor,
    step: Tensor,
    steps: usize,
    mask: Tensor,
    readout: Tensor,
}

impl Packed {
    /// `dropout` = (share, stream): word features dropped at random and the rest scaled by
    /// 1/(1 − share); the position features are never dropped.
    fn new(
        trajs: &[(&[Sparse], &[StepText])],
        dropout: Option<(f64, &mut SplitMix64)>,
        text_width: usize,
        device: &Device,
    ) -> Result<Self> {
        let n: usize = trajs.iter().map(|(f, _)| f.len()).sum();
        let (mut index, mut value, mut step) = (Vec::new(), Vec::new(), Vec::new());
        let mut mask = vec![f32::NEG_INFINITY; n * n];
        let mut readout = vec![0f32; trajs.len() * n];
        let (share, mut rng) = match dropout {
            Some((p, rng)) if p > 0.0 => (p, Some(rng)),
            _ => (0.0, None),
        };
        let keep = (1.0 / (1.0 - share)) as f32;
        let mut start = 0;
        for (b, (features, steps)) in trajs.iter().enumerate() {
            for (t, (f, s)) in features.iter().zip(steps.iter()).enumerate() {
                let row = start + t;
                for &(k, v) in f {
                    let is_word = (k as usize) < text_width;
                    if let (true, Some(rng)) = (is_word, rng.as_mut()) {
                        if rng.next_unit() < share {
                            continue;
                        }
                    }
                    index.push(k);
                    value.push(if is_word { v * keep } else { v });
                    step.push(row as u32);
                }
                for col in start..=row {
                    mask[row * n + col] = 0.0;
                }
                if s.readout {
                    readout[b * n + row] = 1.0;
                }
            }
            start += features.len();
        }
        let nnz = index.len();
        let ctx = "packing trajectories";
        Ok(Packed {
            index: Tensor::from_vec(index, nnz, device).ctx(ctx)?,
            value: Tensor::from_vec(value, (nnz, 1), device).ctx(ctx)?,
            step: Tensor::from_vec(step, nnz, device).ctx(ctx)?,
            steps: n,
            mask: Tensor::from_vec(mask, (n, n), device).ctx(ctx)?,
            readout: Tensor::from_vec(readout, (trajs.len(), n), device).ctx(ctx)?,
        })
    }
}

const NAMES: [&str; 11] = [
    "embed.weight",
    "embed.bias",
    "attn_norm.weight",
    "attn.q.weight",
    "attn.k.weight",
    "attn.v.weight",
    "attn.o.weight",
    "head_norm.weight",
    "head.0.weight",
    "head.0.bias",
    "head.1.weight",
];

fn shapes(c: &ProgressConfig) -> Vec<Vec<usize>> {
    let (f, d) = (c.width(), c.hidden);
    vec![
        vec![f, d],
        vec![d],
        vec![d],
        vec![d, d],
        vec![d, d],
        vec![d, d],
        vec![d, d],
        vec![d],
        vec![d, d],
        vec![d],
        vec![d, 1],
    ]
}

/// The estimator: f32 parameters on the CPU.
pub struct ProgressModel {
    config: ProgressConfig,
    params: Vec<(String, Var)>,
    device: Device,
}

impl ProgressModel {
    /// Fresh weights: uniform ±1/√fan_in for matrices, zero biases and output, unit norms.
    pub fn new(config: ProgressConfig, seed: u64) -> Result<Self> {
        check_width(config.hidden, config.buckets)?;
        if !(config.return_scale.is_finite() && config.return_scale > 0.0) {
            return Err(Error::Params(format!(
                "return_scale {} must be a positive number",
                config.return_scale
            )));
        }
        let device = Device::Cpu;
        let mut rng = SplitMix64(seed);
        let mut params = Vec::new();
        for (name, shape) in NAMES.iter().zip(shapes(&config)) {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = if name.ends_with("bias") || *name == "head.1.weight" {
                vec![0.0; n]
            } else if name.ends_with("norm.weight") {
                vec![1.0; n]
            } else {
                let scale = 1.0 / (shape[0] as f32).sqrt();
                (0..n).map(|_| rng.next_signed() * scale).collect()
            };
            let t = Tensor::from_vec(values, shape, &device).ctx("initialising weights")?;
            params.push((
                name.to_string(),
                Var::from_tensor(&t).ctx("making a variable")?,
            ));
        }
        Ok(ProgressModel {
            config,
            params,
            device,
        })
    }

    pub fn config(&self) -> &ProgressConfig {
        &self.config
    }

    fn p(&self, i: usize) -> &Tensor {
        self.params[i].1.as_tensor()
    }

    /// The readout value of every packed step, `[N]`, in units of R.
    fn forward(&self, packed: &Packed) -> candle_core::Result<Tensor> {
        let eps = self.config.rms_norm_eps;
        let rows = self
            .p(0)
            .index_select(&packed.index, 0)?
            .broadcast_mul(&packed.value)?;
        let h = Tensor::zeros((packed.steps, self.config.hidden), DType::F32, &self.device)?
            .index_add(&packed.step, &rows, 0)?
            .broadcast_add(self.p(1))?;
        let n = RmsNorm::new(self.p(2).clone(), eps).forward_diff(&h)?;
        let (q, k, v) = (
            n.matmul(self.p(3))?,
            n.matmul(self.p(4))?,
            n.matmul(self.p(5))?,
        );
        let scale = 1.0 / (self.config.hidden as f64).sqrt();
        let scores = ((q.matmul(&k.t()?)? * scale)? + &packed.mask)?;
        let attn = ops::softmax(&scores, D::Minus1)?.matmul(&v)?;
        let h = (h + attn.matmul(self.p(6))?)?;
        let n = RmsNorm::new(self.p(7).clone(), eps).forward_diff(&h)?;
        let hidden = n.matmul(self.p(8))?.broadcast_add(self.p(9))?.silu()?;
        hidden.matmul(self.p(10))?.squeeze(1)? * self.config.return_scale
    }

    /// R̂ per packed trajectory, `[B]`.
    fn predicted_returns(&self, packed: &Packed) -> candle_core::Result<Tensor> {
        let c = self.forward(packed)?;
        packed.readout.matmul(&c.unsqueeze(1)?)?.squeeze(1)
    }

    /// The model's value after every step of a trajectory (ĉ_t; for a segment-end model, r̂_i
    /// where step t ends segment i and meaningless elsewhere). Empty in, empty out.
    pub fn predict(&self, steps: &[StepText]) -> Result<Vec<f64>> {
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        self.step_values(&trajectory_features(steps, &self.config), steps)
    }

    /// [`ProgressModel::predict`] of a trajectory whose features are worked out already.
    fn step_values(&self, features: &[Sparse], steps: &[StepText]) -> Result<Vec<f64>> {
        let packed = Packed::new(
            &[(features, steps)],
            None,
            self.config.text_width(),
            &self.device,
        )?;
        let c: Vec<f32> = self
            .forward(&packed)
            .and_then(|c| c.to_vec1())
            .ctx("progress forward pass")?;
        Ok(c.into_iter().map(f64::from).collect())
    }

    /// Writes `model.safetensors` and `config.json` into `dir` (created if missing), each whole
    /// or not at all.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tensors: HashMap<String, Tensor> = self
            .params
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        let weights = dir.join(WEIGHTS);
        credit_output::write_file_at(&weights, |tmp| {
            candle_core::safetensors::save(&tensors, tmp)
                .ctx(&format!("writing {}", weights.display()))
        })?;
        let mut config = serde_json::to_value(&self.config)
            .map_err(|e| Error::Params(format!("serializing config.json: {e}")))?;
        config["model_type"] = MODEL_TYPE.into();
        let text = serde_json::to_vec_pretty(&config)
            .map_err(|e| Error::Params(format!("serializing config.json: {e}")))?;
        Ok(credit_output::write_file(&dir.join(CONFIG), |f| {
            f.write_all(&text)
        })?)
    }

    /// Reads a directory written by [`ProgressModel::save`].
    pub fn load(dir: &Path) -> Result<Self> {
        let config_path = dir.join(CONFIG);
        let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
        let json_error = |message: String| Error::Json {
            path: config_path.clone(),
            line: 0,
            message,
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| json_error(e.to_string()))?;
        if value.get("model_type").and_then(|v| v.as_str()) != Some(MODEL_TYPE) {
            return Err(Error::Model {
                path: config_path.clone(),
                message: format!(
                    "not a `credit train progress`/`sprm` model (model_type is not \"{MODEL_TYPE}\")"
                ),
            });
        }
        let config: ProgressConfig =
            serde_json::from_value(value).map_err(|e| json_error(e.to_string()))?;
        let mut model = ProgressModel::new(config, 0)?;
        let weights = dir.join(WEIGHTS);
        let mut tensors =
            candle_core::safetensors::load(&weights, &Device::Cpu).map_err(|e| Error::Model {
                path: weights.clone(),
                message: e.to_string(),
            })?;
        for ((name, var), shape) in model.params.iter_mut().zip(shapes(&model.config)) {
            let t = tensors.remove(name.as_str()).ok_or_else(|| Error::Model {
                path: weights.clone(),
                message: format!("tensor `{name}` is missing"),
            })?;
            if t.dims() != shape.as_slice() {
                return Err(Error::Model {
                    path: weights.clone(),
                    message: format!(
                        "tensor `{name}` has shape {:?}, config.json implies {shape:?}",
                        t.dims()
                    ),
                });
            }
            let t = t.to_dtype(DType::F32).ctx("converting weights")?;
            *var = Var::from_tensor(&t).ctx("making a variable")?;
        }
        Ok(model)
    }
}

impl StepModel for ProgressModel {
    fn readout(&self) -> Readout {
        self.config.readout
    }

    fn save(&self, dir: &Path) -> Result<()> {
        ProgressModel::save(self, dir)
    }

    fn predict(&self, steps: &[StepText]) -> Result<Vec<f64>> {
        ProgressModel::predict(self, steps)
    }
}

/// One trajectory ready to train on.
struct Example<'a> {
    features: Vec<Sparse>,
    traj: &'a Trajectory,
}

/// Trains a fresh model on `train` (indices into `examples`); returns it and the epoch losses.
fn fit(
    examples: &[Example],
    train: &[usize],
    config: &ProgressConfig,
    opts: &ProgressTrain,
    trained_on: &mut dyn FnMut(usize),
) -> Result<(ProgressModel, Vec<f64>)> {
    let model = ProgressModel::new(config.clone(), opts.seed)?;
    let mut optim = AdamW::new(
        &model.params,
        AdamWConfig {
            weight_decay: opts.weight_decay,
            ..AdamWConfig::default()
        },
    )?;
    let epoch_loss = shuffled_epochs(train, opts.seed, opts.epochs, opts.batch, |chunk, rng| {
        let items: Vec<(&[Sparse], &[StepText])> = chunk
            .iter()
            .map(|&i| {
                (
                    examples[i].features.as_slice(),
                    examples[i].traj.steps.as_slice(),
                )
            })
            .collect();
        let packed = Packed::new(
            &items,
            Some((opts.dropout, rng)),
            config.text_width(),
            &model.device,
        )?;
        let target: Vec<f32> = chunk.iter().map(|&i| examples[i].traj.ret as f32).collect();
        let target = Tensor::from_vec(target, chunk.len(), &model.device).ctx("targets")?;
        let loss = model
            .predicted_returns(&packed)
            .and_then(|r| (r - target)?.sqr()?.mean_all())
            .ctx("progress loss")?;
        let value = f64::from(loss.to_scalar::<f32>().ctx("reading the loss")?);
        let store = loss.backward().ctx("progress backward pass")?;
        let mut grads = gradients(&store, &model.params)?;
        clip_grad_norm(&mut grads, opts.max_grad_norm)?;
        optim.step(&grads, opts.lr)?;
        trained_on(chunk.len());
        Ok(value)
    })?;
    Ok((model, epoch_loss))
}

impl ProgressTrain {
    /// Checks every flag before any work; messages name the `credit train progress|sprm` flag
    /// and its valid range (`--buckets 0` would divide by zero when hashing).
    pub fn check(&self) -> Result<()> {
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(Error::Params(format!(
                "`--lr {}`: must be a positive number",
                self.lr
            )));
        }
        for (flag, value) in [("--epochs", self.epochs), ("--batch-size", self.batch)] {
            if value == 0 {
                return Err(Error::Params(format!("`{flag} 0`: must be at least 1")));
            }
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::Params(format!(
                "`--dropout {}`: must lie in [0, 1)",
                self.dropout
            )));
        }
        check_width(self.hidden, self.buckets)
    }
}

/// The widest step encoder (`--hidden`).
const MAX_HIDDEN: usize = 4096;
/// The most hash buckets per text field (`--buckets`): the embedding has 3 × buckets rows, 12 MB
/// per hidden unit at 2^20.
const MAX_BUCKETS: usize = 1 << 20;

/// `--hidden` and `--buckets` within 1..=[`MAX_HIDDEN`] and 1..=[`MAX_BUCKETS`].
fn check_width(hidden: usize, buckets: usize) -> Result<()> {
    if !(1..=MAX_HIDDEN).contains(&hidden) {
        return Err(Error::Params(format!(
            "`--hidden {hidden}`: must lie in 1..={MAX_HIDDEN}"
        )));
    }
    if !(1..=MAX_BUCKETS).contains(&buckets) {
        return Err(Error::Params(format!(
            "`--buckets {buckets}`: must lie in 1..={MAX_BUCKETS} (2^20)"
        )));
    }
    Ok(())
}

/// Cross-validates (when `opts.folds` > 1 and there are at least two folds), then trains the
/// model to keep on every trajectory that has steps, a readout and a finite return. `progress`
/// is told the [`Passes`] made after each update.
pub fn train_progress(
    trajs: &[Trajectory],
    opts: &ProgressTrain,
    progress: &mut dyn FnMut(Passes),
) -> Result<(ProgressModel, ProgressReport)> {
    opts.check()?;
    let started = Instant::now();
    let usable = trainable(trajs);
    if usable.is_empty() {
        return Err(Error::Params(format!(
            "no trajectory to train on: each one has no steps{}, or a non-finite return",
            match opts.readout {
                Readout::Step => "",
                Readout::SegmentEnd => " or no segment end",
            }
        )));
    }
    let returns: Vec<f64> = usable.iter().map(|t| t.ret).collect();
    let config = ProgressConfig {
        readout: opts.readout,
        buckets: opts.buckets,
        hidden: opts.hidden,
        max_steps: usable.iter().map(|t| t.steps.len()).max().unwrap_or(1),
        return_scale: return_scale(&usable),
        rms_norm_eps: 1e-6,
    };
    let examples: Vec<Example> = usable
        .iter()
        .map(|t| Example {
            features: trajectory_features(&t.steps, &config),
            traj: t,
        })
        .collect();
    let keys: Vec<&str> = usable.iter().map(|t| t.key.as_str()).collect();
    let (fold_of, k, split_by) = folds(&keys, opts.folds);
    let mut passes = PassCounter::new(examples.len(), k, opts.epochs, progress);
    let heldout = if k >= 2 {
        let mut predictions = HeldOutPredictions::new(examples.len());
        for fold in 0..k {
            let (held, train): (Vec<usize>, Vec<usize>) =
                (0..examples.len()).partition(|&i| fold_of[i] == fold);
            let (model, _) = fit(&examples, &train, &config, opts, &mut |n| passes.add(n))?;
            let mean = train.iter().map(|&i| returns[i]).sum::<f64>() / train.len() as f64;
            for &i in &held {
                let Example { features, traj } = &examples[i];
                let values = model.step_values(features, &traj.steps)?;
                predictions.record(i, &traj.steps, &values, mean);
            }
        }
        Some(predictions.calibration(&returns, k, split_by, opts.readout))
    } else {
        None
    };
    let all: Vec<usize> = (0..examples.len()).collect();
    let (model, epoch_loss) = fit(&examples, &all, &config, opts, &mut |n| passes.add(n))?;
    let report = ProgressReport {
        readout: opts.readout,
        trajectories: examples.len(),
        epoch_loss,
        heldout,
        seconds: started.elapsed().as_secs_f64(),
        checkpointing: None,
    };
    Ok((model, report))
}
