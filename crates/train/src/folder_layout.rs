//! The file names of a Hugging Face model folder: what `load` reads, `checkpoint` writes, and a
//! GGUF model's tokenizer is written back as (`gguf`), named once below all three.

pub const CONFIG: &str = "config.json";
pub const WEIGHTS: &str = "model.safetensors";
pub const WEIGHTS_INDEX: &str = "model.safetensors.index.json";
pub const TOKENIZER: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
