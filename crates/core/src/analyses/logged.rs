//! The trainer held to the reference: each planned method against the advantages the run logged
//! (method `logged`). Per method, the largest |logged − method| over every row, how many rows
//! differ by more than [`TOLERANCE`], and the first of them in input order with the file and
//! line they were read from, so that a user can open the row the trainer got wrong.
//!
//! The rows' origins exist only while their window does, so the first differing rows are picked
//! window by window ([`Departures::of`]) and merged in input order ([`Departures::merge`]); the
//! maximum and the count come from the gathered columns ([`check`]).

use crate::ingest::Window;
use crate::methods::Advantages;
use crate::schema::columns::STEP;
use crate::StepBatch;
use serde::Serialize;

/// |logged − method| above this is a difference: trainers compute advantages in float32, whose
/// rounding of the same arithmetic stays well below it (the reference outputs agree with
/// `credit`'s f64 to 1e-4, `crates/core/tests/reference.rs`).
pub const TOLERANCE: f64 = 1e-4;

/// How many differing rows each method's check names.
pub const FIRST: usize = 5;

/// One method against the logged advantages.
#[derive(Clone, Debug, Serialize)]
pub struct LoggedCheck {
    pub method: String,
    /// max |logged − method| over every row.
    pub max_abs_diff: f64,
    /// Rows where |logged − method| > [`TOLERANCE`].
    pub rows_beyond: usize,
    pub rows: usize,
    /// The first [`FIRST`] of those rows, in input order.
    pub first: Vec<Departure>,
}

/// A row where a method departs from the logged advantage.
#[derive(Clone, Debug, Serialize)]
pub struct Departure {
    /// Where the row was read: `logs/a.jsonl:17` (JSONL line), `logs/a.parquet:row 16`.
    pub location: String,
    pub traj_id: String,
    pub step: Option<i64>,
    pub logged: f64,
    pub value: f64,
    /// The row's place in the input, to merge windows in input order.
    #[serde(skip)]
    seq: u64,
}

/// The first differing rows seen so far, per planned method (empty where `logged` is not planned).
#[derive(Clone, Debug, Default)]
pub struct Departures(Vec<Vec<Departure>>);

impl Departures {
    /// The first [`FIRST`] rows of `window` (input order) where each method departs from
    /// `logged`; `results` are the planned methods' results on the window's `batch`, labelled by
    /// `labels`. Nothing when `logged` is not among them.
    pub fn of(
        window: &Window,
        batch: &StepBatch,
        labels: &[String],
        results: &[Advantages],
    ) -> Self {
        let Some(reference) = labels.iter().position(|l| l == "logged") else {
            return Departures::default();
        };
        let logged = results[reference].advantage();
        let steps = batch.opt_i64s(STEP);
        let departures = results
            .iter()
            .map(|result| {
                let values = result.advantage();
                let mut beyond: Vec<usize> = (0..batch.len())
                    .filter(|&r| (logged[r] - values[r]).abs() > TOLERANCE)
                    .collect();
                beyond.sort_unstable_by_key(|&r| window.seq[r]);
                beyond.truncate(FIRST);
                beyond
                    .into_iter()
                    .map(|r| Departure {
                        location: window.location(r).to_string(),
                        traj_id: batch.trajs[batch.traj_of_row[r] as usize].id.to_string(),
                        step: steps.and_then(|s| s.get(r)),
                        logged: logged[r],
                        value: values[r],
                        seq: window.seq[r],
                    })
                    .collect()
            })
            .collect();
        Departures(departures)
    }

    /// Adds the departures of logs read after these (`credit watch` reads a run file by file):
    /// theirs come after every one of these.
    pub fn follow(&mut self, later: Departures) {
        if self.0.is_empty() {
            *self = later;
            return;
        }
        for (mine, theirs) in self.0.iter_mut().zip(later.0) {
            let room = FIRST.saturating_sub(mine.len());
            mine.extend(theirs.into_iter().take(room));
        }
    }

    /// Keeps the first [`FIRST`] rows of both, in input order.
    pub fn merge(&mut self, other: Departures) {
        if self.0.is_empty() {
            *self = other;
            return;
        }
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            mine.extend(theirs);
            mine.sort_unstable_by_key(|d| d.seq);
            mine.truncate(FIRST);
        }
    }
}

/// Every planned method but `logged` against it: `advantages` are the gathered columns (label,
/// one value per row in input order), `departures` the first differing rows. Empty when
/// `logged` is not planned.
pub fn check(advantages: &[(String, Vec<f64>)], departures: &Departures) -> Vec<LoggedCheck> {
    let Some(reference) = advantages.iter().position(|(l, _)| l == "logged") else {
        return Vec::new();
    };
    let logged = &advantages[reference].1;
    advantages
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != reference)
        .map(|(i, (label, values))| {
            let diffs = logged.iter().zip(values).map(|(a, b)| (a - b).abs());
            LoggedCheck {
                method: label.clone(),
                max_abs_diff: diffs.clone().fold(0.0, f64::max),
                rows_beyond: diffs.filter(|&d| d > TOLERANCE).count(),
                rows: logged.len(),
                first: departures.0.get(i).cloned().unwrap_or_default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64) -> Departure {
        Departure {
            location: format!("a.jsonl:{}", seq + 1),
            traj_id: "t".into(),
            step: Some(0),
            logged: 0.0,
            value: 1.0,
            seq,
        }
    }

    #[test]
    fn every_method_against_logged_wherever_it_is_planned() {
        // Δ = 5e-5 (within the tolerance), 0.5, 0: one row beyond, max 0.5.
        let advantages = vec![
            ("gigpo".to_string(), vec![1.0, 2.0, 3.0]),
            ("logged".to_string(), vec![1.0 + 5e-5, 2.5, 3.0]),
            ("grpo".to_string(), vec![1.0, 2.5, 3.0]),
        ];
        let checks = check(&advantages, &Departures::default());
        let methods: Vec<&str> = checks.iter().map(|c| c.method.as_str()).collect();
        assert_eq!(methods, ["gigpo", "grpo"]);
        assert!((checks[0].max_abs_diff - 0.5).abs() < 1e-12);
        assert_eq!((checks[0].rows_beyond, checks[0].rows), (1, 3));
        assert!((checks[1].max_abs_diff - 5e-5).abs() < 1e-12);
        assert_eq!(checks[1].rows_beyond, 0);
        assert!(check(&advantages[..1], &Departures::default()).is_empty());
    }

    #[test]
    fn windows_merge_into_the_first_rows_in_input_order() {
        // Groups interleave: the second window holds earlier rows than the first.
        let mut kept = Departures(vec![vec![at(4), at(9)]]);
        kept.merge(Departures(vec![(0..FIRST as u64)
            .map(|s| at(2 * s + 1))
            .collect()]));
        let seqs: Vec<u64> = kept.0[0].iter().map(|d| d.seq).collect();
        assert_eq!(seqs, [1, 3, 4, 5, 7]);
        let mut empty = Departures::default();
        empty.merge(Departures(vec![vec![at(2)]]));
        assert_eq!(empty.0[0].len(), 1);
    }
}
