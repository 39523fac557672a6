//! The trainer held to the reference: each planned method against the advantages the run logged
//! (method `logged`). Per method, the largest |logged − method| over every row, how many rows
//! differ by more than [`TOLERANCE`], and the first of them in input order with the file and
//! line they were read from, so that a user can open the row the trainer got wrong. Beside the
//! rows, the diagnosis: how the differing rows are laid out ([`super::patterns`]) and the
//! configuration that reproduces the logged column, or comes closest ([`super::search`]).
//!
//! The rows' origins exist only while their window does, so the first differing rows, the
//! patterns and the search are made window by window ([`Departures::of`]) and merged in input
//! order ([`Departures::merge`]); the maximum and the count come from the gathered columns
//! ([`check`]).

use super::patterns::{Pattern, Tally};
use super::search::{Configuration, Searched, Shared};
use crate::ingest::Window;
use crate::methods::Advantages;
use crate::schema::columns::STEP;
use crate::StepBatch;
use serde::Serialize;

// Defined with the patterns, which the search and this check share.
pub use super::patterns::{FIRST, TOLERANCE};

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
    /// The configuration that reproduces the logged column, or the closest one tried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configuration: Option<Configuration>,
    /// The rows beyond the tolerance by layout (whole groups at one ratio, …), most telling first.
    pub patterns: Vec<Pattern>,
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

/// What is kept of every method against `logged` so far (nothing where it is not planned): per
/// planned method its first differing rows and its patterns; the configuration search.
#[derive(Clone, Debug, Default)]
pub struct Departures {
    first: Vec<Vec<Departure>>,
    patterns: Vec<Tally>,
    searched: Searched,
    search: Shared,
}

impl Departures {
    /// Each method against `logged` on one window: its first [`FIRST`] differing rows (input
    /// order), its patterns, and `search` run there. `results` are the planned methods' results
    /// on the window's `batch`, labelled by `labels`. Nothing when `logged` is not among them.
    pub fn of(
        window: &Window,
        batch: &StepBatch,
        labels: &[String],
        results: &[Advantages],
        search: &Shared,
    ) -> Self {
        let (Some(reference), Some(search)) = (labels.iter().position(|l| l == "logged"), search)
        else {
            return Departures::default();
        };
        let logged = results[reference].advantage();
        let columns: Vec<&[f64]> = results.iter().map(|r| r.advantage()).collect();
        Departures {
            first: columns
                .iter()
                .map(|values| first_rows(window, batch, logged, values))
                .collect(),
            patterns: columns
                .iter()
                .map(|values| Tally::of(window, batch, logged, values))
                .collect(),
            searched: search.window(batch, logged, &columns),
            search: Some(search.clone()),
        }
    }

    /// Adds the departures of logs read after these (`credit watch` reads a run file by file):
    /// theirs come after every one of these.
    pub fn follow(&mut self, later: Departures) {
        self.combine(later, false);
    }

    /// Keeps the first [`FIRST`] rows of both, in input order.
    pub fn merge(&mut self, other: Departures) {
        self.combine(other, true);
    }

    /// Both: the first rows and instances by input order (`by_seq`) or these first; the searches
    /// add up.
    fn combine(&mut self, other: Departures, by_seq: bool) {
        if self.search.is_none() {
            *self = other;
            return;
        }
        for (mine, theirs) in self.first.iter_mut().zip(other.first) {
            mine.extend(theirs);
            if by_seq {
                mine.sort_unstable_by_key(|d| d.seq);
            }
            mine.truncate(FIRST);
        }
        for (mine, theirs) in self.patterns.iter_mut().zip(other.patterns) {
            if by_seq {
                mine.merge(theirs);
            } else {
                mine.follow(theirs);
            }
        }
        self.searched.merge(other.searched);
    }
}

/// The first [`FIRST`] rows of `window` (input order) where `values` depart from `logged`.
fn first_rows(
    window: &Window,
    batch: &StepBatch,
    logged: &[f64],
    values: &[f64],
) -> Vec<Departure> {
    let steps = batch.opt_i64s(STEP);
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
}

/// Every planned method but `logged` against it: `advantages` are the gathered columns (label,
/// one value per row in input order), `departures` what the windows kept. Empty when `logged` is
/// not planned.
pub fn check(advantages: &[(String, Vec<f64>)], departures: &Departures) -> Vec<LoggedCheck> {
    let Some(reference) = advantages.iter().position(|(l, _)| l == "logged") else {
        return Vec::new();
    };
    let logged = &advantages[reference].1;
    let mut checks: Vec<LoggedCheck> = advantages
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
                first: departures.first.get(i).cloned().unwrap_or_default(),
                configuration: None,
                patterns: departures
                    .patterns
                    .get(i)
                    .map(Tally::patterns)
                    .unwrap_or_default(),
            }
        })
        .collect();
    let configurations: Vec<Option<Configuration>> = checks
        .iter()
        .map(|c| configuration(c, &checks, departures))
        .collect();
    for (check, found) in checks.iter_mut().zip(configurations) {
        check.configuration = found;
    }
    checks
}

/// The configuration for `check`'s entry: its own method where it reproduces the logged column;
/// else the search's closest candidate; else (nothing searched: a planned method reproduced every
/// window) the planned method that reproduces it.
fn configuration(
    check: &LoggedCheck,
    checks: &[LoggedCheck],
    departures: &Departures,
) -> Option<Configuration> {
    let search = departures.search.as_ref()?;
    let searched = &departures.searched;
    if check.rows_beyond == 0 {
        return search.planned(&check.method, (check.max_abs_diff, 0), searched);
    }
    search.best(searched).or_else(|| {
        let closest = checks
            .iter()
            .filter(|c| c.rows_beyond == 0)
            .min_by(|a, b| a.max_abs_diff.total_cmp(&b.max_abs_diff))?;
        search.planned(&closest.method, (closest.max_abs_diff, 0), searched)
    })
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

    /// One method's first rows, as a window of a run that plans `logged` keeps them.
    fn kept(rows: Vec<Departure>) -> Departures {
        let search = super::super::search::Search::new(&[], crate::profile::Profile::Paper);
        Departures {
            first: vec![rows],
            patterns: vec![Tally::default()],
            searched: Searched::default(),
            search: Some(std::sync::Arc::new(search)),
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
        let mut kept = kept(vec![at(4), at(9)]);
        kept.merge(self::kept(
            (0..FIRST as u64).map(|s| at(2 * s + 1)).collect(),
        ));
        let seqs: Vec<u64> = kept.first[0].iter().map(|d| d.seq).collect();
        assert_eq!(seqs, [1, 3, 4, 5, 7]);
        let mut empty = Departures::default();
        empty.merge(self::kept(vec![at(2)]));
        assert_eq!(empty.first[0].len(), 1);
    }
}
