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
//! pass reaches only the head. Here RoPE is `rope_slow`, softmax `ops::softmax`, and RMSNorm
//! `RmsNorm::forward_diff`, all composed of ops with gradients.
//!
//! Parameters are f32 [`Var`]s under their Hugging Face names; the forward pass casts them to the
//! compute dtype (bf16 on CUDA), so gradients and optimizer updates stay in f32.

use crate::error::{Context, Error, Result};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{ops, rotary_emb, RmsNorm};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// The architecture, as training needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// Biases on q/k/v projections: always for Qwen2, `attention_bias` for Llama.
    pub attention_bias: bool,
    /// Llama 3.1's frequency-dependent RoPE scaling, when `config.json` asks for it.
    pub rope_scaling: Option<Llama3RopeScaling>,
    /// `model_type` as written to `config.json` (`qwen2` or `llama`).
    pub model_type: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Llama3RopeScaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: usize,
}

impl Config {
    /// A Qwen2-shaped model small enough for tests: 2 layers, hidden 32, 4 query and 2 key/value
    /// heads of 8, tied head, over `vocab_size` tokens.
    pub fn qwen2_tiny(vocab_size: usize) -> Self {
        Config {
            vocab_size,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 8,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-6,
            tie_word_embeddings: true,
            attention_bias: true,
            rope_scaling: None,
            model_type: "qwen2".into(),
        }
    }

    /// The shape of Qwen2.5-0.5B (its `config.json`): 494M parameters.
    pub fn qwen2_5_0_5b() -> Self {
        Config {
            vocab_size: 151_936,
            hidden_size: 896,
            intermediate_size: 4864,
            num_hidden_layers: 24,
            num_attention_heads: 14,
            num_key_value_heads: 2,
            head_dim: 64,
            rope_theta: 1_000_000.0,
            rms_norm_eps: 1e-6,
            tie_word_embeddings: true,
            attention_bias: true,
            rope_scaling: None,
            model_type: "qwen2".into(),
        }
    }

    /// Every parameter's Hugging Face name and shape, in a fixed order.
    pub fn parameters(&self) -> Vec<(String, Vec<usize>)> {
        let (h, i, hd) = (self.hidden_size, self.intermediate_size, self.head_dim);
        let (q, kv) = (self.num_attention_heads * hd, self.num_key_value_heads * hd);
        let mut out = vec![(
            "model.embed_tokens.weight".to_string(),
            vec![self.vocab_size, h],
        )];
        for l in 0..self.num_hidden_layers {
            let p = format!("model.layers.{l}");
            out.push((format!("{p}.input_layernorm.weight"), vec![h]));
            for (name, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
                out.push((format!("{p}.self_attn.{name}.weight"), vec![rows, h]));
                if self.attention_bias {
                    out.push((format!("{p}.self_attn.{name}.bias"), vec![rows]));
                }
            }
            out.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
            out.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
            out.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
            out.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
            out.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
        }
        out.push(("model.norm.weight".to_string(), vec![h]));
        if !self.tie_word_embeddings {
            out.push(("lm_head.weight".to_string(), vec![self.vocab_size, h]));
        }
        out
    }

    pub fn n_parameters(&self) -> usize {
        self.parameters()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum()
    }

    /// The `config.json` of this architecture, as `transformers` writes it.
    pub fn to_hf_json(&self, torch_dtype: &str) -> serde_json::Value {
        let architecture = if self.model_type == "llama" {
            "LlamaForCausalLM"
        } else {
            "Qwen2ForCausalLM"
        };
        let mut v = serde_json::json!({
            "architectures": [architecture],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": 32768,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": torch_dtype,
        });
        if self.model_type == "llama" {
            v["attention_bias"] = serde_json::Value::Bool(self.attention_bias);
        }
        v
    }

    /// RoPE inverse frequencies θ^(−2i/d), i < d/2, with Llama 3.1's scaling when configured.
    fn inv_freq(&self) -> Vec<f32> {
        let d = self.head_dim;
        (0..d / 2)
            .map(|i| {
                let freq = 1.0 / self.rope_theta.powf(2.0 * i as f64 / d as f64);
                let Some(s) = &self.rope_scaling else {
                    return freq as f32;
                };
                // `_compute_llama3_parameters` in transformers' `modeling_rope_utils.py`.
                let original = s.original_max_position_embeddings as f64;
                let (low_wavelen, high_wavelen) =
                    (original / s.low_freq_factor, original / s.high_freq_factor);
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                let scaled = if wavelen < high_wavelen {
                    freq
                } else if wavelen > low_wavelen {
                    freq / s.factor
                } else {
                    let smooth = (original / wavelen - s.low_freq_factor)
                        / (s.high_freq_factor - s.low_freq_factor);
                    (1.0 - smooth) * freq / s.factor + smooth * freq
                };
                scaled as f32
            })
            .collect()
    }
}

/// `config.json` as Hugging Face writes it; turned into [`Config`] by [`HfConfig::into_config`].
#[derive(Clone, Debug, Deserialize)]
pub struct HfConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub attention_bias: Option<bool>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub use_sliding_window: bool,
}

fn default_rope_theta() -> f64 {
    10_000.0
}

fn default_rms_norm_eps() -> f64 {
    1e-6
}

impl HfConfig {
    /// Checks that the architecture is one this crate implements; `path` is named in errors.
    pub fn into_config(self, path: &Path) -> Result<Config> {
        let bad = |message: String| Error::Model {
            path: path.to_path_buf(),
            message,
        };
        let family = match self.model_type.as_deref() {
            Some(t @ ("qwen2" | "llama")) => t.to_string(),
            Some(other) => {
                return Err(bad(format!("model_type `{other}` is not supported (Qwen2-family `qwen2` and Llama-family `llama` are)")))
            }
            None => match self.architectures.first().map(String::as_str) {
                Some("Qwen2ForCausalLM") => "qwen2".to_string(),
                Some("LlamaForCausalLM") => "llama".to_string(),
                _ => return Err(bad("no `model_type` and no known `architectures` entry (expected Qwen2ForCausalLM or LlamaForCausalLM)".into())),
            },
        };
        if let Some(act) = self.hidden_act.as_deref().filter(|a| *a != "silu") {
            return Err(bad(format!(
                "hidden_act `{act}` is not supported (Qwen2 and Llama use `silu`)"
            )));
        }
        if self.use_sliding_window {
            return Err(bad("use_sliding_window = true is not supported: training attends over the whole sequence".into()));
        }
        let heads = self.num_attention_heads;
        let kv_heads = self.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(bad(format!("num_attention_heads = {heads} must be a positive multiple of num_key_value_heads = {kv_heads}")));
        }
        let head_dim = match self.head_dim {
            Some(d) => d,
            None if self.hidden_size.is_multiple_of(heads) => self.hidden_size / heads,
            None => {
                return Err(bad(format!(
                    "hidden_size = {} is not a multiple of num_attention_heads = {heads}",
                    self.hidden_size
                )))
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(bad(format!(
                "head_dim = {head_dim} must be even and positive (RoPE rotates pairs)"
            )));
        }
        if self.vocab_size == 0 || self.hidden_size == 0 || self.num_hidden_layers == 0 {
            return Err(bad(
                "vocab_size, hidden_size and num_hidden_layers must be positive".into(),
            ));
        }
        let rope_scaling = match self.rope_scaling {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => {
                let kind = value
                    .get("rope_type")
                    .or_else(|| value.get("type"))
                    .and_then(|t| t.as_str())
                    .unwrap_or("");
                if kind != "llama3" {
                    return Err(bad(format!(
                        "rope_scaling type `{kind}` is not supported (only `llama3`)"
                    )));
                }
                Some(serde_json::from_value(value).map_err(|e| bad(format!("rope_scaling: {e}")))?)
            }
        };
        Ok(Config {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rope_theta: self.rope_theta,
            rms_norm_eps: self.rms_norm_eps,
            tie_word_embeddings: self.tie_word_embeddings,
            attention_bias: family == "qwen2" || self.attention_bias.unwrap_or(false),
            rope_scaling,
            model_type: family,
        })
    }
}

struct Layer {
    input_norm: Var,
    q: Var,
    q_bias: Option<Var>,
    k: Var,
    k_bias: Option<Var>,
    v: Var,
    v_bias: Option<Var>,
    o: Var,
    post_norm: Var,
    gate: Var,
    up: Var,
    down: Var,
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

/// The model: f32 parameters under Hugging Face names, plus the compute dtype.
pub struct Model {
    config: Config,
    params: Vec<(String, Var)>,
    embed: Var,
    layers: Vec<Layer>,
    norm: Var,
    lm_head: Option<Var>,
    dtype: DType,
    device: Device,
}

impl Model {
    /// Builds the model from named tensors (any dtype; converted to f32 `Var`s on `device`).
    /// Tensors the architecture does not use are ignored; a missing or misshapen one is an
    /// error naming it and `source`.
    pub fn from_tensors(
        config: Config,
        mut tensors: HashMap<String, Tensor>,
        device: &Device,
        dtype: DType,
        source: &Path,
    ) -> Result<Self> {
        let mut params = Vec::new();
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
            let tensor = tensor
                .to_dtype(DType::F32)
                .and_then(|t| t.to_device(device))
                .ctx(&format!("converting `{name}`"))?;
            params.push((
                name,
                Var::from_tensor(&tensor).ctx("making a trainable variable")?,
            ));
        }
        Self::assemble(config, params, device, dtype)
    }

    fn assemble(
        config: Config,
        params: Vec<(String, Var)>,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let by_name: HashMap<&str, &Var> = params.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let get = |name: &str| -> Result<Var> {
            by_name
                .get(name)
                .map(|v| (*v).clone())
                .ok_or_else(|| Error::Params(format!("internal: parameter `{name}` not built")))
        };
        let bias = |name: String| -> Result<Option<Var>> {
            if config.attention_bias {
                get(&name).map(Some)
            } else {
                Ok(None)
            }
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("model.layers.{l}");
            layers.push(Layer {
                input_norm: get(&format!("{p}.input_layernorm.weight"))?,
                q: get(&format!("{p}.self_attn.q_proj.weight"))?,
                q_bias: bias(format!("{p}.self_attn.q_proj.bias"))?,
                k: get(&format!("{p}.self_attn.k_proj.weight"))?,
                k_bias: bias(format!("{p}.self_attn.k_proj.bias"))?,
                v: get(&format!("{p}.self_attn.v_proj.weight"))?,
                v_bias: bias(format!("{p}.self_attn.v_proj.bias"))?,
                o: get(&format!("{p}.self_attn.o_proj.weight"))?,
                post_norm: get(&format!("{p}.post_attention_layernorm.weight"))?,
                gate: get(&format!("{p}.mlp.gate_proj.weight"))?,
                up: get(&format!("{p}.mlp.up_proj.weight"))?,
                down: get(&format!("{p}.mlp.down_proj.weight"))?,
            });
        }
        let embed = get("model.embed_tokens.weight")?;
        let norm = get("model.norm.weight")?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(get("lm_head.weight")?)
        };
        Ok(Model {
            config,
            params,
            embed,
            layers,
            norm,
            lm_head,
            dtype,
            device: device.clone(),
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

    /// Every trainable parameter under its Hugging Face name, in [`Config::parameters`] order.
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// The log-probability of every action token of the batch under the model, `[N]` f32.
    pub fn action_logprobs(&self, batch: &Batch) -> Result<Tensor> {
        self.forward(batch).ctx("forward pass")
    }

    fn w(&self, v: &Var) -> candle_core::Result<Tensor> {
        v.as_tensor().to_dtype(self.dtype)
    }

    fn linear(&self, x: &Tensor, w: &Var, b: Option<&Var>) -> candle_core::Result<Tensor> {
        let y = x.matmul(&self.w(w)?.t()?)?;
        match b {
            Some(b) => y.broadcast_add(&self.w(b)?),
            None => Ok(y),
        }
    }

    fn rms_norm(&self, x: &Tensor, w: &Var) -> candle_core::Result<Tensor> {
        RmsNorm::new(self.w(w)?, self.config.rms_norm_eps).forward_diff(x)
    }

    fn forward(&self, batch: &Batch) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let (b, t) = batch.ids.dims2()?;
        let (nh, nkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let flat_ids = batch.ids.flatten_all()?;
        // [B·T, H]: rows are positions; attention reshapes to heads and back.
        let mut h = self.w(&self.embed)?.index_select(&flat_ids, 0)?;

        let inv_freq = Tensor::from_vec(c.inv_freq(), (1, hd / 2), &self.device)?;
        let pos = Tensor::arange(0u32, t as u32, &self.device)?
            .to_dtype(DType::F32)?
            .reshape((t, 1))?;
        let freqs = pos.broadcast_mul(&inv_freq)?;
        let (cos, sin) = (
            freqs.cos()?.to_dtype(self.dtype)?,
            freqs.sin()?.to_dtype(self.dtype)?,
        );
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (1, 1, t, t), &self.device)?.to_dtype(self.dtype)?;
        let scale = 1.0 / (hd as f64).sqrt();

        for layer in &self.layers {
            let x = self.rms_norm(&h, &layer.input_norm)?;
            let heads =
                |y: Tensor, n: usize| y.reshape((b, t, n, hd))?.transpose(1, 2)?.contiguous();
            let q = heads(self.linear(&x, &layer.q, layer.q_bias.as_ref())?, nh)?;
            let k = heads(self.linear(&x, &layer.k, layer.k_bias.as_ref())?, nkv)?;
            let v = heads(self.linear(&x, &layer.v, layer.v_bias.as_ref())?, nkv)?;
            let q = rotary_emb::rope_slow(&q, &cos, &sin)?;
            let k = repeat_kv(rotary_emb::rope_slow(&k, &cos, &sin)?, nh / nkv)?;
            let v = repeat_kv(v, nh / nkv)?;
            let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(&mask)?;
            let probs = ops::softmax(&scores, D::Minus1)?;
            let attn = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((b * t, nh * hd))?;
            h = (h + self.linear(&attn, &layer.o, None)?)?;

            let x = self.rms_norm(&h, &layer.post_norm)?;
            let gated = self.linear(&x, &layer.gate, None)?.silu()?;
            let up = self.linear(&x, &layer.up, None)?;
            h = (h + self.linear(&(gated * up)?, &layer.down, None)?)?;
        }
        // Only the positions that predict action tokens reach the head: a prompt's logits over a
        // 150k vocabulary would dominate memory and time and are never used.
        let h = h.index_select(&batch.positions, 0)?;
        let h = self.rms_norm(&h, &self.norm)?;
        let logits = self
            .linear(&h, self.lm_head.as_ref().unwrap_or(&self.embed), None)?
            .to_dtype(DType::F32)?;
        let logp = ops::log_softmax(&logits, D::Minus1)?;
        logp.gather(&batch.targets.unsqueeze(1)?, 1)?.squeeze(1)
    }
}

/// `[B, kv, T, d]` → `[B, kv·n, T, d]`, each key/value head serving `n` query heads in turn, as
/// `repeat_kv` in transformers.
fn repeat_kv(x: Tensor, n: usize) -> candle_core::Result<Tensor> {
    if n == 1 {
        return Ok(x);
    }
    let (b, kv, t, d) = x.dims4()?;
    Tensor::cat(&vec![&x; n], 2)?.reshape((b, kv * n, t, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_rope_scaling_matches_transformers() {
        // `_compute_llama3_parameters` (transformers' modeling_rope_utils.py) re-done in python3 on
        // head_dim 8, theta 500000, factor 8, low 1, high 4, original 8192:
        // import math; inv = [1.0 / 500000 ** (k / 8) for k in range(0, 8, 2)]; lo, hi = 8192 / 1, 8192 / 4
        // def f(x): wl = 2 * math.pi / x; s = (8192 / wl - 1) / (4 - 1)
        //           return x if wl < hi else x / 8 if wl > lo else (1 - s) * x / 8 + s * x
        // [f(x) for x in inv] → [1.0, 0.037606030, 0.000524846, 6.64787e-06]
        let mut c = Config::qwen2_tiny(10);
        c.rope_theta = 500_000.0;
        c.rope_scaling = Some(Llama3RopeScaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        });
        let got = c.inv_freq();
        let expected = [1.0f32, 0.037_606_03, 0.000_524_846, 6.647_87e-6];
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() <= 1e-4 * e.abs(), "{got:?} vs {expected:?}");
        }
    }

    #[test]
    fn qwen2_5_0_5b_has_494m_parameters() {
        // Qwen2.5-0.5B's model card: 0.49B parameters (494,032,768 counted from its safetensors).
        assert_eq!(Config::qwen2_5_0_5b().n_parameters(), 494_032_768);
    }

    #[test]
    fn config_json_errors_name_the_problem() {
        let parse = |s: &str| {
            serde_json::from_str::<HfConfig>(s)
                .unwrap()
                .into_config(Path::new("m/config.json"))
        };
        let base = r#""vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2"#;
        let e = parse(&format!(r#"{{"model_type": "gpt2", {base}}}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("m/config.json") && e.contains("gpt2"), "{e}");
        let e = parse(&format!(
            r#"{{"model_type": "qwen2", "num_key_value_heads": 3, {base}}}"#
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("num_key_value_heads = 3"), "{e}");
        let c = parse(&format!(r#"{{"model_type": "llama", {base}}}"#)).unwrap();
        assert_eq!(
            (c.head_dim, c.num_key_value_heads, c.attention_bias),
            (4, 2, false)
        );
    }
}
