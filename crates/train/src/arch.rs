//! The architecture of a Qwen2/Llama-family model as training needs it ([`Config`]): read from
//! a Hugging Face `config.json` ([`HfConfig`]), written back as one, and the source of every
//! parameter's name and shape, which the model, its LoRA adapters and the test models agree on.

use crate::error::{Error, Result};
use serde::Deserialize;
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

    /// [`Config::qwen2_tiny`] as a Llama model: no q/k/v biases, untied head.
    pub fn llama_tiny(vocab_size: usize) -> Self {
        Config {
            attention_bias: false,
            tie_word_embeddings: false,
            model_type: "llama".into(),
            ..Config::qwen2_tiny(vocab_size)
        }
    }

    /// The shape of SmolLM2-135M (its GGUF's metadata): 30 blocks of width 576.
    pub fn smollm2_135m() -> Self {
        Config {
            vocab_size: 49_152,
            hidden_size: 576,
            intermediate_size: 1536,
            num_hidden_layers: 30,
            num_attention_heads: 9,
            num_key_value_heads: 3,
            head_dim: 64,
            rope_theta: 100_000.0,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: true,
            attention_bias: false,
            rope_scaling: None,
            model_type: "llama".into(),
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
    pub(crate) fn inv_freq(&self) -> Vec<f32> {
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
        for (key, value) in [
            ("rope_theta", self.rope_theta),
            ("rms_norm_eps", self.rms_norm_eps),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(bad(format!("{key} = {value}: must be a positive number")));
            }
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
        for (key, value) in [
            ("rope_theta", "0"),
            ("rope_theta", "-1"),
            ("rms_norm_eps", "0"),
        ] {
            let e = parse(&format!(
                r#"{{"model_type": "llama", "{key}": {value}, {base}}}"#
            ))
            .unwrap_err()
            .to_string();
            assert_eq!(
                e,
                format!("m/config.json: {key} = {value}: must be a positive number")
            );
        }
        let c = parse(&format!(r#"{{"model_type": "llama", {base}}}"#)).unwrap();
        assert_eq!(
            (c.head_dim, c.num_key_value_heads, c.attention_bias),
            (4, 2, false)
        );
    }
}
