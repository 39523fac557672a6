//! SPA's progress estimator (`spec-spa-hisr.md` A3, A4, A8): a small causal transformer over a
//! trajectory's steps that reads out one contribution ĉ_t per step, trained only on
//! (Σ_t ĉ_t − R)² per trajectory.
//!
//! Step t's input is (task text, the observation before the action, the action), never the
//! observation after it: each field is a bag of hashed lower-cased word uni- and bigrams with its
//! own hash salt, log(1 + count). The model: `Linear(F→d)`, one pre-RMSNorm causal self-attention
//! block (so h_t sees steps 1..t only), then a `d → d → 1` SiLU head giving ĉ_t.

use crate::checkpoint::write_atomic;
use crate::error::{Context, Error, Result};
use crate::optim::{clip_grad_norm, AdamW, AdamWConfig};
use crate::random::SplitMix64;
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{ops, RmsNorm};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

pub const WEIGHTS: &str = "model.safetensors";
pub const CONFIG: &str = "config.json";

/// One logged step as the estimator sees it.
#[derive(Clone, Debug, Default)]
pub struct StepText {
    pub task: String,
    /// The observation the action answers (o_{t−1}).
    pub obs: String,
    pub action: String,
}

/// One trajectory: its split key (task, else group), steps in order and outcome R.
#[derive(Clone, Debug)]
pub struct Trajectory {
    pub key: String,
    pub steps: Vec<StepText>,
    pub ret: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressConfig {
    /// Hash buckets per field (the feature width is 3 × buckets).
    pub buckets: usize,
    pub hidden: usize,
    pub rms_norm_eps: f64,
}

/// Training flags.
#[derive(Clone, Debug)]
pub struct ProgressTrain {
    pub epochs: usize,
    pub lr: f64,
    pub seed: u64,
    pub hidden: usize,
    pub buckets: usize,
    /// Trajectories per optimizer step.
    pub batch: usize,
    pub weight_decay: f64,
    pub max_grad_norm: f64,
}

impl Default for ProgressTrain {
    /// A8's recommendation: AdamW lr 1e-3, wd 0.01, batch 16, clip 1.0.
    fn default() -> Self {
        ProgressTrain {
            epochs: 10,
            lr: 1e-3,
            seed: 0,
            hidden: 64,
            buckets: 1 << 12,
            batch: 16,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
        }
    }
}

/// What a run measured; held-out figures are `None` when nothing was held out.
#[derive(Clone, Debug, Serialize)]
pub struct ProgressReport {
    pub train_trajectories: usize,
    pub heldout_trajectories: usize,
    /// How the held-out part was chosen: `task` or, with a single task, `trajectory`.
    pub split_by: String,
    /// Mean training loss of each epoch.
    pub epoch_loss: Vec<f64>,
    pub heldout_mse: Option<f64>,
    /// Predicting the train mean R on every held-out trajectory.
    pub constant_mse: Option<f64>,
    pub pearson: Option<f64>,
    pub seconds: f64,
}

const SALTS: [u64; 3] = [0x7461_736b, 0x6f62_7376, 0x6163_7469];

fn fnv(salt: u64, text: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ salt;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Adds the field's hashed uni- and bigram counts into `out[offset..offset + buckets]`.
fn add_field(out: &mut [f32], offset: usize, buckets: usize, salt: u64, text: &str) {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let mut bump = |key: &str| out[offset + (fnv(salt, key) % buckets as u64) as usize] += 1.0;
    for w in &words {
        bump(w);
    }
    for pair in words.windows(2) {
        bump(&format!("{} {}", pair[0], pair[1]));
    }
}

/// `[T, 3·buckets]` features of a trajectory's steps, log(1 + count).
fn features(steps: &[StepText], buckets: usize, device: &Device) -> Result<Tensor> {
    let width = 3 * buckets;
    let mut data = vec![0f32; steps.len() * width];
    for (t, s) in steps.iter().enumerate() {
        let row = &mut data[t * width..(t + 1) * width];
        for (i, text) in [&s.task, &s.obs, &s.action].into_iter().enumerate() {
            add_field(row, i * buckets, buckets, SALTS[i], text);
        }
        for v in row.iter_mut() {
            *v = v.ln_1p();
        }
    }
    Tensor::from_vec(data, (steps.len(), width), device).ctx("building step features")
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
    let (f, d) = (3 * c.buckets, c.hidden);
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
    /// Fresh weights: uniform ±1/√fan_in for matrices, zero biases, unit norms.
    pub fn new(config: ProgressConfig, seed: u64) -> Result<Self> {
        if !(1..=1 << 20).contains(&config.buckets) || !(1..=4096).contains(&config.hidden) {
            return Err(Error::Params(format!(
                "hidden {} and buckets {} must lie in 1..=4096 and 1..=2^20",
                config.hidden, config.buckets
            )));
        }
        let device = Device::Cpu;
        let mut rng = SplitMix64(seed);
        let mut params = Vec::new();
        for (name, shape) in NAMES.iter().zip(shapes(&config)) {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = if name.ends_with("bias") {
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

    /// ĉ_t for every step, `[T]`.
    fn forward(&self, steps: &[StepText]) -> Result<Tensor> {
        let x = features(steps, self.config.buckets, &self.device)?;
        self.forward_features(&x).ctx("progress forward pass")
    }

    fn forward_features(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let eps = self.config.rms_norm_eps;
        let t = x.dim(0)?;
        let h = x.matmul(self.p(0))?.broadcast_add(self.p(1))?;
        let n = RmsNorm::new(self.p(2).clone(), eps).forward_diff(&h)?;
        let (q, k, v) = (
            n.matmul(self.p(3))?,
            n.matmul(self.p(4))?,
            n.matmul(self.p(5))?,
        );
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (t, t), &self.device)?;
        let scale = 1.0 / (self.config.hidden as f64).sqrt();
        let scores = ((q.matmul(&k.t()?)? * scale)? + mask)?;
        let attn = ops::softmax(&scores, D::Minus1)?.matmul(&v)?;
        let h = (h + attn.matmul(self.p(6))?)?;
        let n = RmsNorm::new(self.p(7).clone(), eps).forward_diff(&h)?;
        let hidden = n.matmul(self.p(8))?.broadcast_add(self.p(9))?.silu()?;
        hidden.matmul(self.p(10))?.squeeze(1)
    }

    /// ĉ_t per step of each trajectory (empty trajectories give empty lists).
    pub fn predict(&self, steps: &[StepText]) -> Result<Vec<f64>> {
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.forward(steps)?;
        let c: Vec<f32> = c.to_vec1().ctx("reading predictions")?;
        Ok(c.into_iter().map(f64::from).collect())
    }

    /// Writes `model.safetensors` and `config.json` into `dir` (created if missing), each through
    /// a temporary file renamed into place.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tensors: HashMap<String, Tensor> = self
            .params
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        let weights = dir.join(WEIGHTS);
        let tmp = dir.join(format!(".{WEIGHTS}.tmp"));
        candle_core::safetensors::save(&tensors, &tmp)
            .ctx(&format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &weights).map_err(|e| Error::io(&weights, e))?;
        let config = dir.join(CONFIG);
        let text = serde_json::to_vec_pretty(&serde_json::json!({
            "model_type": "credit-progress",
            "buckets": self.config.buckets,
            "hidden": self.config.hidden,
            "rms_norm_eps": self.config.rms_norm_eps,
        }))
        .map_err(|e| Error::Params(format!("serializing config.json: {e}")))?;
        write_atomic(&config, |f| {
            f.write_all(&text).map_err(|e| Error::io(&config, e))
        })
    }

    /// Reads a directory written by [`ProgressModel::save`].
    pub fn load(dir: &Path) -> Result<Self> {
        let config_path = dir.join(CONFIG);
        let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
        let config: ProgressConfig = serde_json::from_str(&text).map_err(|e| Error::Json {
            path: config_path.clone(),
            line: 0,
            message: e.to_string(),
        })?;
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

/// Held-out iff the key hashes into the last fifth.
fn held_out(key: &str) -> bool {
    fnv(0x0073_706c_6974, key).is_multiple_of(5)
}

/// Splits by key (task) 80/20, deterministically; with a single key the split is by trajectory
/// position instead. Returns (train, held-out, split_by).
fn split(trajs: &[Trajectory]) -> (Vec<usize>, Vec<usize>, &'static str) {
    let first = trajs.first().map(|t| t.key.as_str());
    let one_key = trajs.iter().all(|t| Some(t.key.as_str()) == first);
    let (mut train, mut held) = (Vec::new(), Vec::new());
    for (i, t) in trajs.iter().enumerate() {
        let out = if one_key {
            held_out(&format!("#{i}"))
        } else {
            held_out(&t.key)
        };
        if out {
            held.push(i)
        } else {
            train.push(i)
        }
    }
    (train, held, if one_key { "trajectory" } else { "task" })
}

/// Trains a fresh estimator on the trajectories with steps, returning it and its report.
pub fn train_progress(
    trajs: &[Trajectory],
    opts: &ProgressTrain,
) -> Result<(ProgressModel, ProgressReport)> {
    if !(opts.lr.is_finite() && opts.lr > 0.0) {
        return Err(Error::Params(format!(
            "`--lr {}`: must be a positive number",
            opts.lr
        )));
    }
    if opts.epochs == 0 || opts.batch == 0 {
        return Err(Error::Params(
            "`--epochs` and the batch size must be positive".into(),
        ));
    }
    let started = Instant::now();
    let usable: Vec<Trajectory> = trajs
        .iter()
        .filter(|t| !t.steps.is_empty() && t.ret.is_finite())
        .cloned()
        .collect();
    let (train, held, split_by) = split(&usable);
    if train.is_empty() {
        return Err(Error::Params(
            "no trajectory to train the progress estimator on (every one has no steps, a non-finite return, or was held out)".into(),
        ));
    }
    let model = ProgressModel::new(
        ProgressConfig {
            buckets: opts.buckets,
            hidden: opts.hidden,
            rms_norm_eps: 1e-6,
        },
        opts.seed,
    )?;
    let x: Vec<Tensor> = usable
        .iter()
        .map(|t| features(&t.steps, opts.buckets, &model.device))
        .collect::<Result<_>>()?;
    let mut optim = AdamW::new(
        &model.params,
        AdamWConfig {
            weight_decay: opts.weight_decay,
            ..AdamWConfig::default()
        },
    )?;
    let mut rng = SplitMix64(opts.seed ^ 0x5eed);
    let mut order = train.clone();
    let mut epoch_loss = Vec::with_capacity(opts.epochs);
    for _ in 0..opts.epochs {
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut total = 0.0;
        for chunk in order.chunks(opts.batch) {
            let mut losses = Vec::with_capacity(chunk.len());
            for &i in chunk {
                let sum = model.forward_features(&x[i]).and_then(|c| c.sum_all());
                let err = sum.and_then(|s| s - usable[i].ret).and_then(|e| e.sqr());
                losses.push(err.ctx("progress loss")?);
            }
            let loss = Tensor::stack(&losses, 0)
                .and_then(|l| l.mean_all())
                .ctx("progress loss")?;
            total +=
                f64::from(loss.to_scalar::<f32>().ctx("reading the loss")?) * chunk.len() as f64;
            let store = loss.backward().ctx("progress backward pass")?;
            let mut grads = model
                .params
                .iter()
                .map(|(_, v)| match store.get(v.as_tensor()) {
                    Some(g) => Ok(g.clone()),
                    None => v.as_tensor().zeros_like().ctx("zero gradient"),
                })
                .collect::<Result<Vec<_>>>()?;
            clip_grad_norm(&mut grads, opts.max_grad_norm)?;
            optim.step(&grads, opts.lr)?;
        }
        epoch_loss.push(total / order.len() as f64);
    }

    let mean_r = train.iter().map(|&i| usable[i].ret).sum::<f64>() / train.len() as f64;
    let mut pred = Vec::with_capacity(held.len());
    for &i in &held {
        let s = model
            .forward_features(&x[i])
            .and_then(|c| c.sum_all())
            .and_then(|s| s.to_scalar::<f32>())
            .ctx("held-out prediction")?;
        pred.push(f64::from(s));
    }
    let truth: Vec<f64> = held.iter().map(|&i| usable[i].ret).collect();
    let mse = |p: &dyn Fn(usize) -> f64| -> Option<f64> {
        (!truth.is_empty()).then(|| {
            truth
                .iter()
                .enumerate()
                .map(|(k, r)| (p(k) - r).powi(2))
                .sum::<f64>()
                / truth.len() as f64
        })
    };
    let report = ProgressReport {
        train_trajectories: train.len(),
        heldout_trajectories: held.len(),
        split_by: split_by.to_string(),
        epoch_loss,
        heldout_mse: mse(&|k| pred[k]),
        constant_mse: mse(&|_| mean_r),
        pearson: pearson(&pred, &truth),
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((model, report))
}

/// Pearson's r; `None` with fewer than two points or a constant side.
pub fn pearson(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len().min(b.len());
    if n < 2 {
        return None;
    }
    let (ma, mb) = (
        a[..n].iter().sum::<f64>() / n as f64,
        b[..n].iter().sum::<f64>() / n as f64,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a[..n].iter().zip(&b[..n]) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma).powi(2);
        sbb += (y - mb).powi(2);
    }
    let r = sab / (saa * sbb).sqrt();
    r.is_finite().then_some(r)
}
