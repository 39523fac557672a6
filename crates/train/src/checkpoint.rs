//! Checkpoints in the Hugging Face layout, plus what a run needs to resume.
//!
//! `OUT/` holds `config.json` (the source's, with `torch_dtype` set to `float32`, the dtype of the
//! saved weights), `model.safetensors` (every parameter under its Hugging Face name; a tied LM head
//! is not stored twice), the tokenizer files copied from the source, `optimizer.safetensors`
//! (AdamW moments `m.*`/`v.*` and the initial model's action-token log-probs `init_logprobs`),
//! `trainer_state.json` and `metrics.jsonl`. So `OUT/` loads wherever the source model did.
//!
//! Under LoRA, `config.json` and `model.safetensors` give way to PEFT's `adapter_config.json` and
//! `adapter_model.safetensors` (the optimizer's moments are the adapters'), and `--merge` adds
//! `OUT/merged/`, a model folder with the adapter folded into the base weights.
//!
//! Every file is written to a temporary name in `OUT/` and renamed. Both safetensors files carry
//! the step in their metadata and `trainer_state.json` is written last, so a run interrupted
//! while saving leaves either the previous checkpoint or one that resuming reports as incomplete.

use crate::config::TrainConfig;
use crate::data::Sample;
use crate::error::{Error, Result};
use crate::lora::{LoraConfig, ADAPTER_CONFIG, ADAPTER_WEIGHTS, MERGED_DIR};
use crate::model::Model;
use crate::optim::AdamW;
use candle_core::{Device, Tensor};
use fnv::FnvHasher;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

pub const TRAINER_STATE: &str = "trainer_state.json";
pub const OPTIMIZER: &str = "optimizer.safetensors";
pub const METRICS: &str = "metrics.jsonl";
/// The initial model's log-prob of every action token, in sample order (in `optimizer.safetensors`).
pub const INIT_LOGPROBS: &str = "init_logprobs";
/// Files copied from the source model when present, so the checkpoint is a complete model folder.
const COPIED: &[&str] = &[
    crate::folder_layout::TOKENIZER,
    crate::folder_layout::TOKENIZER_CONFIG,
    "special_tokens_map.json",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
];
const STEP_KEY: &str = "credit_train_step";

/// What `trainer_state.json` records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Optimizer steps completed.
    pub step: u64,
    pub config: TrainConfig,
    /// The model the run started from.
    pub source_model: PathBuf,
    /// Identifies the training samples, so a resume on other data is refused.
    pub samples: Fingerprint,
    pub credit_train_version: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub count: usize,
    pub action_tokens: usize,
    /// FNV-1a over every sample's ids, action start, advantage and logged log-probs.
    pub hash: String,
}

impl Fingerprint {
    pub fn of(samples: &[Sample]) -> Self {
        // Bytes in little-endian order, written as slices: `Hasher::write_u32` and friends would
        // use the machine's order, and a checkpoint must resume on any machine.
        let mut h = FnvHasher::default();
        for s in samples {
            for id in &s.input_ids {
                h.write(&id.to_le_bytes());
            }
            h.write(&(s.action_start as u64).to_le_bytes());
            h.write(&s.advantage.to_bits().to_le_bytes());
            h.write(&s.old_logprob.map_or(u32::MAX, f32::to_bits).to_le_bytes());
            for lp in s.old_token_logprobs.iter().flatten() {
                h.write(&lp.to_bits().to_le_bytes());
            }
        }
        let h = h.finish();
        Fingerprint {
            count: samples.len(),
            action_tokens: samples.iter().map(Sample::action_len).sum(),
            hash: format!("{h:016x}"),
        }
    }
}

/// Written whole or not at all (safetensors writes the temporary by name).
fn write_safetensors(path: &Path, tensors: Vec<(String, Tensor)>, step: u64) -> Result<()> {
    let metadata = HashMap::from([
        ("format".to_string(), "pt".to_string()),
        (STEP_KEY.to_string(), step.to_string()),
    ]);
    credit_output::write_file_at(path, |tmp| {
        safetensors::serialize_to_file(tensors, Some(metadata), tmp).map_err(|e| {
            Error::Checkpoint {
                path: path.to_path_buf(),
                message: format!("writing: {e}"),
            }
        })
    })
}

/// The tensors of a safetensors file written by [`save`], on the CPU, and the step it records.
pub fn read_stamped(path: &Path) -> Result<(HashMap<String, Tensor>, Option<u64>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |message: String| Error::Checkpoint {
        path: path.to_path_buf(),
        message,
    };
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let step = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(STEP_KEY))
        .and_then(|s| s.parse().ok());
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    Ok((tensors, step))
}

pub fn read_state(dir: &Path) -> Result<Option<TrainerState>> {
    let path = dir.join(TRAINER_STATE);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Json {
            path,
            line: 0,
            message: e.to_string(),
        })
}

/// Everything a checkpoint holds besides the model.
pub struct Saved<'a> {
    pub state: &'a TrainerState,
    /// `config.json` of the source model, as written.
    pub config_json: &'a serde_json::Value,
    pub optimizer: &'a AdamW,
    pub init_logprobs: Option<&'a [f32]>,
    /// Write `merged/` too, when the run asked for it (`LoraConfig::merge`): done at the last save
    /// only, since it reads the whole base model again.
    pub merge: bool,
}

/// Writes the checkpoint of `model` at `saved.state.step` into `dir`: the model in the Hugging
/// Face layout, or under LoRA the PEFT adapter (and with `--merge`, `merged/`, a model folder).
pub fn save(dir: &Path, model: &Model, saved: &Saved) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let step = saved.state.step;
    let source = &saved.state.source_model;
    copy_model_files(source, dir)?;
    let trained = model
        .params()
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect::<Vec<_>>();
    match model.lora() {
        None => {
            write_model_config(dir, saved.config_json)?;
            write_safetensors(&dir.join(crate::folder_layout::WEIGHTS), trained, step)?;
        }
        Some(lora) => {
            let base = source.display().to_string();
            write_json(&dir.join(ADAPTER_CONFIG), &lora.peft_config(&base))?;
            write_safetensors(&dir.join(ADAPTER_WEIGHTS), trained, step)?;
            if saved.merge && lora.merge {
                write_merged(&dir.join(MERGED_DIR), model, lora, saved, step)?;
            }
        }
    }
    let mut optimizer = saved.optimizer.state();
    if let Some(lp) = saved.init_logprobs {
        let t = Tensor::from_slice(lp, lp.len(), &Device::Cpu)
            .map_err(|e| Error::candle("saving init_logprobs", e))?;
        optimizer.push((INIT_LOGPROBS.to_string(), t));
    }
    write_safetensors(&dir.join(OPTIMIZER), optimizer, step)?;
    write_json(&dir.join(TRAINER_STATE), &saved.state)
}

/// `config.json` of the source with `torch_dtype` `float32`, the dtype of the weights written.
fn write_model_config(dir: &Path, config_json: &serde_json::Value) -> Result<()> {
    let mut config = config_json.clone();
    config["torch_dtype"] = serde_json::Value::String("float32".into());
    write_json(&dir.join(crate::folder_layout::CONFIG), &config)
}

/// The tokenizer and generation files of `source`, so that `dir` is a complete model folder (a
/// GGUF source's are written from its metadata).
fn copy_model_files(source: &Path, dir: &Path) -> Result<()> {
    if crate::gguf::is_gguf(source) {
        return crate::gguf::write_tokenizer_files(source, dir);
    }
    if source.canonicalize().ok() == dir.canonicalize().ok() {
        return Ok(());
    }
    for name in COPIED {
        let from = source.join(name);
        if from.is_file() {
            let bytes = std::fs::read(&from).map_err(|e| Error::io(&from, e))?;
            let to = dir.join(name);
            credit_output::write_file(&to, |f| std::io::Write::write_all(f, &bytes))?;
        }
    }
    Ok(())
}

/// `dir` as a plain Hugging Face model folder holding the source's weights with the adapter
/// folded in (f32). The base is read again from the source files (a GGUF source dequantised), not
/// from the model's frozen copy, which is bf16 on a GPU.
fn write_merged(
    dir: &Path,
    model: &Model,
    lora: &LoraConfig,
    saved: &Saved,
    step: u64,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let source = &saved.state.source_model;
    copy_model_files(source, dir)?;
    write_model_config(dir, saved.config_json)?;
    let base = crate::load::read_weights(source)?;
    let adapters = model
        .params()
        .iter()
        .map(|(n, v)| {
            let t = v
                .as_tensor()
                .to_device(&Device::Cpu)
                .map_err(|e| Error::candle("merging LoRA", e))?;
            Ok((n.clone(), t))
        })
        .collect::<Result<HashMap<_, _>>>()?;
    let merged = crate::lora::merge(base, &adapters, model.config(), lora)?;
    write_safetensors(&dir.join(crate::folder_layout::WEIGHTS), merged, step)
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::Json {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    })?;
    Ok(credit_output::write_file(path, |f| {
        std::io::Write::write_all(f, format!("{text}\n").as_bytes())
    })?)
}

/// Checks that a safetensors file of the checkpoint was written at the state's step.
pub fn check_step(path: &Path, found: Option<u64>, state: &TrainerState) -> Result<()> {
    if found == Some(state.step) {
        return Ok(());
    }
    Err(Error::Checkpoint {
        path: path.to_path_buf(),
        message: format!(
            "written at step {}, {TRAINER_STATE} says step {}: the checkpoint is incomplete (interrupted while saving?); start again without --resume or restore the folder",
            found.map_or("?".into(), |s| s.to_string()),
            state.step
        ),
    })
}

/// Drops metric lines past `step` (logged after the checkpoint, before an interruption), so a
/// resumed run's metrics read as one run.
pub fn truncate_metrics(path: &Path, step: u64) -> Result<()> {
    if !path.is_file() {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v.get("step")?.as_u64())
                .is_some_and(|s| s <= step)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    Ok(credit_output::write_file(path, |f| {
        std::io::Write::write_all(f, kept.as_bytes())
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_changes_with_any_field() {
        let s = Sample {
            input_ids: vec![1, 2, 3],
            action_start: 2,
            advantage: 1.0,
            old_logprob: None,
            old_token_logprobs: None,
        };
        let base = Fingerprint::of(std::slice::from_ref(&s));
        assert_eq!((base.count, base.action_tokens), (1, 1));
        for edit in [
            |s: &mut Sample| s.advantage = -1.0,
            |s: &mut Sample| s.action_start = 1,
            |s: &mut Sample| s.old_logprob = Some(-1.0),
        ] {
            let mut t = s.clone();
            edit(&mut t);
            assert_ne!(Fingerprint::of(&[t]).hash, base.hash);
        }
    }

    /// `trainer_state.json` records this hash; a resume compares it with the samples' own.
    #[test]
    fn fingerprint_hash_is_pinned() {
        let samples = [
            Sample {
                input_ids: vec![1, 2, 3, 151_643],
                action_start: 2,
                advantage: 0.5,
                old_logprob: Some(-1.25),
                old_token_logprobs: Some(vec![-0.5, -0.75]),
            },
            Sample {
                input_ids: vec![7, 8],
                action_start: 1,
                advantage: -1.0,
                old_logprob: None,
                old_token_logprobs: None,
            },
        ];
        let hash = |s: &[Sample]| Fingerprint::of(s).hash;
        assert_eq!(hash(&[]), "cbf29ce484222325");
        assert_eq!(hash(&samples[..1]), "fb94755c05103b4e");
        assert_eq!(hash(&samples), "5d8ec1df12d96bd9");
    }

    #[test]
    fn metrics_past_the_checkpoint_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(METRICS);
        std::fs::write(&path, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n").unwrap();
        truncate_metrics(&path, 2).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"step\":1}\n{\"step\":2}\n"
        );
    }
}
