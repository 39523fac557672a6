//! Training throughput on the CPU: tokens (prompt + action) per second of optimizer steps, for
//! the tiny test model and for a Qwen2.5-0.5B-shaped model with random weights.
//!
//! ```sh
//! cargo bench -p credit-train --bench throughput            # tiny, then 0.5B
//! cargo bench -p credit-train --bench throughput -- tiny    # only the tiny model
//! ```
//!
//! Each model is written to a temporary folder in the Hugging Face layout (the 0.5B one in bf16,
//! as Qwen ships it) and trained through the real loading and training code: 16 samples of
//! 112 prompt + 16 action tokens, 4 per micro-batch, 1 micro-batch per step. The first step is
//! a warm-up and not counted.

use candle_core::DType;
use credit_train::random::{write_model_dir, SplitMix64};
use credit_train::train::{train, Event};
use credit_train::{Config, DeviceKind, RunOptions, Sample, TrainConfig};

const PROMPT: usize = 112;
const ACTION: usize = 16;

fn bench(name: &str, config: Config, steps: u64) {
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
        ..TrainConfig::default()
    };
    let run = RunOptions {
        model_dir,
        out_dir: out,
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
                "{name}: {mean:.1} tokens/s (mean of {} steps of {} tokens, CPU, f32)",
                rates.len(),
                4 * (PROMPT + ACTION)
            );
        }
        Err(e) => eprintln!("{name}: {e}"),
    }
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    if wanted("tiny") {
        bench(
            "tiny",
            Config::qwen2_tiny(credit_train::random::BYTE_LEVEL_VOCAB),
            10,
        );
    }
    if wanted("qwen2.5-0.5b") {
        bench("qwen2.5-0.5b", Config::qwen2_5_0_5b(), 3);
    }
}
