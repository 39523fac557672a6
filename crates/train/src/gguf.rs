//! A GGUF file (llama.cpp's single-file format) read as the Hugging Face folder it was converted
//! from, so that the model, LoRA, checkpoints and PEFT export see one layout whatever the source:
//!
//! - the architecture from the `llama.*` metadata ([`Gguf::config`]);
//! - every weight dequantised to f32 on the CPU under its Hugging Face name
//!   ([`Gguf::tensors`]), with the query and key rows put back in Hugging Face's order (see
//!   [`unpermute_rows`]);
//! - the tokenizer as a `tokenizer.json` ([`Gguf::tokenizer_json`]), from the vocabulary, merges,
//!   token types and pre-tokenizer name in `tokenizer.ggml.*`, and `tokenizer_config.json`'s chat
//!   template and special tokens ([`Gguf::tokenizer_config`]).
//!
//! The base is dequantised rather than kept quantised: it is frozen under LoRA, so a quantised
//! matmul would only save memory (SmolLM2-135M is 540 MB in f32), candle's `QMatMul` has no
//! backward pass to carry the gradient to the activations below it, and on the CPU its product is
//! 4.5–5.6× slower at training lengths and off by up to 5.7e-3 (`benches/quantised_base.rs`).
//!
//! The header is read by the `header` module, within the file's length (no count or length in it is
//! trusted before it is checked against the bytes left), and the `llama.*` values that the model
//! divides by or takes logarithms of must be positive numbers.
//!
//! Only the Llama architecture with a GPT-2-style byte-level BPE tokenizer is read; other
//! architectures, SentencePiece vocabularies and pre-tokenizers not listed in
//! [`pre_tokenizer`] are refused with the metadata value that was found.

use crate::arch::{Config, HfConfig};
use crate::error::{Context, Error, Result};
use candle_core::quantized::gguf_file::TensorInfo;
use candle_core::{Device, Tensor};
use header::{ArrayAt, Header, Meta};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

mod header;

/// Whether `path` is read as a GGUF file: any file is (a folder never is), so that a file that
/// is not GGUF is told so rather than that it is not a folder.
pub fn is_gguf(path: &Path) -> bool {
    path.is_file()
}

/// The first four bytes of every GGUF file.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// Whether the file at `path` starts with the GGUF magic.
pub fn has_magic(path: &Path) -> bool {
    std::fs::File::open(path).is_ok_and(|mut f| starts_with_magic(&mut f))
}

fn starts_with_magic(file: &mut impl Read) -> bool {
    let mut head = [0u8; 4];
    file.read_exact(&mut head).is_ok() && &head == MAGIC
}

/// GGUF tensor names (`blk.N.` prefix dropped for blocks) and the Hugging Face names they stand
/// for (`model.layers.N.` likewise), as llama.cpp's `convert_hf_to_gguf.py` maps llama.
const NAMES: [(&str, &str); 12] = [
    ("token_embd", "model.embed_tokens"),
    ("output_norm", "model.norm"),
    ("output", "lm_head"),
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// The GGUF name of the Hugging Face parameter `hf` (`model.layers.3.self_attn.q_proj.weight` →
/// `blk.3.attn_q.weight`), `None` for a name outside the llama layout.
pub fn gguf_name(hf: &str) -> Option<String> {
    let (module, kind) = hf.rsplit_once('.')?;
    let (block, module) = match module.strip_prefix("model.layers.") {
        Some(rest) => {
            let (l, module) = rest.split_once('.')?;
            (Some(l), module)
        }
        None => (None, module),
    };
    let (gguf, _) = NAMES.iter().find(|(_, h)| *h == module)?;
    Some(match block {
        Some(l) => format!("blk.{l}.{gguf}.{kind}"),
        None => format!("{gguf}.{kind}"),
    })
}

/// The number of heads whose rows `convert_hf_to_gguf.py` permuted in the Hugging Face tensor
/// `hf` (query: the attention heads, key: the key/value heads), `None` for other tensors.
pub(crate) fn permuted_heads(hf: &str, config: &Config) -> Option<usize> {
    if hf.contains(".self_attn.q_proj.") {
        Some(config.num_attention_heads)
    } else if hf.contains(".self_attn.k_proj.") {
        Some(config.num_key_value_heads)
    } else {
        None
    }
}

/// Undoes the converter's `permute`: Hugging Face's rotary embedding pairs dimension i of a head
/// with i + d/2 (`rotate_half`), llama.cpp's with its neighbour, so the converter reorders each
/// head's rows from (half, i) to (i, half). `w` is `[heads·d, …]` (a weight or a bias).
pub fn unpermute_rows(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    reorder_rows(w, heads, true)
}

/// The converter's `permute` itself: Hugging Face's row order to llama.cpp's (test models).
pub fn permute_rows(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    reorder_rows(w, heads, false)
}

fn reorder_rows(w: &Tensor, heads: usize, to_hf: bool) -> candle_core::Result<Tensor> {
    let dims = w.dims().to_vec();
    let rest: Vec<usize> = dims[1..].to_vec();
    let half = dims[0] / heads / 2;
    // (head, half, i) in Hugging Face's order, (head, i, half) in llama.cpp's.
    let from = if to_hf {
        [heads, half, 2]
    } else {
        [heads, 2, half]
    };
    let shape: Vec<usize> = from.iter().chain(&rest).copied().collect();
    w.reshape(shape)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)
}

/// An open GGUF file: its metadata and tensor directory, read within the file's length; arrays
/// and tensors are read on demand.
pub struct Gguf {
    path: PathBuf,
    header: Header,
}

impl Gguf {
    pub fn open(path: &Path) -> Result<Self> {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        if !starts_with_magic(&mut file) {
            return Err(Error::Model {
                path: path.to_path_buf(),
                message: "not a GGUF file (it does not start with `GGUF`): --model and --backbone take a Hugging Face model folder or a .gguf file".into(),
            });
        }
        let header = Header::read(file).map_err(|message| Error::Model {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(Gguf {
            path: path.to_path_buf(),
            header,
        })
    }

    fn bad(&self, message: String) -> Error {
        Error::Model {
            path: self.path.clone(),
            message,
        }
    }

    fn get(&self, key: &str) -> Option<&Meta> {
        self.header.metadata.get(key)
    }

    fn value(&self, key: &str) -> Result<&Meta> {
        self.get(key)
            .ok_or_else(|| self.bad(format!("metadata `{key}` is missing")))
    }

    fn int(&self, key: &str) -> Result<usize> {
        let v = self.value(key)?;
        // Writers differ in the integer type of counts; a negative one is no count.
        let n = match v {
            Meta::Uint(x) => usize::try_from(*x).ok(),
            Meta::Int(x) => usize::try_from(*x).ok(),
            _ => None,
        };
        n.ok_or_else(|| self.bad(format!("metadata `{key}` = {v} is not a count")))
    }

    /// The positive number `key`, `default` when it is absent.
    fn positive(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(Meta::Float(x)) if x.is_finite() && *x > 0.0 => Ok(*x),
            Some(v) => Err(self.bad(format!("metadata `{key}` = {v}: must be a positive number"))),
        }
    }

    fn string(&self, key: &str) -> Result<&str> {
        match self.value(key)? {
            Meta::Str(s) => Ok(s),
            v => Err(self.bad(format!("metadata `{key}` = {v} is not a string"))),
        }
    }

    fn array(&self, key: &str) -> Result<&ArrayAt> {
        match self.value(key)? {
            Meta::Array(a) => Ok(a),
            v => Err(self.bad(format!("metadata `{key}` = {v} is not an array"))),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>> {
        self.header
            .strings(&self.path, key, self.array(key)?)
            .map_err(|m| self.bad(m))
    }

    fn has(&self, tensor: &str) -> bool {
        self.header.tensors.contains_key(tensor)
    }

    /// The GGUF name and directory entry of the Hugging Face parameter `hf`, which must have
    /// `shape`.
    fn entry(&self, hf: &str, shape: &[usize]) -> Result<(String, &TensorInfo)> {
        let name =
            gguf_name(hf).ok_or_else(|| self.bad(format!("internal: no GGUF name for `{hf}`")))?;
        let entry = self.header.tensors.get(&name).ok_or_else(|| {
            self.bad(format!(
                "tensor `{name}` (Hugging Face `{hf}`, shape {shape:?}) is missing"
            ))
        })?;
        if entry.shape.dims() != shape {
            return Err(self.bad(format!(
                "tensor `{name}` has shape {:?}, the metadata implies {shape:?}",
                entry.shape.dims()
            )));
        }
        Ok((name, entry))
    }

    /// The architecture: `general.architecture` must be `llama`; the shape comes from
    /// `llama.*` and the embedding, with the checks a `config.json` gets.
    pub fn config(&self) -> Result<Config> {
        let arch = self.string("general.architecture")?;
        if arch != "llama" {
            return Err(self.bad(format!(
                "general.architecture `{arch}` is not supported (GGUF files of the `llama` architecture are; other models load from a Hugging Face folder)"
            )));
        }
        let has = |name: &str| self.has(name);
        if has("rope_freqs.weight") {
            return Err(self.bad("holds `rope_freqs.weight` (Llama 3.1's scaled RoPE), which is not read from GGUF: use the Hugging Face folder".into()));
        }
        let embed = self
            .header
            .tensors
            .get("token_embd.weight")
            .ok_or_else(|| self.bad("tensor `token_embd.weight` is missing".into()))?;
        let &[vocab_size, hidden_size] = embed.shape.dims() else {
            return Err(self.bad(format!(
                "tensor `token_embd.weight` has shape {:?}, expected [vocab, hidden]",
                embed.shape.dims()
            )));
        };
        let heads = self.int("llama.attention.head_count")?;
        let head_dim = hidden_size.checked_div(heads).unwrap_or(0);
        if let Ok(rotated) = self.int("llama.rope.dimension_count") {
            if rotated != head_dim {
                return Err(self.bad(format!("llama.rope.dimension_count = {rotated} rotates part of each head of {head_dim}: partial RoPE is not supported")));
            }
        }
        let hf = HfConfig {
            architectures: vec!["LlamaForCausalLM".into()],
            model_type: Some("llama".into()),
            vocab_size,
            hidden_size,
            intermediate_size: self.int("llama.feed_forward_length")?,
            num_hidden_layers: self.int("llama.block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: self.int("llama.attention.head_count_kv").ok(),
            head_dim: None,
            rope_theta: self.positive("llama.rope.freq_base", 10_000.0)?,
            rms_norm_eps: self.positive("llama.attention.layer_norm_rms_epsilon", 1e-5)?,
            tie_word_embeddings: !has("output.weight"),
            attention_bias: Some(has("blk.0.attn_q.bias")),
            hidden_act: None,
            rope_scaling: None,
            use_sliding_window: false,
        };
        if hf.num_hidden_layers > 0
            && !has(&format!("blk.{}.attn_q.weight", hf.num_hidden_layers - 1))
        {
            return Err(self.bad(format!(
                "llama.block_count = {} but tensor `blk.{}.attn_q.weight` is missing",
                hf.num_hidden_layers,
                hf.num_hidden_layers - 1
            )));
        }
        let config = hf.into_config(&self.path)?;
        // Every tensor is there in its shape, so that the metadata cannot ask for more than the
        // file holds.
        for (hf, shape) in config.parameters() {
            self.entry(&hf, &shape)?;
        }
        Ok(config)
    }

    /// Every parameter of `config` (from [`Gguf::config`]) under its Hugging Face name,
    /// dequantised to f32 on the CPU, query and key rows in Hugging Face's order.
    pub fn tensors(&self, config: &Config) -> Result<HashMap<String, Tensor>> {
        let mut file = std::fs::File::open(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let mut out = HashMap::new();
        for (hf, shape) in config.parameters() {
            let (name, entry) = self.entry(&hf, &shape)?;
            let t = entry
                .read(&mut file, self.header.data_offset, &Device::Cpu)
                .and_then(|q| q.dequantize(&Device::Cpu))
                .map_err(|e| self.bad(format!("reading tensor `{name}`: {e}")))?;
            let t = match permuted_heads(&hf, config) {
                Some(heads) => unpermute_rows(&t, heads).ctx(&format!("reordering `{name}`"))?,
                None => t,
            };
            out.insert(hf, t);
        }
        Ok(out)
    }

    /// The tokenizer as Hugging Face's `tokenizer.json`: byte-level BPE over
    /// `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`, control and user-defined tokens as
    /// added tokens, the pre-tokenizer `tokenizer.ggml.pre` names, and the BOS token prepended
    /// when `tokenizer.ggml.add_bos_token` asks for it.
    pub fn tokenizer_json(&self) -> Result<serde_json::Value> {
        let model = self.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(self.bad(format!(
                "tokenizer.ggml.model `{model}` is not supported (the byte-level BPE `gpt2` is)"
            )));
        }
        let pre_name = match self.get("tokenizer.ggml.pre") {
            None => "default",
            Some(_) => self.string("tokenizer.ggml.pre")?,
        };
        let pre = pre_tokenizer(pre_name).ok_or_else(|| {
            self.bad(format!(
                "tokenizer.ggml.pre `{pre_name}` is not supported (supported: {})",
                PRE_TOKENIZERS.join(", ")
            ))
        })?;
        let tokens = self.strings("tokenizer.ggml.tokens")?;
        let merges = self.strings("tokenizer.ggml.merges")?;
        let types: Vec<i64> = match self.get(TOKEN_TYPE) {
            Some(_) => self
                .header
                .ints(&self.path, TOKEN_TYPE, self.array(TOKEN_TYPE)?)
                .map_err(|m| self.bad(m))?,
            None => vec![NORMAL; tokens.len()],
        };
        let vocab: serde_json::Map<String, serde_json::Value> = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.to_string(), id.into()))
            .collect();
        let added: Vec<serde_json::Value> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (_, &kind))| kind == CONTROL || kind == USER_DEFINED)
            .map(|(id, (t, &kind))| {
                serde_json::json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": kind == CONTROL})
            })
            .collect();
        let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
        let add_bos = matches!(
            self.get("tokenizer.ggml.add_bos_token"),
            Some(Meta::Bool(true))
        );
        let post_processor = if add_bos {
            let bos = self.special_token("bos", &tokens)?.ok_or_else(|| {
                self.bad("tokenizer.ggml.add_bos_token is true but there is no bos_token_id".into())
            })?;
            let id = self.int("tokenizer.ggml.bos_token_id")?;
            let first = serde_json::json!({"SpecialToken": {"id": bos, "type_id": 0}});
            let mut special = serde_json::Map::new();
            special.insert(
                bos.clone(),
                serde_json::json!({"id": bos, "ids": [id], "tokens": [bos]}),
            );
            serde_json::json!({
                "type": "TemplateProcessing",
                "single": [first, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [first, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": special
            })
        } else {
            byte_level.clone()
        };
        Ok(serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": pre,
            "post_processor": post_processor,
            "decoder": byte_level,
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                "ignore_merges": false, "vocab": vocab, "merges": merges
            }
        }))
    }

    /// The text of the special token of `tokens` whose id `tokenizer.ggml.{kind}_token_id`
    /// holds.
    fn special_token(&self, kind: &str, tokens: &[String]) -> Result<Option<String>> {
        let key = format!("tokenizer.ggml.{kind}_token_id");
        if self.get(&key).is_none() {
            return Ok(None);
        }
        let id = self.int(&key)?;
        let token = tokens.get(id).ok_or_else(|| {
            self.bad(format!(
                "metadata `{key}` = {id} is past the vocabulary ({} tokens)",
                tokens.len()
            ))
        })?;
        Ok(Some(token.to_string()))
    }

    /// `tokenizer_config.json`: `tokenizer.chat_template` and the special tokens.
    pub fn tokenizer_config(&self) -> Result<serde_json::Value> {
        let mut config = serde_json::Map::new();
        if self.get(CHAT_TEMPLATE).is_some() {
            config.insert("chat_template".into(), self.string(CHAT_TEMPLATE)?.into());
        }
        let tokens = self.strings("tokenizer.ggml.tokens")?;
        for (kind, key) in [
            ("bos", "bos_token"),
            ("eos", "eos_token"),
            ("padding", "pad_token"),
            ("unknown", "unk_token"),
        ] {
            if let Some(token) = self.special_token(kind, &tokens)? {
                config.insert(key.into(), token.into());
            }
        }
        if let Ok(n) = self.int("llama.context_length") {
            config.insert("model_max_length".into(), n.into());
        }
        Ok(config.into())
    }
}

const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// llama.cpp's token types (`llama_token_type`): normal, control (special), user-defined.
const NORMAL: i64 = 1;
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// The `tokenizer.ggml.pre` values read, as llama.cpp names them.
const PRE_TOKENIZERS: [&str; 8] = [
    "default",
    "gpt-2",
    "gpt2",
    "olmo",
    "smollm",
    "starcoder",
    "refact",
    "codeshell",
];

/// The pre-tokenizer llama.cpp applies for `pre` (`llm_tokenizer_bpe` in `llama-vocab.cpp`), as
/// Hugging Face's tokenizers writes it: GPT-2's split (`ByteLevel` with its regex), after, for the
/// StarCoder family (SmolLM among them), a split isolating each digit (llama.cpp's `\p{N}`).
fn pre_tokenizer(pre: &str) -> Option<serde_json::Value> {
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    match pre {
        "default" | "gpt-2" | "gpt2" | "olmo" => Some(byte_level),
        "smollm" | "starcoder" | "refact" | "codeshell" => Some(serde_json::json!({
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level]
        })),
        _ => None,
    }
}

/// Writes `tokenizer.json` and `tokenizer_config.json` of the GGUF file `source` into `dir`, so
/// that a checkpoint of a model read from GGUF is a complete Hugging Face folder.
pub fn write_tokenizer_files(source: &Path, dir: &Path) -> Result<()> {
    let gguf = Gguf::open(source)?;
    for (name, value) in [
        (crate::folder_layout::TOKENIZER, gguf.tokenizer_json()?),
        (
            crate::folder_layout::TOKENIZER_CONFIG,
            gguf.tokenizer_config()?,
        ),
    ] {
        let path = dir.join(name);
        let text = serde_json::to_vec(&value).map_err(|e| Error::Json {
            path: path.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        credit_output::write_file(&path, |f| std::io::Write::write_all(f, &text))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_converter() {
        assert_eq!(
            gguf_name("model.layers.12.self_attn.o_proj.weight").as_deref(),
            Some("blk.12.attn_output.weight")
        );
        assert_eq!(
            gguf_name("model.layers.0.post_attention_layernorm.weight").as_deref(),
            Some("blk.0.ffn_norm.weight")
        );
        assert_eq!(
            gguf_name("model.embed_tokens.weight").as_deref(),
            Some("token_embd.weight")
        );
        assert_eq!(
            gguf_name("lm_head.weight").as_deref(),
            Some("output.weight")
        );
        assert_eq!(gguf_name("model.layers.0.mlp.act.weight"), None);
    }

    #[test]
    fn unpermute_inverts_the_converters_permute() {
        // convert_hf_to_gguf.py's `permute` on 2 heads of d = 4, rows r (one column):
        // w.reshape(2, 2, 2, 1).swapaxes(1, 2).reshape(8, 1) → rows [0, 2, 1, 3, 4, 6, 5, 7].
        let hf = Tensor::arange(0f32, 8., &Device::Cpu)
            .unwrap()
            .reshape((8, 1))
            .unwrap();
        let gguf: Vec<f32> = permute_rows(&hf, 2)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(gguf, [0., 2., 1., 3., 4., 6., 5., 7.]);
        let g = Tensor::new(gguf.as_slice(), &Device::Cpu)
            .unwrap()
            .reshape((8, 1))
            .unwrap();
        let back: Vec<f32> = unpermute_rows(&g, 2)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(back, [0., 1., 2., 3., 4., 5., 6., 7.]);
    }
}
