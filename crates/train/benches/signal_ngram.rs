//! Throughput of the small signal model ([`credit_train::signal::ngram`], SPA's progress
//! estimator) on the CPU: trajectory steps per second of training (one epoch, no
//! cross-validation) and of inference, on synthetic text-game trajectories of ALFWorld's shape:
//! 20 steps, a 12-word task, ~60-word observations and 4-word actions.
//!
//! ```sh
//! cargo bench --profile dev -p credit-train --bench signal_ngram          # 1,000 trajectories
//! cargo bench --profile dev -p credit-train --bench signal_ngram -- 5000  # another count
//! ```

use credit_train::rng::SplitMix64;
use credit_train::signal::ngram::{train_progress, ProgressTrain};
use credit_train::signal::{StepText, Trajectory};
use std::time::Instant;

const WORDS: [&str; 24] = [
    "you",
    "see",
    "a",
    "drawer",
    "cabinet",
    "on",
    "the",
    "countertop",
    "is",
    "open",
    "closed",
    "apple",
    "mug",
    "in",
    "sink",
    "basin",
    "fridge",
    "nothing",
    "happens",
    "arrive",
    "at",
    "loc",
    "shelf",
    "desk",
];

fn text(rng: &mut SplitMix64, words: usize) -> String {
    (0..words)
        .map(|_| {
            let w = WORDS[rng.below(WORDS.len() as u64) as usize];
            format!("{w}{}", rng.below(20))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let mut rng = SplitMix64(3);
    let trajs: Vec<Trajectory> = (0..n)
        .map(|i| {
            let task = text(&mut rng, 12);
            Trajectory {
                key: format!("task-{}", i / 8),
                steps: (0..20)
                    .map(|_| StepText {
                        task: task.clone(),
                        obs: text(&mut rng, 60),
                        action: text(&mut rng, 4),
                        readout: true,
                        reward: 0.0,
                    })
                    .collect(),
                ret: rng.below(2) as f64,
            }
        })
        .collect();
    let steps = (n * 20) as f64;
    let opts = ProgressTrain {
        epochs: 1,
        folds: 1,
        ..ProgressTrain::default()
    };
    let started = Instant::now();
    let (model, _) = match train_progress(&trajs, &opts, &mut |_| {}) {
        Ok(trained) => trained,
        Err(e) => {
            eprintln!("progress: {e}");
            return;
        }
    };
    let train = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for t in &trajs {
        if let Err(e) = model.predict(&t.steps) {
            eprintln!("progress: {e}");
            return;
        }
    }
    let infer = started.elapsed().as_secs_f64();
    println!(
        "progress estimator, {n} trajectories × 20 steps: train 1 epoch {train:.2} s ({:.0} steps/s), predict {infer:.2} s ({:.0} steps/s)",
        steps / train,
        steps / infer
    );
}
