//! What both signal models share: the steps they read ([`StepText`], [`Trajectory`]), where they
//! read out ([`Readout`]), how a trained one predicts ([`StepModel`]), and how training is judged:
//! K-fold splits by task and the held-out calibration of Σ readouts against R ([`HeldOut`]).

use crate::error::Result;
use fnv::FnvHasher;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::Path;

/// Both kinds save their settings here, with a `model_type` that tells them apart.
pub const CONFIG: &str = "config.json";

/// One logged step as a signal model sees it.
#[derive(Clone, Debug, Default)]
pub struct StepText {
    pub task: String,
    /// The observation the action answers (o_{t−1}).
    pub obs: String,
    pub action: String,
    /// Whether the model reads out a value after this step: every step for SPA, a segment's last
    /// step for the SPRM.
    pub readout: bool,
    /// The logged step reward r_t. Never an input: held-out ĉ_t are ranked against it
    /// ([`StepOrder`]).
    pub reward: f64,
}

/// One trajectory: its split key (task, else group), steps in order and outcome R.
#[derive(Clone, Debug)]
pub struct Trajectory {
    pub key: String,
    pub steps: Vec<StepText>,
    pub ret: f64,
}

/// Where the model reads out a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Readout {
    /// Every step: SPA's ĉ_t.
    Step,
    /// The last step of each segment: HISR's r̂_i.
    SegmentEnd,
}

impl Readout {
    pub fn label(self) -> &'static str {
        match self {
            Readout::Step => "step",
            Readout::SegmentEnd => "segment-end",
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct ProgressReport {
    pub readout: Readout,
    /// Trajectories the saved model was trained on (all usable ones).
    pub trajectories: usize,
    /// Mean training loss of each epoch of the saved model.
    pub epoch_loss: Vec<f64>,
    /// Cross-validated calibration; `None` with a single task and too few trajectories, or
    /// `folds` ≤ 1.
    pub heldout: Option<HeldOut>,
    pub seconds: f64,
    /// Why the backbone recomputed its blocks in the backward pass when `--checkpoint-layers`
    /// did not ask (its activations would not fit); `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpointing: Option<String>,
}

impl ProgressReport {
    /// What a run says of `what` it trained (`the progress estimator`), a line each: the loss,
    /// the held-out calibration, the held-out step order.
    pub fn text(&self, what: &str) -> String {
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
        let mut lines = vec![
            format!(
                "trained {what} (readout: {}) on {} trajectories, {} epochs, in {:.1}s",
                self.readout.label(),
                self.trajectories,
                self.epoch_loss.len(),
                self.seconds
            ),
            format!(
                "train loss {} → {}",
                fmt(self.epoch_loss.first().copied()),
                fmt(self.epoch_loss.last().copied())
            ),
        ];
        lines.push(match &self.heldout {
            Some(h) => format!(
                "held out ({}-fold by {}, {} trajectories): MSE(R̂, R) {:.4} · constant (train mean R) {:.4} · MAE {:.4} · acc@0.1 {:.3} · Pearson r {}",
                h.folds, h.split_by, h.trajectories, h.mse, h.constant_mse, h.mae, h.acc_at_0_1,
                fmt(h.pearson)
            ),
            None => "held out: - (fewer than two folds)".to_string(),
        });
        if let Some(order) = self.heldout.as_ref().and_then(|h| h.step_order.as_ref()) {
            lines.push(format!(
                "held-out step order: ĉ_t ranks {:.3} of {} step pairs of different logged reward as the rewards do (0.5 = chance)",
                order.agreement, order.pairs
            ));
        }
        lines.join("\n")
    }
}

/// Σ readouts (R̂) against R on trajectories each predicted by a model that never saw their task.
#[derive(Clone, Debug, Serialize)]
pub struct HeldOut {
    pub folds: usize,
    /// `task`, or `trajectory` when the logs hold a single task.
    pub split_by: String,
    pub trajectories: usize,
    pub mse: f64,
    pub mae: f64,
    /// Share with |R̂ − R| ≤ 0.1 (the released code's "accuracy").
    pub acc_at_0_1: f64,
    pub pearson: Option<f64>,
    /// Predicting each fold's training mean R for all its held-out trajectories.
    pub constant_mse: f64,
    /// How held-out ĉ_t order each trajectory's steps against the logged step rewards (SPA's
    /// per-step readout only; `None` when no trajectory has two steps of different reward).
    pub step_order: Option<StepOrder>,
}

/// Of the pairs of steps in one trajectory whose logged rewards differ, the share that the
/// held-out ĉ_t put in the same order (a tie in ĉ counts half): 0.5 is chance, 1 every pair in
/// order. Σ ĉ against R cannot tell whether the credit lands on the right steps; this can, where
/// the environment logs step rewards.
#[derive(Clone, Debug, Serialize)]
pub struct StepOrder {
    pub pairs: u64,
    pub agreement: f64,
}

/// [`StepOrder`] over `trajectories`: each one's (logged reward, held-out ĉ) per step, pairs
/// taken within a trajectory only. Non-finite values are left out. O(n log n) per trajectory:
/// steps sorted by reward, ĉ ranks counted in a Fenwick tree of the steps of lower reward.
pub(super) fn step_order(trajectories: &[Vec<(f64, f64)>]) -> Option<StepOrder> {
    let (mut pairs, mut agreeing) = (0u64, 0.0f64);
    for steps in trajectories {
        let mut steps: Vec<(f64, f64)> = steps
            .iter()
            .copied()
            .filter(|(r, c)| r.is_finite() && c.is_finite())
            .collect();
        let mut ranks: Vec<f64> = steps.iter().map(|s| s.1).collect();
        ranks.sort_unstable_by(f64::total_cmp);
        ranks.dedup();
        let rank = |c: f64| ranks.partition_point(|&x| x < c);
        steps.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        // below[k]: steps of lower reward seen so far whose ĉ has rank ≤ k (1-based tree).
        let mut below = vec![0u64; ranks.len() + 1];
        let count_up_to = |tree: &[u64], mut k: usize| {
            let mut n = 0;
            while k > 0 {
                n += tree[k];
                k &= k - 1;
            }
            n
        };
        let mut seen = 0u64;
        let mut start = 0;
        while start < steps.len() {
            let end = start
                + steps[start..]
                    .iter()
                    .take_while(|s| s.0 == steps[start].0)
                    .count();
            for &(_, c) in &steps[start..end] {
                let k = rank(c);
                let lower = count_up_to(&below, k);
                let tied = count_up_to(&below, k + 1) - lower;
                pairs += seen;
                agreeing += lower as f64 + 0.5 * tied as f64;
            }
            for &(_, c) in &steps[start..end] {
                let mut k = rank(c) + 1;
                while k < below.len() {
                    below[k] += 1;
                    k += k & k.wrapping_neg();
                }
            }
            seen += (end - start) as u64;
            start = end;
        }
    }
    (pairs > 0).then(|| StepOrder {
        pairs,
        agreement: agreeing / pairs as f64,
    })
}

/// FNV-1a 64 of `text`, started from the offset basis XOR `salt`: one independent hash per salt.
pub(super) fn salted_hash(salt: u64, text: &str) -> u64 {
    // A fresh `FnvHasher` holds the offset basis, and `finish` returns the state as it is.
    let mut h = FnvHasher::with_key(FnvHasher::default().finish() ^ salt);
    h.write(text.as_bytes());
    h.finish()
}

/// A trained signal model of either kind, as `--progress-model` / `--sprm-model` use it.
pub trait StepModel: Send + Sync {
    fn readout(&self) -> Readout;
    /// The value after every step of a trajectory (ĉ_t; for a segment-end model, r̂_i where step
    /// t ends segment i and meaningless elsewhere). Empty in, empty out.
    fn predict(&self, steps: &[StepText]) -> Result<Vec<f64>>;
    /// Writes the model's folder (created if missing), each file whole or not at all.
    fn save(&self, dir: &Path) -> Result<()>;
}

/// The trajectories a model learns from: those with a readout step and a finite return.
pub(super) fn trainable(trajs: &[Trajectory]) -> Vec<&Trajectory> {
    trajs
        .iter()
        .filter(|t| t.steps.iter().any(|s| s.readout) && t.ret.is_finite())
        .collect()
}

/// What returns are divided by while training: their root mean square (1 when every one is 0).
pub(super) fn return_scale(trajs: &[&Trajectory]) -> f64 {
    let rms = (trajs.iter().map(|t| t.ret * t.ret).sum::<f64>() / trajs.len() as f64).sqrt();
    if rms > 0.0 {
        rms
    } else {
        1.0
    }
}

/// Fold of each trajectory, from its split key: tasks dealt round-robin in hash order, or
/// trajectories when there is a single task. Returns the folds, their count and what was split.
pub(super) fn folds(keys: &[&str], wanted: usize) -> (Vec<usize>, usize, &'static str) {
    let mut tasks: Vec<&str> = keys.to_vec();
    tasks.sort_unstable();
    tasks.dedup();
    let by_task = tasks.len() > 1;
    let units: Vec<String> = if by_task {
        keys.iter().map(|k| k.to_string()).collect()
    } else {
        (0..keys.len()).map(|i| format!("#{i}")).collect()
    };
    let mut order: Vec<&str> = units.iter().map(String::as_str).collect();
    order.sort_unstable();
    order.dedup();
    order.sort_by_key(|u| salted_hash(0x0073_706c_6974, u));
    let k = wanted.min(order.len()).max(1);
    let fold_of: HashMap<&str, usize> =
        order.iter().enumerate().map(|(i, u)| (*u, i % k)).collect();
    let assignment = units.iter().map(|u| fold_of[u.as_str()]).collect();
    (assignment, k, if by_task { "task" } else { "trajectory" })
}

/// How far training has gone: trajectory passes made (each training trajectory once per epoch,
/// in every fit: each cross-validation fold's and the final one's) of all the run makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passes {
    pub done: usize,
    pub total: usize,
}

/// Counts [`Passes`] for a run of `k` cross-validation folds (none below 2) and a final fit over
/// `n` trajectories, telling `report` after each update.
pub(super) struct PassCounter<'a> {
    passes: Passes,
    report: &'a mut dyn FnMut(Passes),
}

impl<'a> PassCounter<'a> {
    pub fn new(n: usize, k: usize, epochs: usize, report: &'a mut dyn FnMut(Passes)) -> Self {
        // Between them the folds train on each trajectory k − 1 times an epoch (all folds but
        // its own), and the final fit once more.
        let fits = if k >= 2 { k } else { 1 };
        let total = epochs * fits * n;
        PassCounter {
            passes: Passes { done: 0, total },
            report,
        }
    }

    pub fn add(&mut self, trajectories: usize) {
        self.passes.done += trajectories;
        (self.report)(self.passes);
    }
}

/// The held-out predictions of a cross-validation, gathered fold by fold.
pub(super) struct HeldOutPredictions {
    /// R̂ of each trajectory: Σ of its readouts.
    predicted: Vec<f64>,
    /// The mean R of the trajectories its fold trained on.
    constant: Vec<f64>,
    /// (logged r_t, ĉ_t) of each readout step, per trajectory.
    steps: Vec<Vec<(f64, f64)>>,
}

impl HeldOutPredictions {
    pub fn new(trajectories: usize) -> Self {
        HeldOutPredictions {
            predicted: vec![0.0; trajectories],
            constant: vec![0.0; trajectories],
            steps: vec![Vec::new(); trajectories],
        }
    }

    /// Trajectory `i`, predicted by a fold's model: its `values` after every one of `steps`, and
    /// the mean return the fold trained on.
    pub fn record(&mut self, i: usize, steps: &[StepText], values: &[f64], train_mean: f64) {
        let readouts = steps.iter().zip(values).filter(|(s, _)| s.readout);
        self.predicted[i] = readouts.clone().map(|(_, v)| v).sum();
        self.constant[i] = train_mean;
        self.steps[i] = readouts.map(|(s, &v)| (s.reward, v)).collect();
    }

    /// R̂ and the constant against R (`truth`); the step order for SPA's per-step readout.
    pub fn calibration(
        &self,
        truth: &[f64],
        folds: usize,
        split_by: &str,
        readout: Readout,
    ) -> HeldOut {
        let (predicted, constant) = (&self.predicted, &self.constant);
        let n = truth.len() as f64;
        let mean_of = |f: &dyn Fn(usize) -> f64| (0..truth.len()).map(f).sum::<f64>() / n;
        HeldOut {
            folds,
            split_by: split_by.to_string(),
            trajectories: truth.len(),
            mse: mean_of(&|i| (predicted[i] - truth[i]).powi(2)),
            mae: mean_of(&|i| (predicted[i] - truth[i]).abs()),
            acc_at_0_1: mean_of(&|i| f64::from((predicted[i] - truth[i]).abs() <= 0.1)),
            pearson: pearson(predicted, truth),
            constant_mse: mean_of(&|i| (constant[i] - truth[i]).powi(2)),
            step_order: match readout {
                Readout::Step => step_order(&self.steps),
                Readout::SegmentEnd => None,
            },
        }
    }
}

/// Pearson's r; `None` with fewer than two points or a constant side.
fn pearson(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len().min(b.len());
    if n < 2 {
        return None;
    }
    let (ma, mb) = (
        a[..n].iter().sum::<f64>() / n as f64,
        b[..n].iter().sum::<f64>() / n as f64,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a[..n].iter().zip(&b[..n]) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma).powi(2);
        sbb += (y - mb).powi(2);
    }
    let r = sab / (saa * sbb).sqrt();
    r.is_finite().then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The feature buckets and the folds of every saved model and report depend on these values.
    #[test]
    fn salted_hash_values_are_pinned() {
        for (salt, text, want) in [
            // FNV-1a's published 64-bit test vectors (salt 0 is plain FNV-1a).
            (0, "", 0xcbf2_9ce4_8422_2325),
            (0, "a", 0xaf63_dc4c_8601_ec8c),
            (0, "foobar", 0x8594_4171_f739_67e8),
            // The salts in use: the three text fields, then the fold order.
            (0x7461_736b, "open the drawer", 0xe64d_9b95_26ba_d372),
            (0x6f62_7376, "you see a mug", 0xf415_1bde_121e_d18d),
            (0x6163_7469, "go north", 0x7c5c_b618_64ee_0eb9),
            (0x6163_7469, "café ünïcode", 0xf2da_82e5_3002_bea6),
            (0x0073_706c_6974, "task-3", 0x2544_6849_c09f_cd4c),
            (0x0073_706c_6974, "#12", 0xf1c3_07b4_d27f_09d5),
        ] {
            assert_eq!(salted_hash(salt, text), want, "salt {salt:#x}, {text:?}");
        }
    }

    #[test]
    fn step_order_counts_pairs_of_different_reward_within_trajectories() {
        // Rewards 0, 0, 1, 2 with ĉ 0.1, 0.3, 0.3, 0.2: the five pairs of different reward score
        // 1 (0.1 < 0.3), ½ (0.3 = 0.3), 1 (0.1 < 0.2), 0 (0.3 > 0.2), 0 (0.3 > 0.2). A second
        // trajectory of equal rewards adds no pair; NaN steps are left out.
        let order = step_order(&[
            vec![
                (0.0, 0.1),
                (0.0, 0.3),
                (1.0, 0.3),
                (2.0, 0.2),
                (f64::NAN, 9.0),
            ],
            vec![(1.0, 0.5), (1.0, 0.7)],
        ])
        .unwrap();
        assert_eq!(order.pairs, 5);
        assert!((order.agreement - 2.5 / 5.0).abs() < 1e-12, "{order:?}");
        assert!(step_order(&[vec![(1.0, 0.5), (1.0, 0.7)]]).is_none());
    }

    #[test]
    fn step_order_equals_the_count_over_all_pairs() {
        let mut rng = crate::rng::SplitMix64(3);
        let trajectories: Vec<Vec<(f64, f64)>> = (0..30)
            .map(|_| {
                (0..rng.below(40))
                    .map(|_| (rng.below(4) as f64, rng.below(6) as f64 / 5.0))
                    .collect()
            })
            .collect();
        let (mut pairs, mut agreeing) = (0u64, 0.0);
        for steps in &trajectories {
            for a in steps {
                for b in steps {
                    if a.0 < b.0 {
                        pairs += 1;
                        agreeing += if a.1 < b.1 {
                            1.0
                        } else if a.1 == b.1 {
                            0.5
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
        let order = step_order(&trajectories).unwrap();
        assert_eq!(order.pairs, pairs);
        assert!((order.agreement - agreeing / pairs as f64).abs() < 1e-12);
    }
}
