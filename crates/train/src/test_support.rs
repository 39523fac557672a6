//! Test models (feature `test-support`): random-weight model folders in the Hugging Face layout,
//! for tests, benchmarks and smoke runs where no real model can be downloaded: `config.json`,
//! weights (one file or shards with an index), a byte-level BPE `tokenizer.json` that encodes any
//! text, and a ChatML `tokenizer_config.json`. The trainer itself never needs them.
//!
//! Weights are uniform with the standard deviation of `initializer_range` 0.02 (norm weights 1),
//! from a seeded SplitMix64 stream, so a seed gives the same model everywhere.

use crate::arch::Config;
use crate::error::{Context, Error, Result};
use crate::rng::SplitMix64;
use candle_core::{DType, Device, Tensor};
use std::path::Path;

/// Byte tokens 0–255, then these specials; a model over this tokenizer needs `vocab_size ≥ 259`.
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub const BYTE_LEVEL_VOCAB: usize = 256 + SPECIAL_TOKENS.len();

/// Qwen2.5's chat template, shortened to the markup `ChatFormat::detect` reads.
const CHAT_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Every parameter of `config` with random values, f32 on the CPU.
pub fn random_tensors(config: &Config, seed: u64) -> Result<Vec<(String, Tensor)>> {
    let mut rng = SplitMix64(seed);
    // Uniform on [−a, a] has standard deviation a/√3.
    let a = 0.02 * 3f32.sqrt();
    config
        .parameters()
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = if name.ends_with("norm.weight") {
                vec![1.0; n]
            } else {
                (0..n).map(|_| a * rng.next_signed()).collect()
            };
            let t = Tensor::from_vec(values, shape, &Device::Cpu).ctx("building random weights")?;
            Ok((name, t))
        })
        .collect()
}

/// Writes a random model directory. `shards > 1` splits the weights over
/// `model-0000k-of-0000n.safetensors` files listed in `model.safetensors.index.json`, as
/// `transformers` does for large models; `dtype` is the stored dtype (`F32` or `BF16`).
pub fn write_model_dir(
    dir: &Path,
    config: &Config,
    seed: u64,
    shards: usize,
    dtype: DType,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let torch_dtype = match dtype {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        _ => "float32",
    };
    write(
        &dir.join(crate::load::CONFIG),
        &serde_json::to_string_pretty(&config.to_hf_json(torch_dtype)).unwrap_or_default(),
    )?;
    let tensors = random_tensors(config, seed)?
        .into_iter()
        .map(|(n, t)| Ok((n, t.to_dtype(dtype).ctx("converting random weights")?)))
        .collect::<Result<Vec<_>>>()?;
    let shards = shards.clamp(1, tensors.len().max(1));
    if shards == 1 {
        save(&dir.join(crate::load::WEIGHTS), tensors)?;
    } else {
        let per = tensors.len().div_ceil(shards);
        let mut weight_map = serde_json::Map::new();
        for (k, chunk) in tensors.chunks(per).enumerate() {
            let file = format!("model-{:05}-of-{:05}.safetensors", k + 1, shards);
            for (name, _) in chunk {
                weight_map.insert(name.clone(), serde_json::Value::String(file.clone()));
            }
            save(&dir.join(&file), chunk.to_vec())?;
        }
        let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
        write(&dir.join(crate::load::WEIGHTS_INDEX), &index.to_string())?;
    }
    write(
        &dir.join(crate::load::TOKENIZER),
        &byte_level_tokenizer().to_string(),
    )?;
    let tokenizer_config = serde_json::json!({
        "chat_template": CHAT_TEMPLATE,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
    });
    write(
        &dir.join(crate::load::TOKENIZER_CONFIG),
        &tokenizer_config.to_string(),
    )
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

fn save(path: &Path, tensors: Vec<(String, Tensor)>) -> Result<()> {
    safetensors::serialize_to_file(tensors, None, path).map_err(|e| Error::Model {
        path: path.to_path_buf(),
        message: format!("writing: {e}"),
    })
}

/// A byte-level BPE tokenizer with no merges: one token per byte (GPT-2's byte-to-character
/// map, as Qwen's tokenizer uses), plus [`SPECIAL_TOKENS`] as added tokens 256, 257, 258.
pub fn byte_level_tokenizer() -> serde_json::Value {
    let vocab: serde_json::Map<String, serde_json::Value> = (0u32..256)
        .map(|b| (byte_char(b as u8).to_string(), serde_json::Value::from(b)))
        .collect();
    let added: Vec<serde_json::Value> = SPECIAL_TOKENS
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::json!({"id": 256 + i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true});
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []
        }
    })
}

/// GPT-2's `bytes_to_unicode`: printable Latin-1 bytes map to themselves, the other 68 to
/// U+0100 onwards in byte order.
fn byte_char(b: u8) -> char {
    let printable = |x: u8| {
        (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x)
    };
    if printable(b) {
        return b as char;
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or('?')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_matches_gpt2() {
        // GPT-2 `bytes_to_unicode()`: b' ' (32) → 'Ġ' (U+0120), b'\n' (10) → 'Ċ' (U+010A),
        // b'A' → 'A', 0xAD → U+0143 ('Ń').
        assert_eq!(
            [
                byte_char(b' '),
                byte_char(b'\n'),
                byte_char(b'A'),
                byte_char(0xAD)
            ],
            ['\u{120}', '\u{10A}', 'A', '\u{143}']
        );
    }
}
