//! SPA's progress estimator on an LM backbone (a tiny random Qwen2-shaped model in the Hugging
//! Face layout, with its byte-level tokenizer): on a synthetic set whose per-step reward is known
//! by construction (R = the number of steps whose action ends in "yes"), LoRA + the regression head
//! learn ĉ_t ≈ 1 on those steps and ≈ 0 elsewhere, beat the constant predictor on held-out tasks,
//! and the saved folder (PEFT adapter, head, config) reloads to the same predictions.

use candle_core::DType;
use credit_train::lora::{LoraConfig, Target};
use credit_train::rng::SplitMix64;
use credit_train::signal::lm::{train_backbone_progress, BackboneTrain};
use credit_train::signal::{load_step_model, Passes, Readout, StepText, Trajectory};
use credit_train::test_support::{self, BYTE_LEVEL_VOCAB};
use credit_train::{Config, DeviceKind};

fn synthetic(n_tasks: usize, per_task: usize, seed: u64) -> Vec<Trajectory> {
    let mut rng = SplitMix64(seed);
    let mut out = Vec::new();
    for task in 0..n_tasks {
        for _ in 0..per_task {
            let len = 2 + rng.below(3) as usize;
            let mut ret = 0.0;
            let steps = (0..len)
                .map(|_| {
                    let good = rng.below(2) == 0;
                    ret += if good { 1.0 } else { 0.0 };
                    StepText {
                        task: format!("t{task}"),
                        obs: format!("room {}", rng.below(5)),
                        action: format!("go {}", if good { "yes" } else { "no" }),
                        readout: true,
                        reward: if good { 1.0 } else { 0.0 },
                    }
                })
                .collect();
            out.push(Trajectory {
                key: format!("task-{task}"),
                steps,
                ret,
            });
        }
    }
    out
}

#[test]
fn backbone_estimator_learns_the_known_per_step_progress() {
    let dir = tempfile::tempdir().unwrap();
    let backbone = dir.path().join("lm");
    test_support::write_model_dir(
        &backbone,
        &Config::qwen2_tiny(BYTE_LEVEL_VOCAB),
        5,
        1,
        DType::F32,
    )
    .unwrap();
    let opts = BackboneTrain {
        lora: LoraConfig {
            rank: 4,
            alpha: 8.0,
            dropout: 0.0,
            targets: vec![Target::Q, Target::V, Target::Down],
            merge: false,
        },
        epochs: 8,
        batch: 2,
        lr: 1e-2,
        folds: 3,
        ..BackboneTrain::new(backbone.clone())
    };
    let trajs = synthetic(6, 3, 3);
    let mut last = None;
    let (model, report) = train_backbone_progress(&trajs, &opts, &mut |p| last = Some(p)).unwrap();
    // 3 folds and the final fit: 3 passes over the 18 trajectories per epoch.
    let total = 8 * 3 * 18;
    assert_eq!(last, Some(Passes { done: total, total }));
    let held = report.heldout.as_ref().expect("cross-validated");
    assert_eq!(
        (held.split_by.as_str(), held.folds, held.trajectories),
        ("task", 3, 18)
    );
    let (first, last) = (report.epoch_loss[0], *report.epoch_loss.last().unwrap());
    assert!(last < 0.1 * first, "loss {first} → {last}");
    assert!(
        held.mse < 0.5 * held.constant_mse,
        "held-out mse {} vs constant {}",
        held.mse,
        held.constant_mse
    );
    // The held-out ĉ_t put the rewarded steps above the others.
    let order = held.step_order.as_ref().expect("steps of different reward");
    assert!(order.agreement > 0.9, "{order:?}");

    let probe = &synthetic(1, 3, 99)[2].steps;
    let c = credit_train::signal::StepModel::predict(&model, probe).unwrap();
    for (s, c) in probe.iter().zip(&c) {
        let want = if s.action.ends_with("yes") { 1.0 } else { 0.0 };
        assert!((c - want).abs() < 0.3, "{} → {c}", s.action);
    }

    let saved = dir.path().join("pm");
    model.save(&saved).unwrap();
    for file in [
        "adapter_config.json",
        "adapter_model.safetensors",
        "head.safetensors",
        "config.json",
    ] {
        assert!(saved.join(file).is_file(), "{file} missing");
    }
    let again = load_step_model(&saved, DeviceKind::Cpu).unwrap();
    assert_eq!(again.readout(), Readout::Step);
    let c2 = again.predict(probe).unwrap();
    for (a, b) in c.iter().zip(&c2) {
        assert!((a - b).abs() < 1e-6, "{c:?} vs {c2:?}");
    }
}
