//! Qwen2 / Llama decoder-only transformer, written from differentiable candle ops so that every
//! parameter trains.
//!
//! Follows Hugging Face `transformers`' `modeling_qwen2.py` and `modeling_llama.py`: token
//! embedding, `L` pre-norm blocks of grouped-query self-attention with rotary position embedding
//! (RoPE, Su et al. 2021) and a SwiGLU MLP, a final RMSNorm and the LM head:
//!
//! h ← h + o_proj(attn(rope(q_proj(n₁(h))), rope(k_proj(n₁(h))), v_proj(n₁(h))))
//! h ← h + down_proj(silu(gate_proj(n₂(h))) ⊙ up_proj(n₂(h)))
//! n(x) = w ⊙ x / √(mean(x²) + ε)
//!
//! Qwen2 has biases on q/k/v (Llama: `attention_bias`, default off); both may tie the LM head to
//! the embedding (`tie_word_embeddings`). candle-transformers' models do not train: their fused
//! rope, softmax and RMSNorm kernels are cut out of autograd (`apply_op*_no_bwd`), so a backward
//! pass reaches only the head. Here RoPE is `rope_slow`, softmax `ops::softmax`, and RMSNorm the
//! composed ops of `RmsNorm::forward_diff`, all with gradients.
//!
//! Full fine-tuning: parameters are f32 [`Var`]s under their Hugging Face names; the forward pass
//! casts them to the compute dtype (bf16 on CUDA), so gradients and optimizer updates stay in f32.
//! LoRA ([`crate::lora`]): the base weights are frozen tensors stored in the compute dtype, and
//! only the adapters are f32 `Var`s. Optionally each block is checkpointed (recomputed in the
//! backward pass) to hold long multi-turn prompts.

use crate::arch::Config;
use crate::error::{Context, Error, Result};
use crate::fused::attach::{attach, attach_all};
use crate::fused::{attention::attention, rms_norm, rope::rope, swiglu::swiglu};
use crate::lora::{LoraConfig, Target};
use crate::rng::SplitMix64;
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::ops;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A projection as the forward pass uses it.
#[derive(Clone)]
struct Linear {
    /// `[out, in]`: a trained parameter's f32 tensor, or a frozen weight already in the compute
    /// dtype.
    weight: Tensor,
    bias: Option<Tensor>,
    adapter: Option<Adapter>,
}

/// LoRA's low-rank update of one projection, (α/r)·B A, with f32 trained A and B.
#[derive(Clone)]
struct Adapter {
    a: Tensor,
    b: Tensor,
    scale: f64,
}

#[derive(Clone)]
struct Layer {
    input_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// `t` as a pass uses it: detached under [`Pass::Score`] (same storage, no graph).
fn for_pass(t: &Tensor, pass: Pass) -> Tensor {
    if pass == Pass::Score {
        t.detach()
    } else {
        t.clone()
    }
}

impl Linear {
    fn for_pass(&self, pass: Pass) -> Linear {
        Linear {
            weight: for_pass(&self.weight, pass),
            bias: self.bias.as_ref().map(|b| for_pass(b, pass)),
            adapter: self.adapter.as_ref().map(|a| Adapter {
                a: for_pass(&a.a, pass),
                b: for_pass(&a.b, pass),
                scale: a.scale,
            }),
        }
    }
}

impl Layer {
    fn for_pass(&self, pass: Pass) -> Layer {
        Layer {
            input_norm: for_pass(&self.input_norm, pass),
            q: self.q.for_pass(pass),
            k: self.k.for_pass(pass),
            v: self.v.for_pass(pass),
            o: self.o.for_pass(pass),
            post_norm: for_pass(&self.post_norm, pass),
            gate: self.gate.for_pass(pass),
            up: self.up.for_pass(pass),
            down: self.down.for_pass(pass),
        }
    }

    /// The projections in [`Target::ALL`] order.
    fn projections(&self) -> [&Linear; 7] {
        [
            &self.q, &self.k, &self.v, &self.o, &self.gate, &self.up, &self.down,
        ]
    }

    /// The tensors of this block that train: the adapters under LoRA, else every weight.
    fn trained(&self, frozen: bool) -> Vec<Tensor> {
        let mut out = Vec::new();
        if !frozen {
            out.extend([self.input_norm.clone(), self.post_norm.clone()]);
        }
        for p in self.projections() {
            if !frozen {
                out.push(p.weight.clone());
                out.extend(p.bias.clone());
            }
            if let Some(a) = &p.adapter {
                out.extend([a.a.clone(), a.b.clone()]);
            }
        }
        out
    }
}

/// A token batch for [`Model::action_logprobs`]: right-padded ids and, for every action token,
/// the flat position (`b·T + t − 1`) whose logits predict it.
pub struct Batch {
    /// `[B, T]` u32, right-padded (padding is never attended to by earlier positions under the
    /// causal mask, and padded positions are never read).
    pub ids: Tensor,
    /// `[N]` u32: flat index of the position predicting each action token.
    pub positions: Tensor,
    /// `[N]` u32: the action tokens.
    pub targets: Tensor,
}

/// Whether a forward pass trains: LoRA dropout and activation checkpointing apply only then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    Eval,
    /// A training pass; its dropout masks are drawn from `dropout_seed` alone, so a seed and a
    /// step give the same masks in every run (a resumed one too).
    Train {
        dropout_seed: u64,
    },
    /// [`Pass::Eval`] off the autograd graph: every weight enters detached, so each activation
    /// is freed once the next is computed instead of being kept for a backward pass that a
    /// scoring pass never runs (on long prompts, the difference between fitting and not).
    Score,
}

/// Gradients of parameters inside checkpointed blocks, computed by the blocks' recomputation
/// while the backward pass runs.
type GradSink = Arc<Mutex<Vec<(Tensor, Tensor)>>>;

/// The model: trained f32 parameters (every weight, or LoRA adapters over frozen base weights in
/// the compute dtype), plus the compute dtype.
pub struct Model {
    config: Config,
    /// What trains, under its saved name: every parameter under its Hugging Face name, or under
    /// LoRA the adapters' A and B under PEFT's names.
    params: Vec<(String, Var)>,
    /// Under LoRA, the base weights under their Hugging Face names, in the compute dtype. They are
    /// plain tensors, never `Var`s, and enter the graph through ops whose backward returns only
    /// the gradient of the activation ([`attach`]), so no gradient of theirs is ever computed.
    frozen: Vec<(String, Tensor)>,
    lora: Option<LoraConfig>,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Option<Tensor>,
    dtype: DType,
    device: Device,
    checkpoint: bool,
    sink: GradSink,
}

/// What every block of one forward pass shares.
#[derive(Clone)]
struct Ctx {
    b: usize,
    t: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f64,
    cos: Tensor,
    sin: Tensor,
    dtype: DType,
    /// The base weights are frozen (LoRA).
    frozen: bool,
}

/// One dropout mask per projection of a block (`None`: no adapter, or no dropout).
type Masks = [Option<Tensor>; 7];

impl Model {
    /// Builds the model from named tensors (any dtype; converted to f32 `Var`s on `device`), every
    /// parameter trained. Tensors the architecture does not use are ignored; a missing or
    /// misshapen one is an error naming it and `source`.
    pub fn from_tensors(
        config: Config,
        tensors: HashMap<String, Tensor>,
        device: &Device,
        dtype: DType,
        source: &Path,
    ) -> Result<Self> {
        let mut params = Vec::new();
        for (name, tensor) in base_tensors(&config, tensors, device, DType::F32, source)? {
            let var = Var::from_tensor(&tensor).ctx("making a trainable variable")?;
            params.push((name, var));
        }
        let weights = params
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        let (embed, layers, norm, lm_head) = assemble(&config, &weights, &HashMap::new(), None)?;
        Ok(Model {
            config,
            params,
            frozen: Vec::new(),
            lora: None,
            embed,
            layers,
            norm,
            lm_head,
            dtype,
            device: device.clone(),
            checkpoint: false,
            sink: GradSink::default(),
        })
    }

    /// Builds a LoRA model: the base weights of `tensors` frozen in `dtype` on `device`, and the
    /// `adapters` (PEFT names and shapes, see [`crate::lora::adapter_shapes`]) as the f32 `Var`s
    /// that train.
    pub fn from_tensors_lora(
        config: Config,
        tensors: HashMap<String, Tensor>,
        mut adapters: HashMap<String, Tensor>,
        lora: &LoraConfig,
        device: &Device,
        dtype: DType,
        source: &Path,
    ) -> Result<Self> {
        lora.check()?;
        let frozen = base_tensors(&config, tensors, device, dtype, source)?;
        let mut params = Vec::new();
        for (name, shape) in crate::lora::adapter_shapes(&config, lora) {
            let bad = |message: String| Error::Model {
                path: source.to_path_buf(),
                message,
            };
            let t = adapters
                .remove(&name)
                .ok_or_else(|| bad(format!("adapter tensor `{name}` is missing")))?;
            if t.dims() != shape.as_slice() {
                return Err(bad(format!(
                    "adapter tensor `{name}` has shape {:?}, rank {} implies {shape:?}",
                    t.dims(),
                    lora.rank
                )));
            }
            let t = t
                .to_dtype(DType::F32)
                .and_then(|t| t.to_device(device))
                .ctx(&format!("converting `{name}`"))?;
            params.push((name, Var::from_tensor(&t).ctx("making an adapter")?));
        }
        let weights = frozen.iter().cloned().collect();
        let trained = params
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        let (embed, layers, norm, lm_head) = assemble(&config, &weights, &trained, Some(lora))?;
        Ok(Model {
            config,
            params,
            frozen,
            lora: Some(lora.clone()),
            embed,
            layers,
            norm,
            lm_head,
            dtype,
            device: device.clone(),
            checkpoint: false,
            sink: GradSink::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Every trained tensor under its saved name: all parameters in [`Config::parameters`] order,
    /// or under LoRA the adapters in [`crate::lora::adapter_shapes`] order.
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// The frozen base weights (LoRA), in the compute dtype; empty when every parameter trains.
    pub fn frozen(&self) -> &[(String, Tensor)] {
        &self.frozen
    }

    pub fn lora(&self) -> Option<&LoraConfig> {
        self.lora.as_ref()
    }

    /// Activation checkpointing: a training pass keeps only each block's input and recomputes
    /// the block during the backward pass, trading a second forward pass for the activations of
    /// all blocks but one. Needs [`Model::backward`].
    pub fn set_checkpointing(&mut self, on: bool) {
        self.checkpoint = on;
    }

    /// The log-probability of every action token of the batch under the model, `[N]` f32,
    /// without dropout.
    pub fn action_logprobs(&self, batch: &Batch) -> Result<Tensor> {
        self.logprobs(batch, Pass::Eval).ctx("forward pass")
    }

    /// [`Model::action_logprobs`] off the autograd graph ([`Pass::Score`]): not differentiable.
    pub fn score_logprobs(&self, batch: &Batch) -> Result<Tensor> {
        self.logprobs(batch, Pass::Score).ctx("forward pass")
    }

    /// [`Model::action_logprobs`] for a training step: LoRA dropout on (its masks drawn from
    /// `dropout_seed`), blocks checkpointed if asked; differentiate through [`Model::backward`].
    pub fn train_logprobs(&self, batch: &Batch, dropout_seed: u64) -> Result<Tensor> {
        self.logprobs(batch, Pass::Train { dropout_seed })
            .ctx("forward pass")
    }

    /// The final hidden state (after the last RMSNorm) at the flat `positions` (`b·T + t`) of the
    /// right-padded `ids` `[B, T]`: `[N, hidden]` in the compute dtype.
    pub fn hidden_states(&self, ids: &Tensor, positions: &Tensor, pass: Pass) -> Result<Tensor> {
        self.hidden(ids, positions, pass).ctx("forward pass")
    }

    /// `loss.backward()`, with the gradients that checkpointed blocks computed while it ran
    /// added in.
    pub fn backward(&self, loss: &Tensor) -> Result<GradStore> {
        let mut grads = loss.backward().ctx("backward pass")?;
        let side = std::mem::take(
            &mut *self
                .sink
                .lock()
                .map_err(|_| Error::candle("backward pass", poisoned()))?,
        );
        for (param, g) in side {
            let total = match grads.get(&param) {
                Some(prev) => (prev + g).ctx("adding checkpointed gradients")?,
                None => g,
            };
            grads.insert(&param, total);
        }
        Ok(grads)
    }

    fn logprobs(&self, batch: &Batch, pass: Pass) -> candle_core::Result<Tensor> {
        let h = self.hidden(&batch.ids, &batch.positions, pass)?;
        let head = Linear {
            weight: self.lm_head.clone().unwrap_or_else(|| self.embed.clone()),
            bias: None,
            adapter: None,
        }
        .for_pass(pass);
        let logits =
            linear(&h, &head, self.dtype, !self.frozen.is_empty(), None)?.to_dtype(DType::F32)?;
        let logp = ops::log_softmax(&logits, D::Minus1)?;
        logp.gather(&batch.targets.unsqueeze(1)?, 1)?.squeeze(1)
    }

    fn hidden(&self, ids: &Tensor, positions: &Tensor, pass: Pass) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let (b, t) = ids.dims2()?;
        let hd = c.head_dim;
        let inv_freq = Tensor::from_vec(c.inv_freq(), (1, hd / 2), &self.device)?;
        let pos = Tensor::arange(0u32, t as u32, &self.device)?
            .to_dtype(DType::F32)?
            .reshape((t, 1))?;
        let freqs = pos.broadcast_mul(&inv_freq)?;
        let ctx = Ctx {
            b,
            t,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: hd,
            eps: c.rms_norm_eps,
            cos: freqs.cos()?.to_dtype(self.dtype)?,
            sin: freqs.sin()?.to_dtype(self.dtype)?,
            dtype: self.dtype,
            frozen: !self.frozen.is_empty(),
        };
        let detached: Vec<Layer>;
        let layers = if pass == Pass::Score {
            detached = self.layers.iter().map(|l| l.for_pass(pass)).collect();
            &detached
        } else {
            &self.layers
        };
        // [B·T, H]: rows are positions; attention reshapes to heads and back.
        let mut h = for_pass(&self.embed, pass)
            .to_dtype(self.dtype)?
            .index_select(&ids.flatten_all()?, 0)?;
        for (index, layer) in layers.iter().enumerate() {
            let masks = self.dropout_masks(index, layer, b * t, pass)?;
            h = if matches!(pass, Pass::Train { .. }) && self.checkpoint {
                self.checkpointed(layer, h, &ctx, masks)?
            } else {
                block(layer, &h, &ctx, &masks)?
            };
        }
        // Only the positions asked for reach the final norm and the head: a prompt's logits over
        // a 150k vocabulary would dominate memory and time and are never used.
        let h = h.index_select(positions, 0)?;
        rms_norm(&h, &for_pass(&self.norm, pass), &ctx)
    }

    /// PEFT's dropout on each adapter's input (a separate mask per projection), drawn before the
    /// block runs so that a checkpointed block recomputes with the same masks. Each mask is its
    /// own stream of the pass's seed ([`SplitMix64::stream`] of layer and projection) on the
    /// CPU (candle's CPU `rand` is seeded from the OS, and costs a ChaCha draw and three passes
    /// per element); on a GPU, the device's generator, seeded with it at the first layer (a
    /// generator made per mask would cost its set-up each time) and drawn in layer order.
    fn dropout_masks(
        &self,
        index: usize,
        layer: &Layer,
        rows: usize,
        pass: Pass,
    ) -> candle_core::Result<Masks> {
        let mut masks: Masks = Default::default();
        let (p, seed) = match (&self.lora, pass) {
            (Some(l), Pass::Train { dropout_seed }) if l.dropout > 0.0 => (l.dropout, dropout_seed),
            _ => return Ok(masks),
        };
        if index == 0 && !self.device.is_cpu() {
            self.device.set_seed(seed)?;
        }
        let scale = 1.0 / (1.0 - p);
        for (j, (slot, proj)) in masks.iter_mut().zip(layer.projections()).enumerate() {
            if proj.adapter.is_none() {
                continue;
            }
            let width = proj.weight.dim(1)?;
            let seed = SplitMix64::stream(seed, &[index as u64, j as u64]);
            *slot = Some(if self.device.is_cpu() {
                keep_mask(rows, width, p, seed)?.to_dtype(self.dtype)?
            } else {
                let keep = Tensor::rand(0f32, 1f32, (rows, width), &self.device)?.ge(p as f32)?;
                (keep.to_dtype(self.dtype)? * scale)?
            });
        }
        Ok(masks)
    }

    /// The block, with only its input `h` kept for the backward pass, which recomputes the block
    /// from it and hands the gradients of the block's parameters to [`Model::backward`].
    fn checkpointed(
        &self,
        layer: &Layer,
        h: Tensor,
        ctx: &Ctx,
        masks: Masks,
    ) -> candle_core::Result<Tensor> {
        // The op must be on the graph for the block's parameters to get gradients: when nothing
        // before the block trains (LoRA's first block reads the frozen embedding), a variable
        // stands in for its input.
        let h = if h.track_op() {
            h
        } else {
            Var::from_tensor(&h)?.into_inner()
        };
        // Computed with the graph that the parameters start, which is dropped with `out` once
        // the op has copied it: only the op's input survives.
        let out = block(layer, &h.detach(), ctx, &masks)?;
        let (layer, ctx, sink) = (layer.clone(), ctx.clone(), self.sink.clone());
        let trained = layer.trained(ctx.frozen);
        attach(&h, out, move |x, _, grad| {
            let x = Var::from_tensor(&x.detach())?;
            let y = block(&layer, x.as_tensor(), &ctx, &masks)?;
            // d(Σ y ⊙ g)/dy = g: the recomputed block's backward, seeded with the incoming gradient.
            let grads = (y * grad.detach())?.sum_all()?.backward()?;
            let mut sink = sink.lock().map_err(|_| poisoned())?;
            for p in &trained {
                if let Some(g) = grads.get(p) {
                    sink.push((p.clone(), g.clone()));
                }
            }
            match grads.get(x.as_tensor()) {
                Some(g) => Ok(g.clone()),
                None => x.as_tensor().zeros_like(),
            }
        })
    }
}

fn poisoned() -> candle_core::Error {
    candle_core::Error::Msg("a checkpointed block panicked during the backward pass".into())
}

/// The base weights of `config` from `tensors`, checked and converted to `dtype` on `device`, in
/// [`Config::parameters`] order.
fn base_tensors(
    config: &Config,
    mut tensors: HashMap<String, Tensor>,
    device: &Device,
    dtype: DType,
    source: &Path,
) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::new();
    for (name, shape) in config.parameters() {
        let tensor = tensors.remove(&name).ok_or_else(|| Error::Model {
            path: source.to_path_buf(),
            message: format!(
                "tensor `{name}` is missing (expected shape {shape:?} for this config.json)"
            ),
        })?;
        if tensor.dims() != shape.as_slice() {
            return Err(Error::Model {
                path: source.to_path_buf(),
                message: format!(
                    "tensor `{name}` has shape {:?}, config.json implies {shape:?}",
                    tensor.dims()
                ),
            });
        }
        if let Some(problem) = non_finite(&tensor).ctx(&format!("checking `{name}`"))? {
            let gguf = crate::gguf::gguf_name(&name)
                .filter(|_| crate::gguf::is_gguf(source))
                .map_or(String::new(), |g| format!(" (`{g}` in the GGUF file)"));
            return Err(Error::Model {
                path: source.to_path_buf(),
                message: format!("tensor `{name}`{gguf} holds {problem}: every training step on it would be skipped"),
            });
        }
        let tensor = tensor
            .to_dtype(dtype)
            .and_then(|t| t.to_device(device))
            .ctx(&format!("converting `{name}`"))?;
        out.push((name, tensor));
    }
    Ok(out)
}

/// What is not finite in `t` ("2 NaN and 1 infinite values, the first at index 7"), `None` when
/// every value is. x − x is 0 for finite x and NaN otherwise, so one sum tells whether to look.
fn non_finite(t: &Tensor) -> candle_core::Result<Option<String>> {
    if !t.dtype().is_float() {
        return Ok(None);
    }
    let sum = t
        .sub(t)?
        .sum_all()?
        .to_dtype(DType::F64)?
        .to_scalar::<f64>()?;
    if sum == 0.0 {
        return Ok(None);
    }
    let values = t.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?;
    let nan = values.iter().filter(|v| v.is_nan()).count();
    let infinite = values.iter().filter(|v| v.is_infinite()).count();
    let first = values.iter().position(|v| !v.is_finite()).unwrap_or(0);
    Ok(Some(format!(
        "{nan} NaN and {infinite} infinite values, the first at index {first}"
    )))
}

type Parts = (Tensor, Vec<Layer>, Tensor, Option<Tensor>);

/// The embedding, blocks, final norm and untied head from the named base weights and adapters.
fn assemble(
    config: &Config,
    weights: &HashMap<String, Tensor>,
    adapters: &HashMap<String, Tensor>,
    lora: Option<&LoraConfig>,
) -> Result<Parts> {
    let get = |name: &str| -> Result<Tensor> {
        weights
            .get(name)
            .cloned()
            .ok_or_else(|| Error::Params(format!("internal: parameter `{name}` not built")))
    };
    let linear = |l: usize, target: Target, bias: bool| -> Result<Linear> {
        let path = target.path(l);
        let adapter = match lora {
            Some(lc) if lc.targets.contains(&target) => {
                let (a, b) = crate::lora::peft_names(&path);
                let find = |n: &str| {
                    adapters
                        .get(n)
                        .cloned()
                        .ok_or_else(|| Error::Params(format!("internal: adapter `{n}` not built")))
                };
                Some(Adapter {
                    a: find(&a)?,
                    b: find(&b)?,
                    scale: lc.scale(),
                })
            }
            _ => None,
        };
        Ok(Linear {
            weight: get(&format!("{path}.weight"))?,
            bias: if bias && config.attention_bias {
                Some(get(&format!("{path}.bias"))?)
            } else {
                None
            },
            adapter,
        })
    };
    let mut layers = Vec::with_capacity(config.num_hidden_layers);
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}");
        layers.push(Layer {
            input_norm: get(&format!("{p}.input_layernorm.weight"))?,
            q: linear(l, Target::Q, true)?,
            k: linear(l, Target::K, true)?,
            v: linear(l, Target::V, true)?,
            o: linear(l, Target::O, false)?,
            post_norm: get(&format!("{p}.post_attention_layernorm.weight"))?,
            gate: linear(l, Target::Gate, false)?,
            up: linear(l, Target::Up, false)?,
            down: linear(l, Target::Down, false)?,
        });
    }
    let lm_head = if config.tie_word_embeddings {
        None
    } else {
        Some(get("lm_head.weight")?)
    };
    Ok((
        get("model.embed_tokens.weight")?,
        layers,
        get("model.norm.weight")?,
        lm_head,
    ))
}

/// One pre-norm decoder block on `h` `[B·T, H]`, from the fused ops ([`crate::fused`]).
fn block(layer: &Layer, h: &Tensor, ctx: &Ctx, masks: &Masks) -> candle_core::Result<Tensor> {
    let (b, t, hd) = (ctx.b, ctx.t, ctx.head_dim);
    let (nh, nkv) = (ctx.heads, ctx.kv_heads);
    let proj =
        |x: &Tensor, l: &Linear, i: usize| linear(x, l, ctx.dtype, ctx.frozen, masks[i].as_ref());
    let x = rms_norm(h, &layer.input_norm, ctx)?;
    // [B, T, heads, d]: the projections' rows, split into heads without a copy.
    let heads = |y: Tensor, n: usize| y.reshape((b, t, n, hd));
    let q = rope(&heads(proj(&x, &layer.q, 0)?, nh)?, &ctx.cos, &ctx.sin)?;
    let k = rope(&heads(proj(&x, &layer.k, 1)?, nkv)?, &ctx.cos, &ctx.sin)?;
    let v = heads(proj(&x, &layer.v, 2)?, nkv)?;
    let attn = attention(&q, &k, &v)?.reshape((b * t, nh * hd))?;
    let h = (h + proj(&attn, &layer.o, 3)?)?;
    let x = rms_norm(&h, &layer.post_norm, ctx)?;
    let gated = swiglu(&proj(&x, &layer.gate, 4)?, &proj(&x, &layer.up, 5)?)?;
    h + proj(&gated, &layer.down, 6)?
}

/// x Wᵀ + b, plus the adapter's (α/r)·(mask ⊙ x) Aᵀ Bᵀ.
fn linear(
    x: &Tensor,
    l: &Linear,
    dtype: DType,
    frozen: bool,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let low = match &l.adapter {
        Some(adapter) => Some(low_rank(x, adapter, dtype, mask)?),
        None => None,
    };
    if frozen {
        // x Wᵀ + b + low off the graph, attached to x (through W) and to the adapter's output:
        // the base's own output is not kept beside the sum.
        let mut y = x.detach().matmul(&l.weight.t()?)?;
        if let Some(b) = &l.bias {
            y = y.broadcast_add(b)?;
        }
        let w = l.weight.clone();
        return match low {
            None => attach(x, y, move |_, _, grad| grad.matmul(&w)),
            Some(low) => attach_all(&[x, &low], (y + low.detach())?, move |xs, _, grad| {
                let dx = match xs.first() {
                    Some(x) if x.track_op() => Some(grad.matmul(&w)?),
                    _ => None,
                };
                Ok(vec![dx, Some(grad.clone())])
            }),
        };
    }
    let y = x.matmul(&l.weight.to_dtype(dtype)?.t()?)?;
    let y = match &l.bias {
        Some(b) => y.broadcast_add(&b.to_dtype(dtype)?)?,
        None => y,
    };
    match low {
        Some(low) => y + low,
        None => Ok(y),
    }
}

/// The adapter's (α/r)·(mask ⊙ x) Aᵀ Bᵀ, scaled at rank r, before B widens it: one fewer
/// full-width tensor kept for the backward.
fn low_rank(
    x: &Tensor,
    adapter: &Adapter,
    dtype: DType,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let x = match mask {
        Some(m) => (x * m)?,
        None => x.clone(),
    };
    (x.matmul(&adapter.a.to_dtype(dtype)?.t()?)? * adapter.scale)?
        .matmul(&adapter.b.to_dtype(dtype)?.t()?)
}

/// RMSNorm, w ⊙ x / √(mean(x²) + ε) ([`rms_norm::rms_norm`]).
fn rms_norm(x: &Tensor, w: &Tensor, ctx: &Ctx) -> candle_core::Result<Tensor> {
    rms_norm::rms_norm(x, w, ctx.eps)
}

/// A dropout mask on the CPU, `[rows, width]` f32: each element 1/(1 − p) with probability 1 − p
/// (16 random bits against p·2¹⁶; four elements per draw of `seed`'s stream), else 0.
fn keep_mask(rows: usize, width: usize, p: f64, seed: u64) -> candle_core::Result<Tensor> {
    let threshold = (p * 65536.0).round() as u64;
    let scale = (1.0 / (1.0 - p)) as f32;
    let mut rng = SplitMix64(seed);
    let mut mask = vec![0f32; rows * width];
    for four in mask.chunks_mut(4) {
        let bits = rng.next_u64();
        for (i, m) in four.iter_mut().enumerate() {
            if (bits >> (16 * i)) & 0xffff >= threshold {
                *m = scale;
            }
        }
    }
    Tensor::from_vec(mask, (rows, width), &Device::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropout_mask_keeps_one_minus_p_scaled_and_is_its_seeds() {
        let p = 0.05;
        let mask = |seed| -> Vec<f32> {
            let mask = keep_mask(64, 1000, p, seed).unwrap();
            mask.flatten_all().unwrap().to_vec1().unwrap()
        };
        let (mask, again, other) = (mask(7), mask(7), mask(8));
        let scale = (1.0 / (1.0 - p)) as f32;
        assert!(mask.iter().all(|&m| m == 0.0 || m == scale));
        let kept = mask.iter().filter(|&&m| m == scale).count() as f64 / mask.len() as f64;
        // 64,000 draws: the share kept is 0.95 ± 0.0009 (one σ).
        assert!((kept - (1.0 - p)).abs() < 0.004, "kept {kept}");
        assert_eq!(mask, again);
        assert_ne!(mask, other);
    }
}
