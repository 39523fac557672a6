//! The `oracle` estimator and the scores against a reference (issue #53) on three tiny
//! finite-horizon MDPs whose exact advantage A^π(s, a) = Q^π(s, a) − V^π(s) (γ = 1) is computed
//! here by backward induction under a known stochastic policy:
//!
//! - *delayed effect*: taking a key at the first step decides whether the door opens at the
//!   fourth; the two steps between are distractors (both actions lead to the same state, A = 0);
//! - *mistake and repair*: putting the cup down is a mistake that picking it up repairs;
//! - *stop or continue*: stop now for a sure reward, or go on for a chance at a larger one
//!   (1- and 2-step trajectories).
//!
//! Logs are sampled as group-based RL samples them: groups of 8 rollouts per initial state, over
//! several iterations, from a seeded generator. Run with `--nocapture` for the tables.

use credit_core::analyses::against::{self, Scores};
use credit_core::methods::oracle::{self, RowKey};
use credit_core::methods::{spa, Method};
use credit_core::profile::Profile;
use credit_core::StepBatch;
use polars::prelude::{Column, DataFrame};
use std::collections::{BTreeMap, HashMap};

/// (probability, reward, next state; `None` ends the episode).
type Outcome = (f64, f64, Option<&'static str>);
/// (action, π(action | state), outcomes).
type Choice = (&'static str, f64, &'static [Outcome]);

struct Mdp {
    name: &'static str,
    /// Initial states: one group per initial state per sampled batch unit.
    starts: &'static [&'static str],
    /// Every non-terminal state's choices under the policy. State texts never recur at another
    /// step, so A^π depends on the text alone.
    states: &'static [(&'static str, &'static [Choice])],
}

const DELAYED: Mdp = Mdp {
    name: "delayed effect",
    starts: &["d0 start", "d0 gate"],
    states: &[
        (
            "d0 start",
            &[
                ("take key", 0.5, &[(1.0, 0.0, Some("d1 key"))]),
                ("walk on", 0.5, &[(1.0, 0.0, Some("d1 empty"))]),
            ],
        ),
        (
            "d0 gate",
            &[
                ("take key", 0.3, &[(1.0, 0.0, Some("d1 key"))]),
                ("walk on", 0.7, &[(1.0, 0.0, Some("d1 empty"))]),
            ],
        ),
        (
            "d1 key",
            &[
                ("look", 0.5, &[(1.0, 0.0, Some("d2 key"))]),
                ("wait", 0.5, &[(1.0, 0.0, Some("d2 key"))]),
            ],
        ),
        (
            "d1 empty",
            &[
                ("look", 0.5, &[(1.0, 0.0, Some("d2 empty"))]),
                ("wait", 0.5, &[(1.0, 0.0, Some("d2 empty"))]),
            ],
        ),
        (
            "d2 key",
            &[
                ("hum", 0.5, &[(1.0, 0.0, Some("d3 key"))]),
                ("sit", 0.5, &[(1.0, 0.0, Some("d3 key"))]),
            ],
        ),
        (
            "d2 empty",
            &[
                ("hum", 0.5, &[(1.0, 0.0, Some("d3 empty"))]),
                ("sit", 0.5, &[(1.0, 0.0, Some("d3 empty"))]),
            ],
        ),
        (
            "d3 key",
            &[
                ("open", 0.6, &[(0.8, 1.0, None), (0.2, 0.0, None)]),
                ("leave", 0.4, &[(1.0, 0.0, None)]),
            ],
        ),
        (
            "d3 empty",
            &[
                ("open", 0.6, &[(1.0, 0.0, None)]),
                ("leave", 0.4, &[(1.0, 0.0, None)]),
            ],
        ),
    ],
};

const REPAIR: Mdp = Mdp {
    name: "mistake and repair",
    starts: &["r0 holding cup", "r0 holding tray"],
    states: &[
        (
            "r0 holding cup",
            &[
                ("put down", 0.3, &[(1.0, 0.0, Some("r1 cup on floor"))]),
                ("carry", 0.7, &[(1.0, 0.0, Some("r1 holding cup"))]),
            ],
        ),
        (
            "r0 holding tray",
            &[
                ("put down", 0.5, &[(1.0, 0.0, Some("r1 cup on floor"))]),
                ("carry", 0.5, &[(1.0, 0.0, Some("r1 holding cup"))]),
            ],
        ),
        (
            "r1 cup on floor",
            &[
                ("pick up", 0.6, &[(1.0, 0.0, Some("r2 holding cup"))]),
                ("go on", 0.4, &[(1.0, 0.0, Some("r2 empty-handed"))]),
            ],
        ),
        (
            "r1 holding cup",
            &[
                ("step", 0.6, &[(1.0, 0.0, Some("r2 holding cup"))]),
                ("pause", 0.4, &[(1.0, 0.0, Some("r2 holding cup"))]),
            ],
        ),
        (
            "r2 holding cup",
            &[
                ("deliver", 0.7, &[(0.9, 1.0, None), (0.1, 0.0, None)]),
                ("drop", 0.3, &[(1.0, 0.0, None)]),
            ],
        ),
        (
            "r2 empty-handed",
            &[
                ("deliver", 0.7, &[(1.0, 0.0, None)]),
                ("drop", 0.3, &[(1.0, 0.0, None)]),
            ],
        ),
    ],
};

const STOP: Mdp = Mdp {
    name: "stop or continue",
    starts: &["s0 offer low", "s0 offer high"],
    states: &[
        (
            "s0 offer low",
            &[
                ("stop", 0.5, &[(1.0, 0.2, None)]),
                ("continue", 0.5, &[(1.0, 0.0, Some("s1 going"))]),
            ],
        ),
        (
            "s0 offer high",
            &[
                ("stop", 0.5, &[(1.0, 0.5, None)]),
                ("continue", 0.5, &[(1.0, 0.0, Some("s1 going"))]),
            ],
        ),
        (
            "s1 going",
            &[
                ("finish", 0.6, &[(0.6, 1.0, None), (0.4, 0.0, None)]),
                ("abandon", 0.4, &[(1.0, 0.0, None)]),
            ],
        ),
    ],
};

const MDPS: [&Mdp; 3] = [&DELAYED, &REPAIR, &STOP];

impl Mdp {
    fn choices(&self, state: &str) -> &'static [Choice] {
        let found = self.states.iter().find(|(s, _)| *s == state);
        found
            .unwrap_or_else(|| panic!("{}: no state `{state}`", self.name))
            .1
    }

    fn q(&self, choice: &Choice) -> f64 {
        choice
            .2
            .iter()
            .map(|&(p, r, next)| p * (r + next.map_or(0.0, |s| self.v(s))))
            .sum()
    }

    fn v(&self, state: &str) -> f64 {
        self.choices(state).iter().map(|c| c.1 * self.q(c)).sum()
    }

    /// A^π(s, a) for every state and action, by backward induction (the recursion bottoms out
    /// at the terminal outcomes: the MDPs are finite-horizon).
    fn exact(&self) -> HashMap<(&'static str, &'static str), f64> {
        let mut out = HashMap::new();
        for &(state, choices) in self.states {
            let total: f64 = choices.iter().map(|c| c.1).sum();
            assert!((total - 1.0).abs() < 1e-12, "{}: π at {state}", self.name);
            for c in choices {
                let mass: f64 = c.2.iter().map(|o| o.0).sum();
                assert!(
                    (mass - 1.0).abs() < 1e-12,
                    "{}: {state}, {}",
                    self.name,
                    c.0
                );
                out.insert((state, c.0), self.q(c) - self.v(state));
            }
        }
        out
    }
}

/// splitmix64: a seeded, platform-independent generator.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An index drawn with the given probabilities.
    fn pick(&mut self, probabilities: impl Iterator<Item = f64>) -> usize {
        let u = self.uniform();
        let mut acc = 0.0;
        let mut last = 0;
        for (i, p) in probabilities.enumerate() {
            acc += p;
            last = i;
            if u < acc {
                return i;
            }
        }
        last
    }
}

/// A sampled log: the batch, and each row's (iteration, step, state, action) as written.
struct Log {
    batch: StepBatch,
    rows: Vec<(i64, u32, &'static str, &'static str)>,
}

/// `iterations` × (one group of 8 rollouts per initial state, `groups` times over).
fn sample(mdp: &Mdp, iterations: i64, groups: usize, seed: u64) -> Log {
    let mut rng = Rng(seed);
    let (mut group_id, mut traj_id, mut reward) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for it in 0..iterations {
        for start in mdp.starts {
            for g in 0..groups {
                let group = format!("{it}/{start}/{g}");
                for k in 0..8 {
                    let mut state = Some(*start);
                    let mut t = 0;
                    while let Some(s) = state {
                        let choices = mdp.choices(s);
                        let (action, _, outcomes) = choices[rng.pick(choices.iter().map(|c| c.1))];
                        let (_, r, next) = outcomes[rng.pick(outcomes.iter().map(|o| o.0))];
                        group_id.push(group.clone());
                        traj_id.push(format!("{group}/{k}"));
                        reward.push(r);
                        rows.push((it, t, s, action));
                        state = next;
                        t += 1;
                    }
                }
            }
        }
    }
    let columns = vec![
        Column::new("group_id".into(), group_id),
        Column::new("traj_id".into(), traj_id),
        Column::new(
            "step".into(),
            rows.iter().map(|r| i64::from(r.1)).collect::<Vec<_>>(),
        ),
        Column::new("obs".into(), rows.iter().map(|r| r.2).collect::<Vec<_>>()),
        Column::new(
            "action".into(),
            rows.iter().map(|r| r.3).collect::<Vec<_>>(),
        ),
        Column::new("reward".into(), reward),
        Column::new(
            "iteration".into(),
            rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        ),
    ];
    let frame = DataFrame::new(rows.len(), columns).unwrap();
    Log {
        batch: StepBatch::new(frame, 0.5, 0.95).unwrap(),
        rows,
    }
}

impl Log {
    /// The exact A^π of every row.
    fn exact(&self, mdp: &Mdp) -> Vec<f64> {
        let table = mdp.exact();
        self.rows.iter().map(|r| table[&(r.2, r.3)]).collect()
    }

    fn keys(&self) -> Vec<RowKey> {
        oracle::row_keys(&self.batch).unwrap()
    }

    fn oracle(&self) -> Vec<f64> {
        let params = oracle::Params::preset(Profile::Paper);
        oracle::advantages(&self.batch, &params)
            .unwrap()
            .advantage()
            .to_vec()
    }

    fn method(&self, name: &str, profile: Profile) -> Vec<f64> {
        let method = Method::preset(name, profile).unwrap();
        method.advantages(&self.batch).unwrap().advantage().to_vec()
    }
}

/// The scores computed a second way, from the definitions and the texts as logged (not their
/// hashes): O(n²) average ranks, gradients summed action by action, coverage by listing.
fn independent(log: &Log, reference: &[f64], adv: &[f64]) -> (Scores, f64) {
    let zero = |v: f64| if v.abs() < 1e-8 { 0.0 } else { v };
    let ranks = |x: &[f64]| -> Vec<f64> {
        let x: Vec<f64> = x.iter().map(|&v| zero(v)).collect();
        x.iter()
            .map(|&a| {
                let below = x.iter().filter(|&&b| b < a).count() as f64;
                let tied = x.iter().filter(|&&b| b == a).count() as f64;
                below + (tied + 1.0) / 2.0
            })
            .collect()
    };
    let (rx, ry) = (ranks(reference), ranks(adv));
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let sxy: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = rx.iter().map(|a| (a - mx) * (a - mx)).sum();
    let syy: f64 = ry.iter().map(|b| (b - my) * (b - my)).sum();
    let spearman = if sxx == 0.0 || syy == 0.0 {
        0.0
    } else {
        sxy / (sxx * syy).sqrt()
    };

    let signed: Vec<usize> = (0..reference.len())
        .filter(|&i| reference[i].abs() >= 1e-8)
        .collect();
    let right = signed
        .iter()
        .filter(|&&i| adv[i].abs() >= 1e-8 && adv[i].signum() == reference[i].signum())
        .count();
    let sign_accuracy = (!signed.is_empty()).then(|| right as f64 / signed.len() as f64);
    let total: f64 = adv.iter().map(|&a| zero(a).abs()).sum();
    let leaked: f64 = (0..adv.len())
        .filter(|&i| reference[i].abs() < 1e-8)
        .map(|i| zero(adv[i]).abs())
        .sum();
    let leakage = if total > 0.0 { leaked / total } else { 0.0 };

    let mut at_key: BTreeMap<(i64, u32, &str), Vec<usize>> = BTreeMap::new();
    for (i, r) in log.rows.iter().enumerate() {
        at_key.entry((r.0, r.1, r.2)).or_default().push(i);
    }
    let gradient = |a: &[f64]| -> Vec<f64> {
        let mut g = Vec::new();
        for rows in at_key.values() {
            let mut actions: Vec<&str> = rows.iter().map(|&i| log.rows[i].3).collect();
            actions.sort();
            actions.dedup();
            for b in actions {
                let share =
                    rows.iter().filter(|&&i| log.rows[i].3 == b).count() as f64 / rows.len() as f64;
                let hit = |i: usize| if log.rows[i].3 == b { 1.0 } else { 0.0 };
                g.push(rows.iter().map(|&i| a[i] * (hit(i) - share)).sum::<f64>());
            }
        }
        g
    };
    let (gm, gr) = (gradient(adv), gradient(reference));
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let gradient_cosine = (norm(&gm) >= 1e-8 && norm(&gr) >= 1e-8)
        .then(|| gm.iter().zip(&gr).map(|(a, b)| a * b).sum::<f64>() / (norm(&gm) * norm(&gr)));

    let covered: usize = at_key
        .values()
        .filter(|rows| {
            let first = log.rows[rows[0]].3;
            rows.len() >= 2 && rows.iter().any(|&i| log.rows[i].3 != first)
        })
        .map(Vec::len)
        .sum();
    let scores = Scores {
        spearman,
        sign_accuracy,
        leakage,
        gradient_cosine,
    };
    (scores, covered as f64 / log.rows.len() as f64)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn same_scores(got: &Scores, expected: &Scores, tol: f64) -> bool {
    let opt = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => close(a, b, tol),
        (None, None) => true,
        _ => false,
    };
    close(got.spearman, expected.spearman, tol)
        && opt(got.sign_accuracy, expected.sign_accuracy)
        && close(got.leakage, expected.leakage, tol)
        && opt(got.gradient_cosine, expected.gradient_cosine)
}

#[test]
fn exact_advantages_by_hand() {
    // Backward induction written out for the delayed-effect task: V(d3 key) = 0.6·0.8 = 0.48, so
    // A(d3 key, open) = 0.8 − 0.48 = 0.32 and A(leave) = −0.48; the distractors lead to the same
    // state: A = 0; at d0 start Q(take key) = 0.48, Q(walk on) = 0, V = 0.24: A = ±0.24.
    let a = DELAYED.exact();
    for (key, expected) in [
        (("d3 key", "open"), 0.32),
        (("d3 key", "leave"), -0.48),
        (("d1 key", "look"), 0.0),
        (("d2 key", "sit"), 0.0),
        (("d0 start", "take key"), 0.24),
        (("d0 start", "walk on"), -0.24),
    ] {
        assert!(close(a[&key], expected, 1e-12), "{key:?}: {}", a[&key]);
    }
    // Mistake and repair: V(r2 holding cup) = 0.7·0.9 = 0.63; at r1 cup on floor Q(pick up) =
    // 0.63, Q(go on) = 0, V = 0.378; at r0 holding cup Q(put down) = 0.378, Q(carry) = 0.63,
    // V = 0.3·0.378 + 0.7·0.63 = 0.5544: A(put down) = −0.1764.
    let a = REPAIR.exact();
    assert!(close(a[&("r0 holding cup", "put down")], -0.1764, 1e-12));
    assert!(close(a[&("r1 cup on floor", "pick up")], 0.252, 1e-12));
    // Stop or continue: V(s1 going) = 0.36; low offer: stop 0.2 < 0.36, A(stop) = −0.08; high
    // offer: stop 0.5 > 0.36, A(stop) = +0.07.
    let a = STOP.exact();
    assert!(close(a[&("s0 offer low", "stop")], -0.08, 1e-12));
    assert!(close(a[&("s0 offer high", "stop")], 0.07, 1e-12));
}

/// Measured (5 seeds per size, one iteration of 2, 8, 32 and 128 groups of 8 per initial state,
/// ~50 to ~8,000 rows): the mean |oracle − A^π| over rows falls as n^(−0.43…−0.56) and the
/// largest as n^(−0.44…−0.50), n the rows in the batch: the 1/√n Monte Carlo rate of each key's
/// means (a little slower at the smallest sizes, where keys are still missing actions).
#[test]
fn oracle_converges_to_the_exact_advantage() {
    const SEEDS: u64 = 5;
    for mdp in MDPS {
        let mut points = Vec::new();
        println!("{}: rows, mean |oracle − A|, max |oracle − A|", mdp.name);
        for groups in [2, 8, 32, 128] {
            let (mut rows, mut mean, mut max) = (0.0, 0.0, 0.0);
            for seed in 0..SEEDS {
                let log = sample(mdp, 1, groups, 1000 + seed);
                let (est, exact) = (log.oracle(), log.exact(mdp));
                let errors: Vec<f64> = est.iter().zip(&exact).map(|(a, b)| (a - b).abs()).collect();
                rows += errors.len() as f64 / SEEDS as f64;
                mean += errors.iter().sum::<f64>() / errors.len() as f64 / SEEDS as f64;
                max += errors.iter().fold(0.0f64, |m, &e| m.max(e)) / SEEDS as f64;
            }
            println!("  {rows:8.0}  {mean:.4}  {max:.4}");
            points.push((rows, mean, max));
        }
        let slope = |pick: fn(&(f64, f64, f64)) -> f64| {
            let xs: Vec<f64> = points.iter().map(|p| p.0.ln()).collect();
            let ys: Vec<f64> = points.iter().map(|p| pick(p).ln()).collect();
            let (mx, my) = (
                xs.iter().sum::<f64>() / xs.len() as f64,
                ys.iter().sum::<f64>() / ys.len() as f64,
            );
            let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
            sxy / xs.iter().map(|x| (x - mx) * (x - mx)).sum::<f64>()
        };
        let (mean_slope, max_slope) = (slope(|p| p.1), slope(|p| p.2));
        println!("  slope of log error on log rows: mean {mean_slope:.3}, max {max_slope:.3}");
        assert!(
            (-0.7..=-0.35).contains(&mean_slope),
            "{}: mean error slope {mean_slope}",
            mdp.name
        );
        assert!(
            max_slope < -0.3,
            "{}: max error slope {max_slope}",
            mdp.name
        );
    }
}

#[test]
fn scores_match_an_independent_implementation() {
    for mdp in MDPS {
        let log = sample(mdp, 3, 1, 7);
        let keys = log.keys();
        let exact = log.exact(mdp);
        let oracle = log.oracle();
        let methods: Vec<(String, Vec<f64>)> = ["grpo", "gigpo"]
            .iter()
            .map(|m| (m.to_string(), log.method(m, Profile::Paper)))
            .chain([("oracle".to_string(), oracle.clone())])
            .collect();
        // Against the exact column (a simulator's ground truth) and against the oracle, whose
        // zeros off coverage exercise leakage and the gradient's empty keys.
        for (name, reference) in [("exact", &exact), ("oracle", &oracle)] {
            let got = against::against(name, reference, &methods, &keys).unwrap();
            for (m, adv) in &methods {
                let (expected, coverage) = independent(&log, reference, adv);
                assert!(
                    close(got.coverage, coverage, 1e-12),
                    "{}: coverage",
                    mdp.name
                );
                let s = &got.scores[m];
                assert!(
                    same_scores(s, &expected, 1e-9),
                    "{} {m} against {name}: {s:?} vs {expected:?}",
                    mdp.name
                );
            }
        }
    }
}

#[test]
fn a_method_equal_to_the_reference_scores_perfectly_and_its_negation_opposes() {
    for mdp in MDPS {
        let log = sample(mdp, 2, 2, 11);
        let keys = log.keys();
        for reference in [log.exact(mdp), log.oracle()] {
            let same = against::scores(&reference, &reference, &keys).unwrap();
            assert_eq!(same.spearman, 1.0, "{}", mdp.name);
            assert_eq!(same.sign_accuracy, Some(1.0));
            assert_eq!(same.leakage, 0.0);
            assert_eq!(same.gradient_cosine, Some(1.0));
            let negated: Vec<f64> = reference.iter().map(|v| -v).collect();
            let opposite = against::scores(&reference, &negated, &keys).unwrap();
            assert!(close(opposite.gradient_cosine.unwrap(), -1.0, 1e-12));
            assert!(close(opposite.spearman, -1.0, 1e-12));
            assert_eq!(opposite.sign_accuracy, Some(0.0));
        }
    }
}

/// Every method that runs on rewards alone, against the exact A^π, on 8 iterations of 2 groups
/// of 8 rollouts per initial state.
#[test]
fn methods_against_the_exact_advantage() {
    let names = ["grpo", "rloo", "gigpo", "hgpo", "graphgpo"];
    let mut table: BTreeMap<&str, BTreeMap<String, Scores>> = BTreeMap::new();
    for mdp in MDPS {
        let log = sample(mdp, 8, 2, 2026);
        let keys = log.keys();
        let mut methods: Vec<(String, Vec<f64>)> = vec![("oracle".into(), log.oracle())];
        for m in names {
            methods.push((m.to_string(), log.method(m, Profile::Paper)));
        }
        methods.push(("spa (verl)".into(), log.method("spa", Profile::Verl)));
        let result = against::against("exact", &log.exact(mdp), &methods, &keys).unwrap();
        println!(
            "{} (coverage {:.3}, {} rows)",
            mdp.name,
            result.coverage,
            keys.len()
        );
        println!("  method        spearman  sign acc  leakage  cosine");
        let show = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.3}"));
        for (m, _) in &methods {
            let s = &result.scores[m];
            println!(
                "  {m:<12}  {:>8.3}  {:>8}  {:>7.3}  {:>6}",
                s.spearman,
                show(s.sign_accuracy),
                s.leakage,
                show(s.gradient_cosine)
            );
        }
        let lengths = log.batch.trajs.iter().map(|t| t.rows.len());
        let note = against::spa_weighting_note(&spa::Params::verl(), lengths);
        assert_eq!(
            note.is_some(),
            mdp.name == STOP.name,
            "{}: {note:?}",
            mdp.name
        );
        table.insert(mdp.name, result.scores);
    }
    let score = |mdp: &Mdp, m: &str| table[mdp.name][m].clone();
    let cos = |mdp: &Mdp, m: &str| score(mdp, m).gradient_cosine.unwrap();
    // The oracle is nearest the truth everywhere.
    for mdp in MDPS {
        for m in names {
            assert!(
                cos(mdp, "oracle") > cos(mdp, m),
                "{}: oracle vs {m}",
                mdp.name
            );
        }
    }
    // GiGPO separates what GRPO's episode-level credit cannot: its step term ranks the rows of
    // one state by their own returns and gives states whose returns all agree (the doomed ones
    // after a missed key or an unrepaired mistake) no step credit. Both rank the truth better and
    // spend less credit where the truth has none (on 10 of 10 seeds at this size).
    for mdp in [&DELAYED, &REPAIR] {
        let (grpo, gigpo) = (score(mdp, "grpo"), score(mdp, "gigpo"));
        assert!(gigpo.spearman > grpo.spearman, "{}", mdp.name);
        assert!(gigpo.leakage < grpo.leakage, "{}", mdp.name);
    }
    // Where every episode is short, its step term still separates stop from continue by sign.
    let (grpo, gigpo) = (score(&STOP, "grpo"), score(&STOP, "gigpo"));
    assert!(gigpo.sign_accuracy > grpo.sign_accuracy);
    // On the delayed effect every episode-level method spends much of its credit on the
    // distractor steps, as a broadcast does.
    for m in names {
        assert!(score(&DELAYED, m).leakage > 0.3, "{m}");
    }
}

/// Rows of `log` at state `state`, and the scores of `adv` against `reference` over them alone.
fn scores_at(log: &Log, state: &str, reference: &[f64], adv: &[f64]) -> against::Scores {
    let rows: Vec<usize> = (0..log.rows.len())
        .filter(|&i| log.rows[i].2 == state)
        .collect();
    let keys = log.keys();
    let pick = |v: &[f64]| rows.iter().map(|&i| v[i]).collect::<Vec<_>>();
    let keys: Vec<RowKey> = rows.iter().map(|&i| keys[i]).collect();
    against::scores(&pick(reference), &pick(adv), &keys).unwrap()
}

#[test]
fn episode_credit_rewards_the_repaired_mistake_and_spa_verl_misleads_on_short_episodes() {
    // The mistake on a successful path: the episode-level methods credit it, the truth does not.
    // (GraphGPO, which credits a step by the distance to success it leaves, sees no mistake here:
    // the repair costs no extra step, so both paths are equally far from success.)
    let log = sample(&REPAIR, 8, 2, 2026);
    let exact = log.exact(&REPAIR);
    let success: Vec<bool> = (0..log.rows.len())
        .map(|i| log.batch.trajs[log.batch.traj_of_row[i] as usize].success)
        .collect();
    let mistakes: Vec<usize> = (0..log.rows.len())
        .filter(|&i| log.rows[i].3 == "put down" && success[i])
        .collect();
    assert!(!mistakes.is_empty());
    let mean_on =
        |adv: &[f64]| mistakes.iter().map(|&i| adv[i]).sum::<f64>() / mistakes.len() as f64;
    println!(
        "mean credit of `put down` on successful paths ({} rows):",
        mistakes.len()
    );
    for m in ["grpo", "gigpo", "graphgpo"] {
        println!("  {m:<9} {:+.3}", mean_on(&log.method(m, Profile::Paper)));
    }
    println!(
        "  oracle    {:+.3}\n  exact     {:+.3}",
        mean_on(&log.oracle()),
        mean_on(&exact)
    );
    assert!(mean_on(&exact) < 0.0 && mean_on(&log.oracle()) < 0.0);
    assert!(mean_on(&log.method("grpo", Profile::Paper)) > 0.0);
    assert!(mean_on(&log.method("gigpo", Profile::Paper)) > 0.0);

    // SPA's `verl` weighting scores step k of n as r_k·(n−1−k): a 1-step episode (stop) gets no
    // reward and the first step of a 2-step one (continue) gets β = 0.5 on top of its outcome, so
    // it pushes `continue` where stopping is right (the high offer), and the last step, whose
    // reward is always 0, moves no logit at all.
    let log = sample(&STOP, 8, 2, 2026);
    let (exact, spa) = (log.exact(&STOP), log.method("spa", Profile::Verl));
    let high = scores_at(&log, "s0 offer high", &exact, &spa);
    // One key per iteration, each opposing the truth: the cosine over the 8 is near −1.
    assert!(high.gradient_cosine.unwrap() < -0.9, "{high:?}");
    let last = scores_at(&log, "s1 going", &exact, &spa);
    assert_eq!(last.gradient_cosine, None, "{last:?}");
    let lengths = log.batch.trajs.iter().map(|t| t.rows.len());
    assert!(against::spa_weighting_note(&spa::Params::verl(), lengths).is_some());
}
