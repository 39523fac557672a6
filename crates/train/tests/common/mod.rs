//! Helpers shared by the training tests (`lora.rs`, `train.rs`).

use credit_train::checkpoint::METRICS;
use credit_train::train::StepMetrics;
use credit_train::{DeviceKind, RunOptions};
use std::path::Path;

/// A CPU run of the model in `model` writing to `out`.
pub fn run(model: &Path, out: &Path, resume: bool) -> RunOptions {
    RunOptions {
        model_dir: model.to_path_buf(),
        out_dir: out.to_path_buf(),
        device: DeviceKind::Cpu,
        resume,
    }
}

/// The per-step metrics a run wrote.
pub fn metrics(out: &Path) -> Vec<StepMetrics> {
    std::fs::read_to_string(out.join(METRICS))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
