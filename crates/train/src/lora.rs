//! LoRA (Hu et al. 2021): the base weights stay frozen and each targeted projection learns a
//! low-rank update, W x + (α/r)·B A drop(x), as Hugging Face PEFT's `LoraLayer` computes it
//! (dropout on the adapter's input only, `lora_B` initialised to zero so training starts from the
//! base model, `lora_A` from PEFT's default Kaiming-uniform, bound 1/√in).
//!
//! The adapter is saved as PEFT saves one, so `PeftModel.from_pretrained(base, DIR)` loads it:
//! `adapter_config.json` and `adapter_model.safetensors` with tensors named
//! `base_model.model.<module>.lora_A.weight` (`[r, in]`) and `….lora_B.weight` (`[out, r]`),
//! `<module>` the projection's Hugging Face name (`model.layers.0.self_attn.q_proj`). [`merge`]
//! folds an adapter into the base weights, W + (α/r)·B A, for a plain model folder.

use crate::arch::Config;
use crate::error::{Context, Error, Result};
use crate::rng::SplitMix64;
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub const ADAPTER_CONFIG: &str = "adapter_config.json";
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// `--merge` writes the merged model here, inside the checkpoint folder.
pub const MERGED_DIR: &str = "merged";

/// A projection LoRA can adapt, in the order of [`Target::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Target {
    pub const ALL: [Target; 7] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
    ];

    /// The module's name, as PEFT's `target_modules` lists it.
    pub fn module(self) -> &'static str {
        match self {
            Target::Q => "q_proj",
            Target::K => "k_proj",
            Target::V => "v_proj",
            Target::O => "o_proj",
            Target::Gate => "gate_proj",
            Target::Up => "up_proj",
            Target::Down => "down_proj",
        }
    }

    /// The module's Hugging Face path in layer `l`, e.g. `model.layers.0.self_attn.q_proj`.
    pub fn path(self, l: usize) -> String {
        let block = match self {
            Target::Q | Target::K | Target::V | Target::O => "self_attn",
            Target::Gate | Target::Up | Target::Down => "mlp",
        };
        format!("model.layers.{l}.{block}.{}", self.module())
    }

    /// `[out, in]` of the projection.
    pub fn shape(self, c: &Config) -> [usize; 2] {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let (q, kv) = (
            c.num_attention_heads * c.head_dim,
            c.num_key_value_heads * c.head_dim,
        );
        match self {
            Target::Q => [q, h],
            Target::K | Target::V => [kv, h],
            Target::O => [h, q],
            Target::Gate | Target::Up => [i, h],
            Target::Down => [h, i],
        }
    }
}

impl std::str::FromStr for Target {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let short = s.trim().trim_end_matches("_proj");
        Target::ALL
            .into_iter()
            .find(|t| t.module().trim_end_matches("_proj") == short)
            .ok_or_else(|| {
                Error::Params(format!(
                    "`--lora-targets`: unknown module `{s}` (expected q, k, v, o, gate, up, down)"
                ))
            })
    }
}

/// Parses `q,k,v,o,gate,up,down` (also `q_proj,…`) into a sorted, de-duplicated list.
pub fn parse_targets(list: &str) -> Result<Vec<Target>> {
    let mut targets = list
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(str::parse)
        .collect::<Result<Vec<Target>>>()?;
    targets.sort();
    targets.dedup();
    if targets.is_empty() {
        return Err(Error::Params(
            "`--lora-targets` names no module (e.g. q,k,v,o,gate,up,down)".into(),
        ));
    }
    Ok(targets)
}

/// The adapter's hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// r, the rank of B A.
    pub rank: usize,
    /// α: the update is scaled by α / r.
    pub alpha: f64,
    /// Dropout on the adapter's input while training.
    pub dropout: f64,
    pub targets: Vec<Target>,
    /// Also write the base weights with the adapter folded in, to `OUT/merged/`.
    #[serde(default)]
    pub merge: bool,
}

impl Default for LoraConfig {
    /// Rank 8, α 16, dropout 0.05 (PEFT's usual example), every projection of every layer.
    fn default() -> Self {
        LoraConfig {
            rank: 8,
            alpha: 16.0,
            dropout: 0.05,
            targets: Target::ALL.to_vec(),
            merge: false,
        }
    }
}

impl LoraConfig {
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Checks every field; messages name the flag.
    pub fn check(&self) -> Result<()> {
        let fail = |m: &str| Err(Error::Params(m.to_string()));
        if self.rank == 0 {
            return fail("`--lora-rank` must be at least 1");
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return fail("`--lora-alpha` must be a positive number");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return fail("`--lora-dropout` must lie in [0, 1)");
        }
        if self.targets.is_empty() {
            return fail("`--lora-targets` names no module");
        }
        Ok(())
    }

    /// PEFT's `adapter_config.json` for this adapter on the model at `base`.
    pub fn peft_config(&self, base: &str) -> serde_json::Value {
        let modules: Vec<&str> = self.targets.iter().map(|t| t.module()).collect();
        serde_json::json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base,
            "r": self.rank,
            "lora_alpha": self.alpha,
            "lora_dropout": self.dropout,
            "target_modules": modules,
            "bias": "none",
            "fan_in_fan_out": false,
            "init_lora_weights": true,
            "inference_mode": true,
            "modules_to_save": null,
            "layers_to_transform": null,
            "layers_pattern": null,
            "rank_pattern": {},
            "alpha_pattern": {},
            "use_rslora": false,
            "use_dora": false,
            "revision": null,
        })
    }
}

/// PEFT's names of the `lora_A` and `lora_B` tensors of `module` (a Hugging Face module path).
pub fn peft_names(module: &str) -> (String, String) {
    (
        format!("base_model.model.{module}.lora_A.weight"),
        format!("base_model.model.{module}.lora_B.weight"),
    )
}

/// Every adapter tensor of `config` under `lora`: (PEFT name, shape), A before B, layer by layer.
pub fn adapter_shapes(config: &Config, lora: &LoraConfig) -> Vec<(String, Vec<usize>)> {
    let mut out = Vec::new();
    for l in 0..config.num_hidden_layers {
        for &t in &lora.targets {
            let [o, i] = t.shape(config);
            let (a, b) = peft_names(&t.path(l));
            out.push((a, vec![lora.rank, i]));
            out.push((b, vec![o, lora.rank]));
        }
    }
    out
}

/// Fresh adapters: A uniform on ±1/√in (PEFT's `kaiming_uniform_(a=√5)`), B zero, f32 on the CPU.
pub fn init_adapters(
    config: &Config,
    lora: &LoraConfig,
    seed: u64,
) -> Result<Vec<(String, Tensor)>> {
    let mut rng = SplitMix64(seed ^ 0x6c6f_7261);
    adapter_shapes(config, lora)
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = if name.contains(".lora_A.") {
                let bound = 1.0 / (shape[1] as f32).sqrt();
                (0..n).map(|_| bound * rng.next_signed()).collect()
            } else {
                vec![0.0; n]
            };
            let t = Tensor::from_vec(values, shape, &Device::Cpu).ctx("initialising LoRA")?;
            Ok((name, t))
        })
        .collect()
}

/// The base weights with every adapter folded in: W ← W + (α/r)·B A, in f32. Tensors the adapter
/// does not touch are returned unchanged (converted to f32).
pub fn merge(
    base: HashMap<String, Tensor>,
    adapters: &HashMap<String, Tensor>,
    config: &Config,
    lora: &LoraConfig,
) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::with_capacity(base.len());
    let mut base = base;
    for (name, _) in config.parameters() {
        let Some(w) = base.remove(&name) else {
            continue;
        };
        let w = w.to_dtype(DType::F32).ctx("merging LoRA")?;
        let module = name.trim_end_matches(".weight");
        let (a_name, b_name) = peft_names(module);
        let merged = match (adapters.get(&a_name), adapters.get(&b_name)) {
            (Some(a), Some(b)) => {
                let delta = b
                    .to_dtype(DType::F32)
                    .and_then(|b| b.matmul(&a.to_dtype(DType::F32)?))
                    .and_then(|d| d * lora.scale())
                    .ctx(&format!("merging the adapter of `{module}`"))?;
                (w + delta).ctx(&format!("merging the adapter of `{module}`"))?
            }
            _ => w,
        };
        out.push((name, merged));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_short_and_peft_names() {
        assert_eq!(
            parse_targets("v,q_proj, gate,q").unwrap(),
            [Target::Q, Target::V, Target::Gate]
        );
        let e = parse_targets("q,mlp").unwrap_err().to_string();
        assert!(e.contains("`mlp`") && e.contains("--lora-targets"), "{e}");
        assert!(parse_targets(",").is_err());
        assert_eq!(
            Target::Down.path(3),
            "model.layers.3.mlp.down_proj".to_string()
        );
    }

    #[test]
    fn adapter_shapes_follow_peft() {
        // Tiny Qwen2: hidden 32, 4 heads × 8, 2 kv heads × 8, intermediate 64.
        let c = Config::qwen2_tiny(300);
        let lora = LoraConfig {
            rank: 4,
            targets: vec![Target::K, Target::Down],
            ..LoraConfig::default()
        };
        let shapes = adapter_shapes(&c, &lora);
        assert_eq!(shapes.len(), 2 * 2 * 2);
        assert_eq!(
            shapes[0],
            (
                "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight".to_string(),
                vec![4, 32]
            )
        );
        assert_eq!(
            shapes[1],
            (
                "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight".to_string(),
                vec![16, 4]
            )
        );
        assert_eq!(
            shapes[3],
            (
                "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight".to_string(),
                vec![32, 4]
            )
        );
        let init = init_adapters(&c, &lora, 1).unwrap();
        let a = init[0].1.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let bound = 1.0 / 32f32.sqrt();
        assert!(a.iter().all(|v| v.abs() <= bound) && a.iter().any(|v| *v != 0.0));
        let b = init[1].1.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(b.iter().all(|v| *v == 0.0));
    }

    #[test]
    fn peft_config_has_the_keys_peft_reads() {
        let v = LoraConfig::default().peft_config("/m");
        assert_eq!(v["peft_type"], "LORA");
        assert_eq!(v["r"], 8);
        assert_eq!(v["lora_alpha"], 16.0);
        assert_eq!(v["target_modules"][6], "down_proj");
        assert_eq!(v["base_model_name_or_path"], "/m");
    }
}
