//! AdamW (Loshchilov & Hutter 2019, decoupled weight decay, as `torch.optim.AdamW`), global
//! gradient-norm clipping (`torch.nn.utils.clip_grad_norm_`) and linear learning-rate warm-up.
//!
//! candle-nn has an AdamW, but its moments are private; this one exposes them by parameter name
//! so a checkpoint can resume exactly.
//!
//! θ ← θ·(1 − lr·λ);  m ← β₁m + (1 − β₁)g;  v ← β₂v + (1 − β₂)g²
//! θ ← θ − lr · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)

use crate::error::{Context, Error, Result};
use crate::rng::SplitMix64;
use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    /// verl's actor optimizer: betas (0.9, 0.999), ε 1e-8, weight decay 0.01.
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

pub struct AdamW {
    params: Vec<(String, Var)>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    /// Updates taken so far (the bias-correction exponent t).
    pub t: u64,
    config: AdamWConfig,
}

impl AdamW {
    pub fn new(params: &[(String, Var)], config: AdamWConfig) -> Result<Self> {
        let zeros = |v: &Var| v.as_tensor().zeros_like().ctx("allocating optimizer state");
        let m = params
            .iter()
            .map(|(_, v)| zeros(v))
            .collect::<Result<Vec<_>>>()?;
        let v = params
            .iter()
            .map(|(_, v)| zeros(v))
            .collect::<Result<Vec<_>>>()?;
        Ok(AdamW {
            params: params.to_vec(),
            m,
            v,
            t: 0,
            config,
        })
    }

    /// One update with `grads[i]` for parameter `i` (already accumulated and clipped).
    pub fn step(&mut self, grads: &[Tensor], lr: f64) -> Result<()> {
        let kernel = if self
            .params
            .first()
            .is_some_and(|(_, v)| v.device().is_cpu())
        {
            Kernel::Fused
        } else {
            Kernel::Tensor
        };
        self.step_with(grads, lr, kernel)
    }

    fn step_with(&mut self, grads: &[Tensor], lr: f64, kernel: Kernel) -> Result<()> {
        self.t += 1;
        let exponent = i32::try_from(self.t).unwrap_or(i32::MAX);
        let c = &self.config;
        let h = Hyper {
            lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            decay: 1.0 - lr * c.weight_decay,
            scale_m: 1.0 / (1.0 - c.beta1.powi(exponent)),
            scale_v: 1.0 / (1.0 - c.beta2.powi(exponent)),
        };
        for (i, ((name, theta), g)) in self.params.iter().zip(grads).enumerate() {
            let context = format!("AdamW update of `{name}`");
            let (m, v, next) = match kernel {
                Kernel::Fused => fused_update(theta.as_tensor(), g, &self.m[i], &self.v[i], &h),
                Kernel::Tensor => tensor_update(theta.as_tensor(), g, &self.m[i], &self.v[i], &h),
            }
            .ctx(&context)?;
            theta.set(&next).ctx(&context)?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// The moments as named tensors (`m.<param>`, `v.<param>`), for a checkpoint.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let names = self.params.iter().map(|(n, _)| n);
        let m = names
            .clone()
            .zip(&self.m)
            .map(|(n, t)| (format!("m.{n}"), t.clone()));
        let v = names
            .zip(&self.v)
            .map(|(n, t)| (format!("v.{n}"), t.clone()));
        m.chain(v).collect()
    }

    /// Restores the moments saved by [`AdamW::state`] and the update count `t`.
    pub fn load_state(&mut self, tensors: &mut HashMap<String, Tensor>, t: u64) -> Result<()> {
        let device = self.params.first().map(|(_, v)| v.device().clone());
        for (i, (name, theta)) in self.params.iter().enumerate() {
            for (prefix, slot) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let key = format!("{prefix}.{name}");
                let tensor = tensors
                    .remove(&key)
                    .ok_or_else(|| Error::Params(format!("optimizer state has no `{key}`")))?;
                if tensor.dims() != theta.dims() {
                    return Err(Error::Params(format!(
                        "optimizer state `{key}` has shape {:?}, the parameter {:?}",
                        tensor.dims(),
                        theta.dims()
                    )));
                }
                let on_device = match &device {
                    Some(d) => tensor.to_dtype(DType::F32).and_then(|x| x.to_device(d)),
                    None => Ok(tensor),
                };
                *slot = on_device.ctx("loading optimizer state")?;
            }
        }
        self.t = t;
        Ok(())
    }
}

/// How an update is computed: candle ops on any device, or, on the CPU, one fused pass over the
/// parameter's memory. candle's CPU element-wise ops each make a pass and an allocation, so the
/// dozen ops of an AdamW update dominate a CPU step of a 0.5B model.
#[derive(Clone, Copy)]
enum Kernel {
    Fused,
    Tensor,
}

struct Hyper {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    /// 1 − lr·λ, the decoupled weight decay.
    decay: f64,
    scale_m: f64,
    scale_v: f64,
}

/// (m, v, θ) after one update, with candle ops.
fn tensor_update(
    theta: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    h: &Hyper,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let m = ((m * h.beta1)? + (g * (1.0 - h.beta1))?)?;
    let v = ((v * h.beta2)? + (g.sqr()? * (1.0 - h.beta2))?)?;
    let step = ((&m * h.scale_m)? / ((&v * h.scale_v)?.sqrt()? + h.eps)?)?;
    let next = ((theta * h.decay)? - (step * h.lr)?)?;
    Ok((m, v, next))
}

/// (m, v, θ) after one update, in one pass over CPU memory split across threads.
fn fused_update(
    theta: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    h: &Hyper,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    // The gradient of a weight used transposed (`x·Wᵀ`) arrives as a strided view.
    let g = g.contiguous()?;
    let (theta_s, g_s, m_s, v_s) = (
        theta.storage_and_layout(),
        g.storage_and_layout(),
        m.storage_and_layout(),
        v.storage_and_layout(),
    );
    let (theta_v, g_v, m_v, v_v) = (
        cpu_f32s(&theta_s)?,
        cpu_f32s(&g_s)?,
        cpu_f32s(&m_s)?,
        cpu_f32s(&v_s)?,
    );
    let n = theta_v.len();
    if [g_v.len(), m_v.len(), v_v.len()] != [n; 3] {
        candle_core::bail!(
            "fused AdamW: {n} parameters but {} gradients and {}/{} moments",
            g_v.len(),
            m_v.len(),
            v_v.len()
        );
    }
    let (mut out_m, mut out_v, mut out_t) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads).max(1 << 14);
    let (b1, b2, eps) = (h.beta1 as f32, h.beta2 as f32, h.eps as f32);
    let (sm, sv, decay, lr) = (
        h.scale_m as f32,
        h.scale_v as f32,
        h.decay as f32,
        h.lr as f32,
    );
    std::thread::scope(|scope| {
        let outputs = out_m
            .chunks_mut(chunk)
            .zip(out_v.chunks_mut(chunk))
            .zip(out_t.chunks_mut(chunk));
        let inputs = theta_v
            .chunks(chunk)
            .zip(g_v.chunks(chunk))
            .zip(m_v.chunks(chunk))
            .zip(v_v.chunks(chunk));
        for (((om, ov), ot), (((th, gs), ms), vs)) in outputs.zip(inputs) {
            scope.spawn(move || {
                for j in 0..ot.len() {
                    let g = gs[j];
                    let m = b1 * ms[j] + (1.0 - b1) * g;
                    let v = b2 * vs[j] + (1.0 - b2) * g * g;
                    om[j] = m;
                    ov[j] = v;
                    ot[j] = th[j] * decay - lr * (m * sm) / ((v * sv).sqrt() + eps);
                }
            });
        }
    });
    let (shape, device) = (theta.shape(), theta.device());
    Ok((
        Tensor::from_vec(out_m, shape, device)?,
        Tensor::from_vec(out_v, shape, device)?,
        Tensor::from_vec(out_t, shape, device)?,
    ))
}

/// The values of a contiguous f32 CPU tensor, borrowed from its storage.
fn cpu_f32s<'a>(
    (storage, layout): &'a (candle_core::StorageRef<'_>, &candle_core::Layout),
) -> candle_core::Result<&'a [f32]> {
    match (&**storage, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(cpu), Some((start, end))) => {
            Ok(&cpu.as_slice::<f32>()?[start..end])
        }
        _ => candle_core::bail!("fused AdamW needs contiguous f32 CPU tensors"),
    }
}

/// Mini-batch epochs over `train` (example indices), reshuffled before each epoch by a
/// Fisher–Yates pass of a generator seeded `seed ^ 0x5eed`. `step` trains on one batch, drawing any
/// randomness of its own (dropout) from the same generator, and returns the batch's mean loss;
/// the result is each epoch's mean loss over its examples.
pub fn shuffled_epochs(
    train: &[usize],
    seed: u64,
    epochs: usize,
    batch: usize,
    mut step: impl FnMut(&[usize], &mut SplitMix64) -> Result<f64>,
) -> Result<Vec<f64>> {
    let mut rng = SplitMix64(seed ^ 0x5eed);
    let mut order = train.to_vec();
    let mut epoch_loss = Vec::with_capacity(epochs);
    for _ in 0..epochs {
        rng.shuffle(&mut order);
        let mut total = 0.0;
        for chunk in order.chunks(batch) {
            total += step(chunk, &mut rng)? * chunk.len() as f64;
        }
        epoch_loss.push(total / order.len() as f64);
    }
    Ok(epoch_loss)
}

/// Each named variable's gradient in `store`, zeros where the loss does not reach it: the
/// optimizer takes one gradient per variable, in the variables' order.
pub fn gradients(
    store: &candle_core::backprop::GradStore,
    vars: &[(String, Var)],
) -> Result<Vec<Tensor>> {
    vars.iter()
        .map(|(_, v)| match store.get(v.as_tensor()) {
            Some(g) => Ok(g.clone()),
            None => v.as_tensor().zeros_like().ctx("zero gradient"),
        })
        .collect()
}

/// Scales `grads` in place so their global L2 norm is at most `max_norm` (coefficient
/// `max_norm / (norm + 1e-6)`, as torch); returns the norm before clipping.
pub fn clip_grad_norm(grads: &mut [Tensor], max_norm: f64) -> Result<f64> {
    let mut sq = 0.0f64;
    for g in grads.iter() {
        sq += g
            .sqr()
            .and_then(|s| s.sum_all())
            .and_then(|s| s.to_dtype(DType::F64))
            .and_then(|s| s.to_scalar::<f64>())
            .ctx("gradient norm")?;
    }
    let norm = sq.sqrt();
    let coef = max_norm / (norm + 1e-6);
    if norm.is_finite() && coef < 1.0 {
        for g in grads.iter_mut() {
            *g = (&*g * coef).ctx("clipping gradients")?;
        }
    }
    Ok(norm)
}

/// Linear warm-up from lr/warmup to lr over the first `warmup` updates, then constant
/// (`step` is 0-based).
pub fn warmup_lr(lr: f64, step: u64, warmup: u64) -> f64 {
    if step >= warmup {
        lr
    } else {
        lr * (step + 1) as f64 / warmup as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn two_adamw_steps_match_torch_formula() {
        // python3 (torch.optim.AdamW's update written out), θ = 1, lr 0.1, λ 0.01, g = 0.5 then −0.2:
        // b1, b2, eps, lr, wd = 0.9, 0.999, 1e-8, 0.1, 0.01; th, m, v = 1.0, 0.0, 0.0
        // for t, g in [(1, 0.5), (2, -0.2)]:
        //     th *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g
        //     th -= lr * (m/(1-b1**t)) / ((v/(1-b2**t))**0.5 + eps); print(th)
        // → 0.899000002, 0.863540418
        let p = Var::from_tensor(&Tensor::new(&[1.0f32], &Device::Cpu).unwrap()).unwrap();
        let mut opt = AdamW::new(&[("w".into(), p.clone())], AdamWConfig::default()).unwrap();
        let expected = [0.899000002, 0.863540418];
        for (g, e) in [0.5f32, -0.2].into_iter().zip(expected) {
            opt.step(&[Tensor::new(&[g], &Device::Cpu).unwrap()], 0.1)
                .unwrap();
            let got = p.as_tensor().to_vec1::<f32>().unwrap()[0] as f64;
            assert!((got - e).abs() < 1e-6, "got {got}, expected {e}");
        }
        let names: Vec<String> = opt.state().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["m.w", "v.w"]);
    }

    #[test]
    fn fused_and_tensor_kernels_agree() {
        // Same update through both kernels, on a strided gradient (as a transposed weight's).
        let mut rng = SplitMix64(3);
        let mut values = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.next_signed()).collect() };
        let theta = Tensor::from_vec(values(40_000), (200, 200), &Device::Cpu).unwrap();
        let g = Tensor::from_vec(values(40_000), (200, 200), &Device::Cpu)
            .unwrap()
            .t()
            .unwrap();
        let run = |kernel| {
            let p = Var::from_tensor(&theta.copy().unwrap()).unwrap();
            let mut opt = AdamW::new(&[("w".into(), p.clone())], AdamWConfig::default()).unwrap();
            for _ in 0..3 {
                opt.step_with(std::slice::from_ref(&g), 1e-2, kernel)
                    .unwrap();
            }
            p.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let (fused, tensor) = (run(Kernel::Fused), run(Kernel::Tensor));
        let worst = fused
            .iter()
            .zip(&tensor)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-6, "kernels differ by {worst}");
    }

    #[test]
    fn clipping_rescales_to_the_max_norm() {
        // ‖(3, 4)‖ = 5; max 1 → coefficient 1/(5 + 1e-6) → (0.6, 0.8) to 1e-6.
        let mut grads = vec![
            Tensor::new(&[3.0f32], &Device::Cpu).unwrap(),
            Tensor::new(&[4.0f32], &Device::Cpu).unwrap(),
        ];
        let norm = clip_grad_norm(&mut grads, 1.0).unwrap();
        assert!((norm - 5.0).abs() < 1e-9);
        let got: Vec<f32> = grads
            .iter()
            .map(|g| g.to_vec1::<f32>().unwrap()[0])
            .collect();
        assert!(
            (got[0] - 0.6).abs() < 1e-6 && (got[1] - 0.8).abs() < 1e-6,
            "{got:?}"
        );
        let mut small = vec![Tensor::new(&[0.3f32], &Device::Cpu).unwrap()];
        clip_grad_norm(&mut small, 1.0).unwrap();
        assert_eq!(small[0].to_vec1::<f32>().unwrap(), [0.3]);
    }

    #[test]
    fn warmup_is_linear_then_constant() {
        let lrs: Vec<f64> = (0..5).map(|s| warmup_lr(1.0, s, 4)).collect();
        assert_eq!(lrs, [0.25, 0.5, 0.75, 1.0, 1.0]);
        assert_eq!(warmup_lr(0.5, 0, 0), 0.5);
    }
}
