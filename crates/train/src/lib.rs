//! credit-train: fine-tune a causal LM on logged agent rollouts with any method's advantages.
//!
//! The policy-gradient update a group-based RL trainer (verl, verl-agent) runs, in
//! [candle](https://github.com/huggingface/candle): on the CPU by default, on a GPU with the
//! `cuda` feature. This crate knows nothing about rollout logs or estimators; it takes prepared
//! [`Sample`]s (prompt + action token ids, the step's advantage, optionally the logged log-prob)
//! from the `credit` binary or from a hand-off JSONL file ([`data::read_handoff`]).
//!
//! - [`arch`]: the architecture (`config.json`), with every parameter's name and shape.
//! - [`model`]: a Qwen2/Llama-family decoder written from differentiable candle-nn parts, under
//!   Hugging Face parameter names, so real weights load unchanged and every parameter trains.
//! - [`load`]: `config.json`, single or sharded `*.safetensors`, `tokenizer.json` and the chat
//!   markup of `tokenizer_config.json`; or one GGUF file ([`gguf`]: Llama, dequantised, read
//!   under Hugging Face names with its tokenizer rebuilt from the metadata).
//! - [`fused`]: attention, RMSNorm, SwiGLU and RoPE with hand-written backward passes (CPU
//!   kernels; the composed candle ops elsewhere).
//! - [`lora`]: LoRA adapters over frozen base weights, saved as a PEFT adapter, and merging.
//! - [`objective`]: the clipped PPO surrogate, the low-variance KL estimator, token-level mean.
//! - [`optim`]: AdamW with global-norm clipping and linear warm-up, whose state is checkpointed.
//! - [`checkpoint`]: the Hugging Face layout written atomically, plus the state to resume.
//! - [`train`]: the loop (micro-batches, gradient accumulation, metrics JSONL, progress events).
//! - [`signal`]: the signal models, SPA's progress estimator and HISR's segment reward model,
//!   over hashed step n-grams ([`signal::ngram`]) or on the LM backbone ([`signal::lm`]).
//! - [`flags`]: the command-line flags of `credit train`, beside the options they fill.
//! - [`rng`]: SplitMix64, the one seeded random stream (initial weights, shuffles, dropout).
//! - `test_support` (feature `test-support`): random-weight model folders for tests, benchmarks
//!   and smoke runs.
//!
//! # Example
//!
//! ```no_run
//! use credit_train::{train, DeviceKind, RunOptions, TrainConfig};
//! let (config, samples) = credit_train::data::read_handoff("samples.jsonl".as_ref())?;
//! let run = RunOptions {
//!     model_dir: "Qwen2.5-0.5B-Instruct".into(),
//!     out_dir: "ckpt".into(),
//!     device: DeviceKind::Cpu,
//!     resume: false,
//! };
//! let summary = train::train(&run, &config, &samples, &mut |_event| {})?;
//! println!("{} steps, final loss {:?}", summary.steps, summary.last.map(|m| m.loss));
//! # Ok::<(), credit_train::Error>(())
//! ```

pub mod arch;
pub mod checkpoint;
pub mod config;
pub mod data;
mod device;
mod error;
pub mod flags;
pub mod folder_layout;
pub mod fused;
pub mod gguf;
pub mod load;
pub mod lora;
pub mod memory;
pub mod model;
pub mod objective;
pub mod optim;
pub mod rng;
pub mod signal;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod train;

pub use arch::Config;
pub use candle_core::DType;
pub use config::TrainConfig;
pub use data::Sample;
pub use device::DeviceKind;
pub use error::{Error, Result};
pub use model::Model;
pub use train::RunOptions;
