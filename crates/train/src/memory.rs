//! How much memory a training step's activations take, so that a run whose activations would
//! not fit recomputes its blocks in the backward pass by itself (`--checkpoint-layers` asks for
//! it always). Without it, SmolLM2-135M on TextWorld's ~1k-token prompts (micro-batch 4) is
//! killed at 24 GB; with it, it peaks at 4.9 GB.

use crate::arch::Config;
use crate::device::DeviceKind;

/// Bytes of the activations one micro-batch of `batch` sequences of `tokens` tokens keeps for
/// the backward pass on `device` without checkpointing. Per block: what candle keeps of the
/// `[B, T, d]` and `[B, T, I]` intermediates (projections, LoRA's inputs and low-rank halves,
/// norms, rotary outputs, residuals; gate, up and their gated product) and the attention's own:
/// on the CPU the fused attention's row statistics `[B, H, T]` (O(T), [`crate::fused`]), on a
/// GPU the composed attention's `[B, H, T, T]` tensors (three: scores, masked scores,
/// probabilities); then the logits and their log-softmax over the vocabulary. The per-token
/// coefficients are measured, not counted (`bench/gguf_train.py step`, SmolLM2 at 4 × ~264
/// tokens, the peak RSS without checkpointing less the peak with it): 28 hidden-sized and 16
/// MLP-sized tensors with the fused ops (5.4–5.7 GB over the checkpointed step in two runs;
/// estimate 5.6 GB), 40 and 20 with the composed ones (7.9 GB; estimate 8.1 GB).
pub fn activation_bytes(config: &Config, batch: usize, tokens: usize, device: DeviceKind) -> u64 {
    let (b, t) = (batch as u64, tokens as u64);
    let heads = config.num_attention_heads as u64;
    let (hidden, mlp, attention) = match device {
        DeviceKind::Cpu => (28, 16, b * heads * t),
        DeviceKind::Cuda => (40, 20, 3 * b * heads * t * t),
    };
    let per_block = attention
        + hidden * b * t * config.hidden_size as u64
        + mlp * b * t * config.intermediate_size as u64;
    let logits = 2 * b * t * config.vocab_size as u64;
    let dtype_bytes = device.compute_dtype().size_in_bytes() as u64;
    (config.num_hidden_layers as u64 * per_block + logits) * dtype_bytes
}

/// What the activations may take before checkpointing turns on: half of what the device in use
/// has free. On a GPU that is what its driver reports free (after the model is loaded, when
/// asked from a training run); on the CPU the system's `MemAvailable` (Linux), or what the
/// process's cgroup limit leaves when that is lower. 8 GiB where neither can be read.
pub fn activation_budget(device: DeviceKind) -> u64 {
    const GIB: u64 = 1 << 30;
    let free = match device {
        DeviceKind::Cpu => host_free_bytes(),
        DeviceKind::Cuda => gpu_free_bytes(),
    };
    free.map_or(8 * GIB, |bytes| bytes / 2)
}

/// (needed, budget) bytes when an update of `sequences` sequences of `tokens` tokens on `device`
/// keeps more activations than they may take, so that checkpointing must turn on; else `None`.
pub fn over_budget(
    config: &Config,
    sequences: usize,
    tokens: usize,
    device: DeviceKind,
) -> Option<(u64, u64)> {
    let needed = activation_bytes(config, sequences, tokens, device);
    let budget = activation_budget(device);
    (needed > budget).then_some((needed, budget))
}

/// The line that says checkpointing turned on by itself, and why; `shorter` is the flag that
/// shortens the sequences.
pub fn checkpointing_note(needed: u64, budget: u64, shorter: &str) -> String {
    let gb = |bytes: u64| bytes as f64 / 1e9;
    format!(
        "recomputing each block in the backward pass (as --checkpoint-layers does): an update's activations would take about {:.1} GB, over the {:.1} GB they may take (half the memory free on the device); a smaller --batch-size or {shorter} keeps them instead",
        gb(needed),
        gb(budget)
    )
}

/// The host memory this process may still take: `MemAvailable`, capped by the cgroup's limit
/// less its usage.
fn host_free_bytes() -> Option<u64> {
    match (available_bytes(), cgroup_free_bytes()) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

/// `MemAvailable` from /proc/meminfo.
fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The cgroup's memory limit less its usage (cgroup v2, else v1); `None` without a limit.
fn cgroup_free_bytes() -> Option<u64> {
    let read =
        |path: &str| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    let (limit, used) = match read("/sys/fs/cgroup/memory.max") {
        Some(limit) => (limit, read("/sys/fs/cgroup/memory.current")?),
        None => (
            read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?,
            read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?,
        ),
    };
    Some(limit.saturating_sub(used))
}

/// The free memory of the first CUDA GPU, as its driver reports it.
#[cfg(feature = "cuda")]
fn gpu_free_bytes() -> Option<u64> {
    let device = DeviceKind::Cuda.device().ok()?;
    let cuda = device.as_cuda_device().ok()?;
    let (free, _total) = cuda.cuda_stream().context().mem_get_info().ok()?;
    Some(free as u64)
}

/// No GPU in a build without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
fn gpu_free_bytes() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_on_long_prompts_needs_checkpointing_on_this_kind_of_machine() {
        // Per block: 4·9·1030 row statistics + 28·4·1030·576 + 16·4·1030·1536 elements; 30
        // blocks; logits 2·4·1030·49152; 4 bytes each.
        let expected = (30 * (4 * 9 * 1030 + 28 * 4 * 1030 * 576 + 16 * 4 * 1030 * 1536)
            + 2 * 4 * 1030 * 49152)
            * 4;
        let bytes = activation_bytes(&Config::smollm2_135m(), 4, 1030, DeviceKind::Cpu);
        assert_eq!(bytes, expected);
        // Over half of a 24 GiB machine (the run was killed at 24 GB), so checkpointing turns on.
        assert!(bytes > 12 << 30, "{bytes}");
        // 4 × 264 tokens: 5.4–5.7 GB over the checkpointed step (two runs); within 10 %.
        let short = activation_bytes(&Config::smollm2_135m(), 4, 264, DeviceKind::Cpu) as f64;
        assert!((short / 5.5e9 - 1.0).abs() < 0.1, "{short}");
    }

    #[test]
    fn the_composed_attention_on_a_gpu_keeps_its_scores() {
        // bf16, and the three [B, H, T, T] tensors of each block.
        let c = Config::smollm2_135m();
        let expected = (30
            * (3 * 4 * 9 * 1030 * 1030 + 40 * 4 * 1030 * 576 + 20 * 4 * 1030 * 1536)
            + 2 * 4 * 1030 * 49152)
            * 2;
        assert_eq!(activation_bytes(&c, 4, 1030, DeviceKind::Cuda), expected);
    }

    #[test]
    fn the_cpu_budget_is_half_of_what_is_free() {
        let free = host_free_bytes().expect("/proc/meminfo on Linux");
        let budget = activation_budget(DeviceKind::Cpu);
        // Free memory moves between the two reads; within 1 GiB.
        assert!(budget.abs_diff(free / 2) < 1 << 30, "{budget} vs {free}");
    }
}
