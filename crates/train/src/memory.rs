//! How much memory a training step's activations take, so that a run whose activations would
//! not fit recomputes its blocks in the backward pass by itself (`--checkpoint-layers` asks for
//! it always). Without it, SmolLM2-135M on TextWorld's ~1k-token prompts (micro-batch 4) is
//! killed at 24 GB; with it, it peaks at 4.9 GB.

use crate::arch::Config;
use crate::device::DeviceKind;

/// Bytes of the activations one micro-batch of `batch` sequences of `tokens` tokens keeps for
/// the backward pass without checkpointing. Per block: the attention's `[B, H, T, T]` tensors
/// (three: scores, masked scores, probabilities), and what candle keeps of the `[B, T, d]` and
/// `[B, T, I]` intermediates (projections, norms, rotary halves, residuals, LoRA's inputs; gate,
/// up, their product, the activation, each op's output); then the logits and their log-softmax
/// over the vocabulary. The per-token coefficients (40 hidden-sized, 20 MLP-sized tensors) are
/// measured, not counted: SmolLM2 at 4 × ~264 tokens peaked at 9.7 GB, 7.9 GB over the same step
/// with checkpointing (estimate 8.1 GB), and at 4 × 1,030 tokens (estimate 40 GB) it was killed
/// at 24 GB (`bench/gguf_train.py step`).
pub fn activation_bytes(config: &Config, batch: usize, tokens: usize, dtype_bytes: usize) -> u64 {
    let (b, t) = (batch as u64, tokens as u64);
    let heads = config.num_attention_heads as u64;
    let per_block = 3 * b * heads * t * t
        + 40 * b * t * config.hidden_size as u64
        + 20 * b * t * config.intermediate_size as u64;
    let logits = 2 * b * t * config.vocab_size as u64;
    (config.num_hidden_layers as u64 * per_block + logits) * dtype_bytes as u64
}

/// What the activations may take before checkpointing turns on: on the CPU half of the memory
/// the system has available now (`MemAvailable`, Linux), or 8 GiB where that cannot be read; on
/// a GPU 16 GiB (candle does not say how much device memory is free).
pub fn activation_budget(device: DeviceKind) -> u64 {
    const GIB: u64 = 1 << 30;
    match device {
        DeviceKind::Cuda => 16 * GIB,
        DeviceKind::Cpu => available_bytes().map_or(8 * GIB, |bytes| bytes / 2),
    }
}

/// (needed, budget) bytes when an update of `sequences` sequences of `tokens` tokens on `device`
/// keeps more activations than they may take, so that checkpointing must turn on; else `None`.
pub fn over_budget(
    config: &Config,
    sequences: usize,
    tokens: usize,
    device: DeviceKind,
) -> Option<(u64, u64)> {
    let dtype_bytes = device.compute_dtype().size_in_bytes();
    let needed = activation_bytes(config, sequences, tokens, dtype_bytes);
    let budget = activation_budget(device);
    (needed > budget).then_some((needed, budget))
}

/// The line that says checkpointing turned on by itself, and why; `shorter` is the flag that
/// shortens the sequences.
pub fn checkpointing_note(needed: u64, budget: u64, shorter: &str) -> String {
    let gb = |bytes: u64| bytes as f64 / 1e9;
    format!(
        "recomputing each block in the backward pass (as --checkpoint-layers does): an update's activations would take about {:.1} GB, over the {:.1} GB they may take (half the memory available); a smaller --batch-size or {shorter} keeps them instead",
        gb(needed),
        gb(budget)
    )
}

/// `MemAvailable` from /proc/meminfo.
fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_on_long_prompts_needs_checkpointing_on_this_kind_of_machine() {
        // Per block: 3·4·9·1030² + 40·4·1030·576 + 20·4·1030·1536 elements; 30 blocks; logits
        // 2·4·1030·49152; 4 bytes each.
        let expected = (30
            * (3 * 4 * 9 * 1030 * 1030 + 40 * 4 * 1030 * 576 + 20 * 4 * 1030 * 1536)
            + 2 * 4 * 1030 * 49152)
            * 4;
        let bytes = activation_bytes(&Config::smollm2_135m(), 4, 1030, 4);
        assert_eq!(bytes, expected);
        // Over half of a 24 GiB machine (the run was killed at 24 GB), so checkpointing turns on.
        assert!(bytes > 12 << 30, "{bytes}");
        // 4 × 264 tokens: 9.7 GB peak, 7.9 GB over the checkpointed step's 1.8 GB; within 10 %.
        let short = activation_bytes(&Config::smollm2_135m(), 4, 264, 4) as f64;
        assert!((short / 7.9e9 - 1.0).abs() < 0.1, "{short}");
    }
}
