//! Reading a model as users have it: a Hugging Face model directory (`config.json`, the weights
//! as one `model.safetensors` or shards listed in `model.safetensors.index.json`,
//! `tokenizer.json`, and the chat markup that `tokenizer_config.json`'s `chat_template` uses), or
//! a single GGUF file read as that folder ([`crate::gguf`]). A path that is a file is read as
//! GGUF; a folder, as a Hugging Face directory.

use crate::arch::{Config, HfConfig};
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::gguf::{is_gguf, Gguf};
use crate::lora::LoraConfig;
use crate::model::Model;
use candle_core::{Device, Tensor};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

pub use crate::folder_layout::{CONFIG, TOKENIZER, TOKENIZER_CONFIG, WEIGHTS, WEIGHTS_INDEX};

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Json {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    })
}

/// What a model folder must hold, for messages about one that does not.
const MODEL_DIR_HOLDS: &str =
    "a Hugging Face model folder holds config.json, tokenizer.json and the *.safetensors weights";

/// `org/name` and `name` when `dir` reads as a Hugging Face Hub id (two parts, neither `.` nor `..`, not
/// absolute) rather than a path someone made.
fn hub_name(dir: &Path) -> Option<(&str, &str)> {
    let name = dir.to_str()?;
    let (org, model) = name.split_once('/')?;
    let part = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    (part(org) && part(model)).then_some((name, model))
}

/// Why `dir` cannot be a model, checked before any work so that a mistyped `--model` or
/// `--backbone` is named as such instead of as the first file missing from it: `None` when it
/// is a GGUF file, or a folder with `config.json`, `tokenizer.json` and some `*.safetensors`.
pub fn model_dir_problem(dir: &Path) -> Option<String> {
    if is_gguf(dir) {
        if crate::gguf::has_magic(dir) {
            return None;
        }
        return Some(format!("not a folder, and not a GGUF file (which starts with `GGUF`): {MODEL_DIR_HOLDS}; or pass a .gguf file"));
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(match hub_name(dir) {
                Some((name, model)) => format!("no such folder or file; credit reads a local model, not a Hub name: fetch it with `huggingface-cli download {name} --local-dir models/{model}`, then pass `models/{model}`"),
                None => "no such folder or file".into(),
            })
        }
        Err(e) => return Some(format!("cannot list it: {e}")),
    };
    let has_weights = entries
        .filter_map(|e| e.ok())
        .any(|e| e.path().extension().is_some_and(|x| x == "safetensors"));
    let missing: Vec<&str> = [
        (CONFIG, dir.join(CONFIG).is_file()),
        (TOKENIZER, dir.join(TOKENIZER).is_file()),
        ("*.safetensors", has_weights),
    ]
    .into_iter()
    .filter(|(_, present)| !present)
    .map(|(name, _)| name)
    .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "not a model folder: no {} ({MODEL_DIR_HOLDS})",
        missing.join(", no ")
    ))
}

/// `config.json` as written (kept to copy into checkpoints) and the [`Config`] it describes; for
/// a GGUF file, the `config.json` of its architecture.
pub fn read_config(dir: &Path) -> Result<(serde_json::Value, Config)> {
    if is_gguf(dir) {
        let config = Gguf::open(dir)?.config()?;
        return Ok((config.to_hf_json("float32"), config));
    }
    let path = dir.join(CONFIG);
    if !path.is_file() {
        return Err(Error::Model {
            path: dir.to_path_buf(),
            message: format!("no {CONFIG}: expected a Hugging Face model directory"),
        });
    }
    let raw = read_json(&path)?;
    let hf: HfConfig = serde_json::from_value(raw.clone()).map_err(|e| Error::Json {
        path: path.clone(),
        line: 0,
        message: e.to_string(),
    })?;
    Ok((raw, hf.into_config(&path)?))
}

/// The weight files: the shards named by the index, else `model.safetensors`, else every
/// `*.safetensors` in the directory (sorted).
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join(WEIGHTS_INDEX);
    if index.is_file() {
        let raw = read_json(&index)?;
        let map = raw.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::Json {
            path: index.clone(),
            line: 0,
            message: "no `weight_map` object (expected {\"weight_map\": {\"tensor\": \"shard.safetensors\", …}})".into(),
        })?;
        let mut shards = BTreeSet::new();
        for (tensor, file) in map {
            let file = file.as_str().ok_or_else(|| Error::Json {
                path: index.clone(),
                line: 0,
                message: format!("weight_map[`{tensor}`] is not a file name"),
            })?;
            shards.insert(file.to_string());
        }
        return Ok(shards.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join(WEIGHTS);
    if single.is_file() {
        return Ok(vec![single]);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::Model {
            path: dir.to_path_buf(),
            message: format!("no weights: expected {WEIGHTS}, or shards listed in {WEIGHTS_INDEX}"),
        });
    }
    Ok(files)
}

/// Every tensor of the weight files, on the CPU, in its stored dtype.
pub fn read_tensors(files: &[PathBuf]) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for path in files {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
            Error::Model {
                path: path.clone(),
                message: format!("not a readable safetensors file: {e}"),
            }
        })?;
        out.extend(tensors);
    }
    Ok(out)
}

/// Every weight of the model at `path` (a folder or a GGUF file) under its Hugging Face name, on
/// the CPU: in its stored dtype from safetensors, f32 from GGUF.
pub fn read_weights(path: &Path) -> Result<HashMap<String, Tensor>> {
    if is_gguf(path) {
        let gguf = Gguf::open(path)?;
        return gguf.tensors(&gguf.config()?);
    }
    read_tensors(&weight_files(path)?)
}

/// Loads the model of a Hugging Face directory (or a checkpoint written by this crate) or a GGUF
/// file.
pub fn load_model(dir: &Path, device: DeviceKind) -> Result<Model> {
    let (_, config) = read_config(dir)?;
    let tensors = read_weights(dir)?;
    Model::from_tensors(
        config,
        tensors,
        &device.device()?,
        device.compute_dtype(),
        dir,
    )
}

/// Loads the model of `dir` frozen, with LoRA `adapters` over it (PEFT names; fresh ones from
/// [`crate::lora::init_adapters`]).
pub fn load_model_lora(
    dir: &Path,
    device: DeviceKind,
    lora: &LoraConfig,
    adapters: HashMap<String, Tensor>,
) -> Result<Model> {
    let (_, config) = read_config(dir)?;
    let tensors = read_weights(dir)?;
    Model::from_tensors_lora(
        config,
        tensors,
        adapters,
        lora,
        &device.device()?,
        device.compute_dtype(),
        dir,
    )
}

/// The conversation markup the model was tuned with, read from `chat_template`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatFormat {
    /// `<|im_start|>role\n…<|im_end|>` (Qwen and other ChatML models).
    ChatMl,
    /// `<|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|>` (Llama 3).
    Llama3,
    /// No chat template: the prompt is plain text.
    Plain,
}

impl ChatFormat {
    /// From `tokenizer_config.json`'s `chat_template` (a string, or a list of named templates).
    pub fn detect(tokenizer_config: &serde_json::Value) -> Self {
        let template = match tokenizer_config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .filter_map(|t| t.get("template")?.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        if template.contains("<|im_start|>") {
            ChatFormat::ChatMl
        } else if template.contains("<|start_header_id|>") {
            ChatFormat::Llama3
        } else {
            ChatFormat::Plain
        }
    }

    /// One user turn followed by the opening of the assistant's turn, as the template renders
    /// it with `add_generation_prompt=True` and no system message.
    pub fn wrap_user(self, body: &str) -> String {
        match self {
            ChatFormat::ChatMl => format!("<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"),
            ChatFormat::Llama3 => format!("<|start_header_id|>user<|end_header_id|>\n\n{body}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
            ChatFormat::Plain => body.to_string(),
        }
    }

    /// Whether `prompt` is already rendered in this markup.
    pub fn is_rendered(self, prompt: &str) -> bool {
        match self {
            ChatFormat::ChatMl => prompt.contains("<|im_start|>"),
            ChatFormat::Llama3 => prompt.contains("<|start_header_id|>"),
            ChatFormat::Plain => true,
        }
    }

    /// The token that ends the assistant's turn: trained as the action's last token, as the
    /// reference trainers include the EOS of each response.
    pub fn end_of_turn(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => "<|im_end|>",
            ChatFormat::Llama3 => "<|eot_id|>",
            ChatFormat::Plain => "",
        }
    }
}

/// The model's tokenizer and chat markup.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    pub chat: ChatFormat,
}

impl Tokenizer {
    /// `tokenizer.json` (required) and `tokenizer_config.json` (optional: without it, plain
    /// text), or both built from a GGUF file's metadata.
    pub fn load(dir: &Path) -> Result<Self> {
        if is_gguf(dir) {
            let gguf = Gguf::open(dir)?;
            let json = gguf.tokenizer_json()?.to_string();
            let inner = json
                .parse::<tokenizers::Tokenizer>()
                .map_err(|e| Error::Tokenizer {
                    path: dir.to_path_buf(),
                    message: format!("the tokenizer in the GGUF metadata: {e}"),
                })?;
            let chat = ChatFormat::detect(&gguf.tokenizer_config()?);
            return Ok(Tokenizer {
                inner,
                path: dir.to_path_buf(),
                chat,
            });
        }
        let path = dir.join(TOKENIZER);
        if !path.is_file() {
            return Err(Error::Tokenizer {
                path,
                message: "missing: the model directory needs the tokenizer it was trained with"
                    .into(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| Error::Tokenizer {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let config = dir.join(TOKENIZER_CONFIG);
        let chat = if config.is_file() {
            ChatFormat::detect(&read_json(&config)?)
        } else {
            ChatFormat::Plain
        };
        Ok(Tokenizer { inner, path, chat })
    }

    /// Token ids of `text`; `special` adds the model's BOS (Llama) where its post-processor has one.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, special)
            .map_err(|e| Error::Tokenizer {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(|e| Error::Tokenizer {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Prompt and action as one id sequence and the index of the first action token. The action
    /// ends with the chat's end-of-turn token; a prompt longer than `max_prompt_tokens` keeps its
    /// last `max_prompt_tokens` tokens (the most recent context).
    pub fn encode_step(
        &self,
        prompt: &str,
        action: &str,
        max_prompt_tokens: usize,
    ) -> Result<(Vec<u32>, usize)> {
        let mut ids = self.encode(prompt, true)?;
        if ids.len() > max_prompt_tokens {
            ids.drain(..ids.len() - max_prompt_tokens);
        }
        let start = ids.len();
        ids.extend(self.encode(&format!("{action}{}", self.chat.end_of_turn()), false)?);
        Ok((ids, start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_format_is_read_from_the_template() {
        let qwen = serde_json::json!({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"});
        let llama = serde_json::json!({"chat_template": [{"name": "default", "template": "<|start_header_id|>{{ role }}<|end_header_id|>"}]});
        assert_eq!(ChatFormat::detect(&qwen), ChatFormat::ChatMl);
        assert_eq!(ChatFormat::detect(&llama), ChatFormat::Llama3);
        assert_eq!(
            ChatFormat::detect(&serde_json::json!({})),
            ChatFormat::Plain
        );
        assert_eq!(
            ChatFormat::ChatMl.wrap_user("go"),
            "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn sharded_index_lists_each_shard_once() {
        let dir = tempfile::tempdir().unwrap();
        let index = serde_json::json!({"weight_map": {"a": "m-00002.safetensors", "b": "m-00001.safetensors", "c": "m-00002.safetensors"}});
        std::fs::write(dir.path().join(WEIGHTS_INDEX), index.to_string()).unwrap();
        let files = weight_files(dir.path()).unwrap();
        assert_eq!(
            files,
            vec![
                dir.path().join("m-00001.safetensors"),
                dir.path().join("m-00002.safetensors")
            ]
        );
    }

    #[test]
    fn a_folder_without_a_model_says_what_is_expected() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_config(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no config.json"), "{e}");
        let e = weight_files(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no weights"), "{e}");
        let e = Tokenizer::load(dir.path()).err().unwrap().to_string();
        assert!(e.contains("tokenizer.json: missing"), "{e}");
    }

    #[test]
    fn model_dir_problem_names_the_folder_kind_or_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        assert_eq!(
            model_dir_problem(&missing).as_deref(),
            Some("no such folder or file")
        );
        assert_eq!(
            model_dir_problem(Path::new("HuggingFaceTB/SmolLM2-135M")).as_deref(),
            Some("no such folder or file; credit reads a local model, not a Hub name: fetch it with `huggingface-cli download HuggingFaceTB/SmolLM2-135M --local-dir models/SmolLM2-135M`, then pass `models/SmolLM2-135M`")
        );
        let file = dir.path().join("config.json");
        std::fs::write(&file, "{}").unwrap();
        let e = model_dir_problem(&file).unwrap();
        assert!(e.starts_with("not a folder, and not a GGUF file"), "{e}");
        let gguf = dir.path().join("m.gguf");
        std::fs::write(&gguf, b"GGUF\x03\0\0\0").unwrap();
        assert_eq!(model_dir_problem(&gguf), None);
        let e = model_dir_problem(dir.path()).unwrap();
        assert!(
            e.starts_with("not a model folder: no tokenizer.json, no *.safetensors ("),
            "{e}"
        );
        std::fs::write(dir.path().join(TOKENIZER), "{}").unwrap();
        std::fs::write(dir.path().join("m-00001.safetensors"), "").unwrap();
        assert_eq!(model_dir_problem(dir.path()), None);
    }
}
