//! Writes a random-weight model folder in the Hugging Face layout (with a byte-level tokenizer
//! and ChatML markup), for smoke runs of `credit train` where no real model can be downloaded.
//!
//! ```sh
//! cargo run -p credit-train --features test-support --example random_model -- \
//!     DIR [tiny|qwen2.5-0.5b] [SEED]
//! ```
//!
//! `tiny`: 2 layers, hidden 32 (27k parameters, f32). `qwen2.5-0.5b`: Qwen2.5-0.5B's shape
//! (494M parameters, bf16 as Qwen ships it). Its predictions mean nothing: it is for timing and
//! for checking that a pipeline runs.

use candle_core::DType;
use credit_train::test_support::{write_model_dir, BYTE_LEVEL_VOCAB};
use credit_train::Config;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: random_model DIR [tiny|qwen2.5-0.5b] [SEED]";
    let Some(dir) = args.first() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let (config, dtype) = match args.get(1).map_or("tiny", String::as_str) {
        "tiny" => (Config::qwen2_tiny(BYTE_LEVEL_VOCAB), DType::F32),
        "qwen2.5-0.5b" => (Config::qwen2_5_0_5b(), DType::BF16),
        other => {
            eprintln!("error: unknown shape `{other}`\n{usage}");
            return ExitCode::from(2);
        }
    };
    let seed = match args.get(2).map(|s| s.parse::<u64>()) {
        None => 0,
        Some(Ok(s)) => s,
        Some(Err(_)) => {
            eprintln!("error: SEED must be a non-negative integer\n{usage}");
            return ExitCode::from(2);
        }
    };
    match write_model_dir(dir.as_ref(), &config, seed, 1, dtype) {
        Ok(()) => {
            println!("{dir}: {} parameters", config.n_parameters());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
