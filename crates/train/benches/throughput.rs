//! Training throughput on the CPU: tokens (prompt + action) per second of optimizer steps, for
//! the tiny test model and for a Qwen2.5-0.5B-shaped model with random weights, each fully
//! fine-tuned and with LoRA (rank 8, α 16, dropout 0.05, every projection).
//!
//! ```sh
//! cargo bench -p credit-train --features test-support --bench throughput               # all runs
//! cargo bench -p credit-train --features test-support --bench throughput -- tiny-lora  # named
//! ```
//!
//! Runs: `tiny`, `tiny-lora`, `qwen2.5-0.5b`, `qwen2.5-0.5b-lora`, and `qwen2.5-0.5b-lora-ckpt`
//! (LoRA with `--checkpoint-layers`). Each model is written to a
//! temporary folder in the Hugging Face layout (the 0.5B one in bf16, as Qwen ships it) and
//! trained through the real loading and training code: 16 samples of 112 prompt + 16 action
//! tokens, 4 per micro-batch, 1 micro-batch per step. The first step is a warm-up and not
//! counted. Each run also prints the size of the trained weights it saved and the peak resident
//! memory from loading the model to saving the checkpoint (name one run per process).

use candle_core::DType;
use credit_train::lora::{LoraConfig, ADAPTER_WEIGHTS};
use credit_train::rng::SplitMix64;
use credit_train::test_support::write_model_dir;
use credit_train::train::{train, Event};
use credit_train::{Config, DeviceKind, RunOptions, Sample, TrainConfig};
use std::path::Path;

const PROMPT: usize = 112;
const ACTION: usize = 16;

fn bench(name: &str, config: Config, steps: u64, lora: Option<LoraConfig>, checkpoint: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (model_dir, out) = (dir.path().join("model"), dir.path().join("ckpt"));
    eprintln!(
        "{name}: {} parameters, writing random weights…",
        config.n_parameters()
    );
    let dtype = if config.n_parameters() > 1_000_000 {
        DType::BF16
    } else {
        DType::F32
    };
    if let Err(e) = write_model_dir(&model_dir, &config, 1, 1, dtype) {
        eprintln!("{name}: {e}");
        return;
    }
    // Writing the random weights is not part of training: reset the peak resident memory that
    // `peak_rss` reads (Linux; elsewhere this fails and the peak includes the writing).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let mut rng = SplitMix64(2);
    let vocab = config.vocab_size as u64;
    let samples: Vec<Sample> = (0..16)
        .map(|i| Sample {
            input_ids: (0..PROMPT + ACTION)
                .map(|_| rng.below(vocab) as u32)
                .collect(),
            action_start: PROMPT,
            advantage: if i % 2 == 0 { 1.0 } else { -1.0 },
            old_logprob: None,
            old_token_logprobs: None,
        })
        .collect();
    let tc = TrainConfig {
        lr: 1e-5,
        steps: Some(steps + 1),
        batch_size: 4,
        grad_accum: 1,
        kl_coef: 0.0,
        lora,
        checkpoint_layers: checkpoint,
        ..TrainConfig::default()
    };
    let run = RunOptions {
        model_dir,
        out_dir: out.clone(),
        device: DeviceKind::Cpu,
        resume: false,
    };
    let mut rates = Vec::new();
    let result = train(&run, &tc, &samples, &mut |event| {
        if let Event::Step(m) = event {
            eprintln!(
                "{name}: step {} {:.1} tokens/s ({} tokens)",
                m.step, m.tokens_per_s, m.tokens
            );
            if m.step > 1 {
                rates.push(m.tokens_per_s);
            }
        }
    });
    match result {
        Ok(_) => {
            let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
            println!(
                "{name}: {mean:.1} tokens/s (mean of {} steps of {} tokens, CPU, f32); \
                 saved weights {}; peak RSS {}",
                rates.len(),
                4 * (PROMPT + ACTION),
                saved_size(&out),
                peak_rss()
            );
        }
        Err(e) => eprintln!("{name}: {e}"),
    }
}

/// The size of the trained weights in the checkpoint: the model, or the LoRA adapter.
fn saved_size(out: &Path) -> String {
    ["model.safetensors", ADAPTER_WEIGHTS]
        .iter()
        .find_map(|f| std::fs::metadata(out.join(f)).ok())
        .map_or("?".into(), |m| format!("{:.2} MB", m.len() as f64 / 1e6))
}

/// `VmHWM` of /proc/self/status (Linux): the peak since the last reset.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l["VmHWM:".len()..].trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let tiny = Config::qwen2_tiny(credit_train::test_support::BYTE_LEVEL_VOCAB);
    let (lora, q05) = (Some(LoraConfig::default()), Config::qwen2_5_0_5b());
    let runs = [
        ("tiny", tiny.clone(), 10, None, false),
        ("tiny-lora", tiny, 10, lora.clone(), false),
        ("qwen2.5-0.5b", q05.clone(), 3, None, false),
        ("qwen2.5-0.5b-lora", q05.clone(), 3, lora.clone(), false),
        ("qwen2.5-0.5b-lora-ckpt", q05, 3, lora, true),
    ];
    for (name, config, steps, lora, checkpoint) in runs {
        if wanted(name) {
            bench(name, config, steps, lora, checkpoint);
        }
    }
}
