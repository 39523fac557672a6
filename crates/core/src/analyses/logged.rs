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
    pub fn of(window: &Window, batch: &StepBatch, labels: &[String], results: &[Advantages]) -> Self {
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
