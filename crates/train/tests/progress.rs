//! The progress estimator on a synthetic set whose per-step progress is known by construction:
//! R = the number of steps whose action holds the word "good", so ĉ_t ≈ 1 on those steps and
//! ≈ 0 elsewhere explains R exactly, while the constant predictor's error is R's variance.

use credit_train::progress::{train_progress, ProgressModel, ProgressTrain, StepText, Trajectory};
use credit_train::random::SplitMix64;

fn synthetic(n_tasks: usize, per_task: usize, seed: u64) -> Vec<Trajectory> {
    let mut rng = SplitMix64(seed);
    let mut out = Vec::new();
    for task in 0..n_tasks {
        for _ in 0..per_task {
            let len = 2 + rng.below(5) as usize;
            let mut ret = 0.0;
            let steps = (0..len)
                .map(|t| {
                    let good = rng.below(2) == 0;
                    ret += if good { 1.0 } else { 0.0 };
                    let verb = ["take", "open", "go", "look"][rng.below(4) as usize];
                    StepText {
                        task: format!("task {task}: find the key"),
                        obs: format!("room {} you see a door", rng.below(7)),
                        action: format!("{verb} {} thing {t}", if good { "good" } else { "bad" }),
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
fn learns_the_known_per_step_progress() {
    let trajs = synthetic(40, 4, 7);
    let opts = ProgressTrain {
        epochs: 25,
        hidden: 32,
        buckets: 256,
        lr: 3e-3,
        ..ProgressTrain::default()
    };
    let (model, report) = train_progress(&trajs, &opts).expect("train");
    assert_eq!(report.split_by, "task");
    assert!(report.heldout_trajectories > 0 && report.train_trajectories > 0);
    let (first, last) = (report.epoch_loss[0], *report.epoch_loss.last().unwrap());
    assert!(last < 0.25 * first, "loss {first} → {last}");
    // R has variance ≈ n/4 ≥ 0.5 over lengths 2..6: the constant predictor cannot go below it.
    let (mse, constant) = (report.heldout_mse.unwrap(), report.constant_mse.unwrap());
    assert!(
        mse < 0.5 * constant,
        "held-out mse {mse} vs constant {constant}"
    );
    assert!(report.pearson.unwrap() > 0.8, "{report:?}");

    // The per-step readout: ≈1 on "good" steps, ≈0 on the others.
    let probe = &synthetic(3, 1, 99)[2];
    let c = model.predict(&probe.steps).unwrap();
    for (s, c) in probe.steps.iter().zip(&c) {
        let want = if s.action.contains("good") { 1.0 } else { 0.0 };
        assert!((c - want).abs() < 0.35, "{} → {c}", s.action);
    }

    // Saved and reloaded, it predicts the same.
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let again = ProgressModel::load(dir.path()).unwrap();
    assert_eq!(again.predict(&probe.steps).unwrap(), c);
}

#[test]
fn degenerate_inputs_are_errors_not_panics() {
    let opts = ProgressTrain::default();
    assert!(train_progress(&[], &opts).is_err());
    let empty = Trajectory {
        key: "a".into(),
        steps: Vec::new(),
        ret: 1.0,
    };
    assert!(train_progress(&[empty], &opts).is_err());
    let bad = ProgressTrain {
        lr: f64::NAN,
        ..ProgressTrain::default()
    };
    assert!(train_progress(&synthetic(2, 2, 1), &bad).is_err());
    assert!(ProgressModel::load(std::path::Path::new("/nonexistent/dir")).is_err());
}
