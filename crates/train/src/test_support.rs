//! Test models (feature `test-support`): random-weight model folders in the Hugging Face layout,
//! for tests, benchmarks and smoke runs where no real model can be downloaded: `config.json`,
//! weights (one file or shards with an index), a byte-level BPE `tokenizer.json` that encodes any
//! text, and a ChatML `tokenizer_config.json`; the same Llama models as GGUF files
//! ([`write_gguf`]); and the gate of the tests on the real SmolLM2 GGUF ([`smollm2_gguf`]). The
//! trainer itself never needs them.
//!
//! Weights are uniform with the standard deviation of `initializer_range` 0.02 (norm weights 1),
//! from a seeded SplitMix64 stream, so a seed gives the same model everywhere.

use crate::arch::Config;
use crate::error::{Context, Error, Result};
use crate::rng::SplitMix64;
pub use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use std::io::Write;
use std::path::{Path, PathBuf};

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
        &dir.join(crate::folder_layout::CONFIG),
        &serde_json::to_string_pretty(&config.to_hf_json(torch_dtype)).unwrap_or_default(),
    )?;
    let tensors = random_tensors(config, seed)?
        .into_iter()
        .map(|(n, t)| Ok((n, t.to_dtype(dtype).ctx("converting random weights")?)))
        .collect::<Result<Vec<_>>>()?;
    let shards = shards.clamp(1, tensors.len().max(1));
    if shards == 1 {
        save(&dir.join(crate::folder_layout::WEIGHTS), tensors)?;
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
        write(
            &dir.join(crate::folder_layout::WEIGHTS_INDEX),
            &index.to_string(),
        )?;
    }
    write(
        &dir.join(crate::folder_layout::TOKENIZER),
        &byte_level_tokenizer().to_string(),
    )?;
    let tokenizer_config = serde_json::json!({
        "chat_template": CHAT_TEMPLATE,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
    });
    write(
        &dir.join(crate::folder_layout::TOKENIZER_CONFIG),
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

/// The merges of [`write_gguf`]'s tokenizer, after the bytes and [`SPECIAL_TOKENS`]: `Ġt` is
/// token 259, `he` 260 and `42` 261 (never produced: the `smollm` pre-tokenizer splits digits).
pub const GGUF_MERGES: [&str; 3] = ["Ġ t", "h e", "4 2"];
/// The vocabulary of [`write_gguf`]'s tokenizer without extra tokens.
pub const GGUF_VOCAB: usize = BYTE_LEVEL_VOCAB + GGUF_MERGES.len();

/// A GGUF file's metadata and tensors, in the order written.
pub type GgufParts = (Vec<(String, Value)>, Vec<(String, QTensor)>);

/// A random Llama model as llama.cpp's converter writes it: GGUF tensor names, query and key rows
/// permuted for llama.cpp's RoPE, the `llama.*` metadata, and [`byte_level_tokenizer`]'s
/// vocabulary with [`GGUF_MERGES`] as a `gpt2`/`smollm` tokenizer, plus `<|extra_k|>` control
/// tokens up to `config.vocab_size` (at least 261). `quantized` stores the embedding as Q8_0,
/// projections as Q4_1 and norms as F32 (SmolLM2's file), else every tensor as F32; the
/// quantised blocks need every projection's input width to be a multiple of 32.
pub fn gguf_parts(config: &Config, seed: u64, quantized: bool) -> Result<GgufParts> {
    let merged = GGUF_MERGES.map(|m| m.replace(' ', ""));
    let mut tokens: Vec<String> = (0u8..=255).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(SPECIAL_TOKENS.iter().map(|t| t.to_string()));
    tokens.extend(merged);
    if config.vocab_size < tokens.len() {
        return Err(Error::Params(format!(
            "a GGUF test model needs vocab_size ≥ {}",
            tokens.len()
        )));
    }
    let first_extra = tokens.len();
    tokens.extend((first_extra..config.vocab_size).map(|k| format!("<|extra_{k}|>")));
    let token_type: Vec<Value> = (0..tokens.len())
        .map(|i| {
            let special = (256..256 + SPECIAL_TOKENS.len()).contains(&i) || i >= first_extra;
            Value::I32(if special { 3 } else { 1 })
        })
        .collect();
    let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    let u32 = |n: usize| Value::U32(n as u32);
    let metadata = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", u32(config.num_hidden_layers)),
        ("llama.context_length", u32(2048)),
        ("llama.embedding_length", u32(config.hidden_size)),
        ("llama.feed_forward_length", u32(config.intermediate_size)),
        (
            "llama.attention.head_count",
            u32(config.num_attention_heads),
        ),
        (
            "llama.attention.head_count_kv",
            u32(config.num_key_value_heads),
        ),
        ("llama.rope.freq_base", Value::F32(config.rope_theta as f32)),
        ("llama.rope.dimension_count", u32(config.head_dim)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(config.rms_norm_eps as f32),
        ),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("smollm".into())),
        ("tokenizer.ggml.tokens", strings(tokens)),
        ("tokenizer.ggml.token_type", Value::Array(token_type)),
        (
            "tokenizer.ggml.merges",
            strings(GGUF_MERGES.map(String::from).to_vec()),
        ),
        ("tokenizer.ggml.bos_token_id", u32(257)),
        ("tokenizer.ggml.eos_token_id", u32(258)),
        ("tokenizer.ggml.padding_token_id", u32(256)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        (
            "tokenizer.chat_template",
            Value::String(CHAT_TEMPLATE.into()),
        ),
    ];
    let metadata = metadata
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut tensors = Vec::new();
    for (hf, t) in random_tensors(config, seed)? {
        let name = crate::gguf::gguf_name(&hf)
            .ok_or_else(|| Error::Params(format!("no GGUF name for `{hf}`")))?;
        let t = match crate::gguf::permuted_heads(&hf, config) {
            Some(h) => crate::gguf::permute_rows(&t, h).ctx("permuting q/k rows")?,
            None => t,
        };
        let dtype = match (quantized, t.rank()) {
            (false, _) | (true, 1) => GgmlDType::F32,
            _ if name == "token_embd.weight" => GgmlDType::Q8_0,
            _ => GgmlDType::Q4_1,
        };
        let q = QTensor::quantize(&t, dtype).ctx(&format!("quantising `{name}`"))?;
        tensors.push((name, q));
    }
    Ok((metadata, tensors))
}

/// Sets the metadata `key` of `parts` to `value` (replacing it, or last).
pub fn set_gguf_metadata(parts: &mut GgufParts, key: &str, value: Value) {
    parts.0.retain(|(k, _)| k != key);
    parts.0.push((key.to_string(), value));
}

/// Replaces the tensor `name` of `parts` by `edit` of its values, stored as F32.
pub fn edit_gguf_tensor(
    parts: &mut GgufParts,
    name: &str,
    edit: impl FnOnce(&mut [f32]),
) -> Result<()> {
    let (_, q) = parts
        .1
        .iter_mut()
        .find(|(n, _)| n == name)
        .ok_or_else(|| Error::Params(format!("no tensor `{name}`")))?;
    let t = q.dequantize(&Device::Cpu).ctx("dequantising")?;
    let mut values: Vec<f32> = t.flatten_all().and_then(|t| t.to_vec1()).ctx("reading")?;
    edit(&mut values);
    let t = Tensor::from_vec(values, t.dims(), &Device::Cpu).ctx("rebuilding")?;
    *q = QTensor::quantize(&t, GgmlDType::F32).ctx(&format!("storing `{name}`"))?;
    Ok(())
}

/// Writes [`gguf_parts`] (or parts edited from them) as a GGUF file.
pub fn write_gguf_parts(
    path: &Path,
    metadata: &[(String, Value)],
    tensors: &[(String, QTensor)],
) -> Result<()> {
    let mut file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    candle_core::quantized::gguf_file::write(&mut file, &metadata, &tensors)
        .ctx(&format!("writing {}", path.display()))
}

/// A GGUF metadata value of the array type: `elements` (raw little-endian bytes) of the GGUF type
/// numbered `kind`, under a length that claims `len` of them (more than there are, to lie).
pub fn gguf_array(kind: u32, len: u64, elements: &[u8]) -> Vec<u8> {
    let mut v = kind.to_le_bytes().to_vec();
    v.extend(len.to_le_bytes());
    v.extend(elements);
    v
}

/// The type number of a GGUF array value.
pub const GGUF_ARRAY: u32 = 9;
const GGUF_STRING: u32 = 8;

/// The GGUF file `gguf` (as [`write_gguf_parts`] writes it: version 2, u64 counts) with
/// `entries` put before its metadata: each a key, a GGUF type number and the value's raw bytes
/// (see [`gguf_array`]). A string entry follows them, as long as it takes to keep the tensor data
/// 32-byte aligned where the tensor directory says it is.
pub fn splice_gguf_metadata(gguf: &[u8], entries: &[(&str, u32, Vec<u8>)]) -> Result<Vec<u8>> {
    const COUNTS_END: usize = 24;
    let kv_count = gguf
        .get(16..COUNTS_END)
        .and_then(|b| Some(u64::from_le_bytes(b.try_into().ok()?)))
        .ok_or_else(|| Error::Params("not a GGUF file of version 2 or 3".into()))?;
    let entry = |key: &str, kind: u32, value: &[u8]| {
        let mut e = (key.len() as u64).to_le_bytes().to_vec();
        e.extend(key.as_bytes());
        e.extend(kind.to_le_bytes());
        e.extend(value);
        e
    };
    let mut inserted: Vec<u8> = entries
        .iter()
        .flat_map(|(key, kind, value)| entry(key, *kind, value))
        .collect();
    let padding_key = "credit.test.padding";
    let bare = entry(padding_key, GGUF_STRING, &0u64.to_le_bytes()).len();
    let fill = (32 - (inserted.len() + bare) % 32) % 32;
    let mut text = (fill as u64).to_le_bytes().to_vec();
    text.extend(std::iter::repeat_n(b' ', fill));
    inserted.extend(entry(padding_key, GGUF_STRING, &text));
    let mut out = gguf[..16].to_vec();
    // Wrapping: a fuzzed count may be anything.
    out.extend(
        kv_count
            .wrapping_add(entries.len() as u64 + 1)
            .to_le_bytes(),
    );
    out.extend(inserted);
    out.extend(&gguf[COUNTS_END..]);
    Ok(out)
}

/// Writes the random Llama model of [`gguf_parts`] to `path`.
pub fn write_gguf(path: &Path, config: &Config, seed: u64, quantized: bool) -> Result<()> {
    let (metadata, tensors) = gguf_parts(config, seed, quantized)?;
    write_gguf_parts(path, &metadata, &tensors)
}

/// The real SmolLM2-135M-Instruct GGUF for the tests that need it, from `CREDIT_SMOLLM2_GGUF`
/// (`scripts/fetch-smollm2.sh` downloads it). Unset, a test prints that it did not run and
/// returns `None`, unless `CREDIT_REQUIRE_SMOLLM2=1` (CI), where it fails: a skipped check must
/// not pass for a run one.
pub fn smollm2_gguf(test: &str) -> Option<PathBuf> {
    const HOW: &str =
        "download it with `scripts/fetch-smollm2.sh DIR` and export CREDIT_SMOLLM2_GGUF=<the path it prints>";
    let required = std::env::var("CREDIT_REQUIRE_SMOLLM2").is_ok_and(|v| v == "1");
    match std::env::var_os("CREDIT_SMOLLM2_GGUF") {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "{test}: CREDIT_SMOLLM2_GGUF={} is not a file ({HOW})",
                path.display()
            );
            Some(path)
        }
        None if required => {
            panic!("{test}: CREDIT_REQUIRE_SMOLLM2=1 but CREDIT_SMOLLM2_GGUF is unset ({HOW})")
        }
        None => {
            // Past the test harness's capture of `eprintln!`, so that a passing run shows it.
            let _ = writeln!(
                std::io::stderr(),
                "{test}: NOT RUN, CREDIT_SMOLLM2_GGUF is unset ({HOW})"
            );
            None
        }
    }
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
