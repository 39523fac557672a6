//! How a method's departures from the logged advantages are laid out, so that "111 of 404 rows
//! differ" reads as what it is: one whole group at a constant ratio 0.935 (a std, ddof or eps
//! difference), a group shifted by a constant (a baseline difference), a trajectory sign-flipped
//! or shifted, only the invalid rows (a penalty difference), or rows that fit no pattern.
//!
//! Every pattern lies within a group, and a window holds its groups whole, so each window is
//! tallied on its own ([`Tally::of`]) and the tallies are added ([`Tally::merge`]): a count per
//! kind and its first [`FIRST`] instances in input order, whatever the size of the log.
//!
//! Padding duplicates are no kind: ingest drops a row identical to an earlier one (advantage
//! included) before any method runs, so the logged and the recomputed value of a duplicate are
//! its first row's.

use crate::ingest::Window;
use crate::StepBatch;
use serde::Serialize;
use std::collections::BTreeMap;

/// |logged − method| above this is a difference: trainers compute advantages in float32, whose
/// rounding of the same arithmetic stays well below it (the reference outputs agree with
/// `credit`'s f64 to 1e-4, `crates/core/tests/reference.rs`).
pub const TOLERANCE: f64 = 1e-4;

/// How many differing rows (and instances of each pattern) each method's check names.
pub const FIRST: usize = 5;

/// A layout of differing rows, most telling first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Every row of a group at logged = k · method, one k for the group.
    GroupRatio,
    /// Every row of a group at logged = method + c, one c for the group.
    GroupOffset,
    /// Every row of a trajectory at logged = −method.
    TrajectoryFlip,
    /// Every row of a trajectory at logged = method + c.
    TrajectoryShift,
    /// The rows that differ in a group are all invalid actions.
    InvalidOnly,
    /// Most of a group's rows differ, by no one ratio or offset: both its mean and its spread
    /// moved (a penalty or `stats_over` difference under row statistics), or a std setting
    /// moved GiGPO's step terms too.
    GroupStatistics,
    /// A row that fits none of the above.
    Isolated,
}

impl Kind {
    /// What the kind says about the trainer, in words.
    pub fn words(self) -> &'static str {
        match self {
            Kind::GroupRatio => "whole groups at a constant ratio (a std, ddof or eps difference)",
            Kind::GroupOffset => "whole groups at a constant offset (a baseline difference)",
            Kind::TrajectoryFlip => "whole trajectories sign-flipped",
            Kind::TrajectoryShift => "whole trajectories shifted by a constant",
            Kind::InvalidOnly => "only rows where `valid` is false (a penalty difference)",
            Kind::GroupStatistics => {
                "groups where most rows differ, by no one ratio or offset (their statistics differ: a penalty, stats_over, or a std setting of a method with step terms)"
            }
            Kind::Isolated => "isolated rows",
        }
    }
}

/// The differing rows of one kind, over the whole log.
#[derive(Clone, Debug, Serialize)]
pub struct Pattern {
    pub kind: Kind,
    /// Differing rows laid out this way.
    pub rows: usize,
    /// Groups (trajectories, rows) laid out this way.
    pub instances: usize,
    /// The first [`FIRST`] of them, in input order.
    pub first: Vec<Instance>,
}

/// One group, trajectory or row of a pattern.
#[derive(Clone, Debug, Serialize)]
pub struct Instance {
    pub group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<String>,
    /// Where its first differing row was read (`logs/a.jsonl:17`).
    pub location: String,
    pub rows: usize,
    /// k of logged = k · method ([`Kind::GroupRatio`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// c of logged = method + c ([`Kind::GroupOffset`], [`Kind::TrajectoryShift`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<f64>,
    #[serde(skip)]
    seq: u64,
}

/// One method's patterns so far.
#[derive(Clone, Debug, Default)]
pub struct Tally(BTreeMap<Kind, Pattern>);

/// A pattern found in one group: its kind, differing rows, trajectory and constant.
struct Found {
    kind: Kind,
    rows: Vec<u32>,
    traj: Option<u32>,
    ratio: Option<f64>,
    offset: Option<f64>,
}

impl Found {
    fn new(kind: Kind, rows: Vec<u32>) -> Self {
        Found {
            kind,
            rows,
            traj: None,
            ratio: None,
            offset: None,
        }
    }
}

impl Tally {
    /// The patterns of `values` against `logged` in one window's batch.
    pub fn of(window: &Window, batch: &StepBatch, logged: &[f64], values: &[f64]) -> Tally {
        let mut tally = Tally::default();
        let differs = |r: u32| (logged[r as usize] - values[r as usize]).abs() > TOLERANCE;
        if !(0..batch.len() as u32).any(differs) {
            return tally;
        }
        let valid = batch.valid();
        for g in 0..batch.groups.len() {
            for found in group_patterns(batch, g, logged, values, &valid) {
                let first = found
                    .rows
                    .iter()
                    .copied()
                    .min_by_key(|&r| window.seq[r as usize])
                    .unwrap_or_default() as usize;
                let instance = Instance {
                    group: batch.groups[g].id.to_string(),
                    trajectory: found.traj.map(|t| batch.trajs[t as usize].id.to_string()),
                    location: window.location(first).to_string(),
                    rows: found.rows.len(),
                    ratio: found.ratio,
                    offset: found.offset,
                    seq: window.seq[first],
                };
                tally.add(found.kind, instance);
            }
        }
        tally
    }

    /// One instance more.
    fn add(&mut self, kind: Kind, instance: Instance) {
        let mut one = Tally::default();
        one.0.insert(
            kind,
            Pattern {
                kind,
                rows: instance.rows,
                instances: 1,
                first: vec![instance],
            },
        );
        self.merge(one);
    }

    /// Adds another window's tally: the first instances stay the first in input order.
    pub fn merge(&mut self, other: Tally) {
        self.join(other, true);
    }

    /// Adds the tally of logs read after these (`credit watch`): theirs come after these.
    pub fn follow(&mut self, later: Tally) {
        self.join(later, false);
    }

    fn join(&mut self, other: Tally, by_seq: bool) {
        for (kind, pattern) in other.0 {
            let mine = self.0.entry(kind).or_insert_with(|| Pattern {
                kind,
                rows: 0,
                instances: 0,
                first: Vec::new(),
            });
            mine.rows += pattern.rows;
            mine.instances += pattern.instances;
            mine.first.extend(pattern.first);
            if by_seq {
                mine.first.sort_by_key(|i| i.seq);
            }
            mine.first.truncate(FIRST);
        }
    }

    /// The patterns, most telling kind first.
    pub fn patterns(&self) -> Vec<Pattern> {
        self.0.values().cloned().collect()
    }
}

/// The patterns of one group: the whole group at one ratio or offset; else each trajectory
/// flipped or shifted whole, and the rest only invalid rows, most of the group, or isolated rows.
fn group_patterns(
    batch: &StepBatch,
    g: usize,
    logged: &[f64],
    values: &[f64],
    valid: &[bool],
) -> Vec<Found> {
    let pair = |r: u32| (logged[r as usize], values[r as usize]);
    let differs = |r: &u32| {
        let (l, v) = pair(*r);
        (l - v).abs() > TOLERANCE
    };
    let rows: Vec<u32> = batch.group_rows(g).collect();
    let differing: Vec<u32> = rows.iter().copied().filter(differs).collect();
    if differing.is_empty() {
        return Vec::new();
    }
    let pairs: Vec<(f64, f64)> = rows.iter().map(|&r| pair(r)).collect();
    if differing.len() >= 2 {
        if let Some(k) = ratio(&pairs) {
            let mut found = Found::new(Kind::GroupRatio, differing);
            found.ratio = Some(k);
            return vec![found];
        }
        if let Some(c) = offset(&pairs) {
            let mut found = Found::new(Kind::GroupOffset, differing);
            found.offset = Some(c);
            return vec![found];
        }
    }
    let mut found = Vec::new();
    let mut rest = Vec::new();
    for &t in &batch.groups[g].trajs {
        let traj = &batch.trajs[t as usize].rows;
        let here: Vec<u32> = traj.iter().copied().filter(differs).collect();
        if here.is_empty() {
            continue;
        }
        let pairs: Vec<(f64, f64)> = traj.iter().map(|&r| pair(r)).collect();
        let shift = (here.len() >= 2).then(|| offset(&pairs)).flatten();
        let kind = if pairs.iter().all(|(l, v)| (l + v).abs() <= TOLERANCE) {
            Kind::TrajectoryFlip
        } else if shift.is_some() {
            Kind::TrajectoryShift
        } else {
            rest.extend(here);
            continue;
        };
        found.push(Found {
            traj: Some(t),
            offset: shift.filter(|_| kind == Kind::TrajectoryShift),
            ..Found::new(kind, here)
        });
    }
    if rest.is_empty() {
        return found;
    }
    if rest.iter().all(|&r| !valid[r as usize]) {
        found.push(Found::new(Kind::InvalidOnly, rest));
    } else if 2 * differing.len() > rows.len() {
        return vec![Found::new(Kind::GroupStatistics, differing)];
    } else {
        found.extend(rest.into_iter().map(|r| Found {
            traj: Some(batch.traj_of_row[r as usize]),
            ..Found::new(Kind::Isolated, vec![r])
        }));
    }
    found
}

/// k when every (logged, method) pair lies within the tolerance of logged = k · method, k ≠ 1
/// (the least-squares k: float32 rounding in the logged values moves it by ~1e-7).
fn ratio(pairs: &[(f64, f64)]) -> Option<f64> {
    let (num, den) = pairs
        .iter()
        .fold((0.0, 0.0), |(n, d), (l, v)| (n + l * v, d + v * v));
    let k = num / den;
    let fits = |k: f64| pairs.iter().all(|(l, v)| (l - k * v).abs() <= TOLERANCE);
    (den > 0.0 && k.is_finite() && !fits(1.0) && fits(k)).then_some(k)
}

/// c when every pair lies within the tolerance of logged = method + c, |c| beyond it.
fn offset(pairs: &[(f64, f64)]) -> Option<f64> {
    let c = pairs.iter().map(|(l, v)| l - v).sum::<f64>() / pairs.len().max(1) as f64;
    let fits = pairs.iter().all(|(l, v)| (l - v - c).abs() <= TOLERANCE);
    (fits && c.abs() > TOLERANCE && c.is_finite()).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::batch;

    // Group g: a (3 steps), b (2 steps, the second invalid); group h: c (2 steps).
    const ROWS: [crate::batch::testing::Row; 7] = [
        ("g", "a", 0, "s", 0.0, true),
        ("g", "a", 1, "s", 0.0, true),
        ("g", "a", 2, "s", 1.0, true),
        ("g", "b", 0, "s", 0.0, true),
        ("g", "b", 1, "s", 0.0, false),
        ("h", "c", 0, "s", 0.0, true),
        ("h", "c", 1, "s", 1.0, true),
    ];
    const METHOD: [f64; 7] = [1.0, 1.0, 1.0, -1.5, -1.5, 0.5, -0.5];

    fn kinds(logged: [f64; 7]) -> Vec<(Kind, usize, Option<f64>, Option<f64>)> {
        let b = batch(&ROWS);
        let valid = b.valid();
        (0..b.groups.len())
            .flat_map(|g| group_patterns(&b, g, &logged, &METHOD, &valid))
            .map(|f| (f.kind, f.rows.len(), f.ratio, f.offset))
            .collect()
    }

    #[test]
    fn a_group_at_one_ratio_or_offset() {
        let scaled = METHOD.map(|v| 0.9 * v);
        let found = kinds(scaled);
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].0, found[0].1), (Kind::GroupRatio, 5));
        assert!((found[0].2.unwrap() - 0.9).abs() < 1e-12);
        let shifted = METHOD.map(|v| v + 0.25);
        let found = kinds(shifted);
        assert_eq!((found[0].0, found[0].1), (Kind::GroupOffset, 5));
        assert!((found[1].3.unwrap() - 0.25).abs() < 1e-12);
    }

    #[test]
    fn trajectories_invalid_rows_and_the_rest() {
        let mut flipped = METHOD;
        flipped[3] = 1.5;
        flipped[4] = 1.5;
        assert_eq!(kinds(flipped), [(Kind::TrajectoryFlip, 2, None, None)]);
        let mut penalised = METHOD;
        penalised[4] -= 0.1;
        assert_eq!(kinds(penalised), [(Kind::InvalidOnly, 1, None, None)]);
        let mut zeroed = METHOD;
        zeroed[0] = 0.0;
        zeroed[6] = 0.0;
        assert_eq!(
            kinds(zeroed),
            [
                (Kind::Isolated, 1, None, None),
                (Kind::Isolated, 1, None, None)
            ]
        );
        // Three of five rows, by no one ratio or offset.
        let mut moved = METHOD;
        moved[0] = 2.0;
        moved[1] = 0.0;
        moved[3] = 0.0;
        assert_eq!(kinds(moved), [(Kind::GroupStatistics, 3, None, None)]);
    }
}
