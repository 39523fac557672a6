//! The progress estimator and the segment reward model on synthetic sets whose per-step (or
//! per-segment) reward is known by construction: R = the number of steps (segment ends) whose
//! action holds the word "good", so a readout ≈ 1 there and ≈ 0 elsewhere explains R exactly,
//! while the constant predictor's error is R's variance.

use credit_train::rng::SplitMix64;
use credit_train::signal::ngram::{train_progress, ProgressModel, ProgressTrain};
use credit_train::signal::{Readout, StepText, Trajectory};

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
fn learns_the_known_per_step_progress() {
    let trajs = synthetic(40, 4, 7);
    let mut passes = Vec::new();
    let (model, report) = train_progress(&trajs, &small(), &mut |p| passes.push(p)).expect("train");
    let held = report.heldout.as_ref().expect("cross-validated");
    assert_eq!((held.split_by.as_str(), held.folds), ("task", 5));
    // Each of 5 folds trains on the 4/5 of the trajectories not its own, then the final fit on
    // all: 5 passes over the 160 trajectories per epoch, counted as the updates go.
    let total = small().epochs * 5 * 160;
    assert!(passes.iter().all(|p| p.total == total));
    assert!(passes.windows(2).all(|w| w[0].done < w[1].done));
    assert_eq!(passes.last().map(|p| p.done), Some(total));
    assert_eq!((held.trajectories, report.trajectories), (160, 160));
    let (first, last) = (report.epoch_loss[0], *report.epoch_loss.last().unwrap());
    assert!(last < 0.25 * first, "loss {first} → {last}");
    // R has variance ≈ n/4 ≥ 0.5 over lengths 2..6: the constant predictor cannot go below it.
    assert!(
        held.mse < 0.5 * held.constant_mse,
        "held-out mse {} vs constant {}",
        held.mse,
        held.constant_mse
    );
    assert!(held.pearson.unwrap() > 0.8, "{report:?}");
    // Held out, "good" steps still get more credit than the others in their trajectory.
    let order = held.step_order.as_ref().expect("steps of different reward");
    assert!(order.pairs > 100 && order.agreement > 0.9, "{order:?}");

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

fn small() -> ProgressTrain {
    ProgressTrain {
        epochs: 25,
        hidden: 32,
        buckets: 256,
        lr: 3e-3,
        dropout: 0.0,
        ..ProgressTrain::default()
    }
}

#[test]
fn segment_end_readout_learns_the_known_segment_rewards() {
    // Segments of two steps; R counts the segments whose closing action is "good". Readouts sit
    // on segment ends only, so the first step of each pair never enters Σ r̂_i.
    let mut trajs = synthetic(40, 4, 11);
    for traj in &mut trajs {
        let n = traj.steps.len();
        let mut ret = 0.0;
        for (k, step) in traj.steps.iter_mut().enumerate() {
            step.readout = k % 2 == 1 || k + 1 == n;
            if step.readout && step.action.contains("good") {
                ret += 1.0;
            }
        }
        traj.ret = ret;
    }
    let opts = ProgressTrain {
        readout: Readout::SegmentEnd,
        ..small()
    };
    let (model, report) = train_progress(&trajs, &opts, &mut |_| {}).expect("train");
    assert_eq!(model.config().readout, Readout::SegmentEnd);
    let held = report.heldout.as_ref().expect("cross-validated");
    assert!(
        held.mse < 0.5 * held.constant_mse,
        "held-out mse {} vs constant {}",
        held.mse,
        held.constant_mse
    );
    // A segment's readout is its reward, not a step's: no step order.
    assert!(held.step_order.is_none());
    let probe = &trajs[3];
    let r = model.predict(&probe.steps).unwrap();
    for (s, r) in probe.steps.iter().zip(&r).filter(|(s, _)| s.readout) {
        let want = if s.action.contains("good") { 1.0 } else { 0.0 };
        assert!((r - want).abs() < 0.35, "{} → {r}", s.action);
    }
}

#[test]
fn degenerate_inputs_are_errors_not_panics() {
    let opts = ProgressTrain::default();
    assert!(train_progress(&[], &opts, &mut |_| {}).is_err());
    let empty = Trajectory {
        key: "a".into(),
        steps: Vec::new(),
        ret: 1.0,
    };
    assert!(train_progress(&[empty], &opts, &mut |_| {}).is_err());
    for bad in [
        ProgressTrain {
            lr: f64::NAN,
            ..ProgressTrain::default()
        },
        ProgressTrain {
            dropout: 1.0,
            ..ProgressTrain::default()
        },
    ] {
        assert!(train_progress(&synthetic(2, 2, 1), &bad, &mut |_| {}).is_err());
    }
    // No readout anywhere (a segment-end model on trajectories without segment ends).
    let mut silent = synthetic(2, 2, 1);
    silent
        .iter_mut()
        .flat_map(|t| &mut t.steps)
        .for_each(|s| s.readout = false);
    assert!(train_progress(&silent, &ProgressTrain::default(), &mut |_| {}).is_err());
    assert!(ProgressModel::load(std::path::Path::new("/nonexistent/dir")).is_err());
}
