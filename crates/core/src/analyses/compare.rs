//! `credit compare`: how differently estimators credit the same steps. Distributions, pairwise
//! rank correlation and sign agreement, credit by (trajectory success × action validity), invalid
//! actions that receive positive credit (MGR's argument, `spec-mgr.md` §2.1), mean credit by step
//! position, and per task.

use super::stats::{kendall_tau_b, mean, spearman, Distribution};
use crate::batch::StepBatch;
use crate::methods::oracle::RowKey;
use serde::Serialize;
use std::collections::BTreeMap;

/// Step positions at and beyond this share one bucket.
pub const POSITION_CAP: u32 = 50;

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub methods: Vec<String>,
    pub distributions: BTreeMap<String, Distribution>,
    pub pairwise: Vec<Pair>,
    pub cells: BTreeMap<String, Vec<Cell>>,
    pub invalid_credit: BTreeMap<String, InvalidCredit>,
    pub by_position: BTreeMap<String, Vec<Position>>,
    pub per_task: Vec<TaskRow>,
    /// Each method against the logged advantages, when `logged` is among the methods.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logged: Vec<super::logged::LoggedCheck>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Pair {
    pub a: String,
    pub b: String,
    /// `None` (null) when one method is constant over the steps.
    pub spearman: Option<f64>,
    pub kendall_tau_b: Option<f64>,
    /// Share of steps where sign(a) = sign(b) (0 counts as its own sign).
    pub sign_agreement: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub success: bool,
    pub valid: bool,
    pub steps: usize,
    pub mean: f64,
    pub share_positive: f64,
    pub share_negative: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct InvalidCredit {
    pub invalid_steps: usize,
    /// #{invalid, A > 0} / #{invalid}.
    pub invalid_positive_share: f64,
    pub invalid_steps_in_success: usize,
    /// #{invalid, A > 0, trajectory succeeded} / #{invalid, trajectory succeeded}.
    pub invalid_positive_share_in_success: f64,
    /// #{sign(A) = v} / #steps, with v = ±1 and A = 0 a disagreement.
    pub sign_agreement_with_validity: f64,
    pub mean_on_invalid: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Position {
    /// 0-based step position; the last bucket holds every position ≥ `POSITION_CAP`.
    pub position: u32,
    pub steps: usize,
    pub mean: f64,
    pub mean_success: Option<f64>,
    pub mean_failure: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskRow {
    pub task: String,
    pub steps: usize,
    pub mean: BTreeMap<String, f64>,
    pub invalid_positive_share: BTreeMap<String, f64>,
}

fn sign(x: f64) -> i8 {
    if x > 0.0 {
        1
    } else if x < 0.0 {
        -1
    } else {
        0
    }
}

/// What a comparison needs of each row besides the advantages, in input order. Gathered window
/// by window ([`CompareRows::append`]), it is the one thing `compare` keeps per row: a few bytes
/// plus 8 per method.
#[derive(Clone, Debug, Default)]
pub struct CompareRows {
    pub valid: Vec<bool>,
    pub success: Vec<bool>,
    /// 0-based step position within the trajectory.
    pub position: Vec<u32>,
    /// Task per row (an index into `task_names`), when a `task` column is logged.
    pub task: Option<Vec<u32>>,
    pub task_names: Vec<String>,
    task_index: std::collections::HashMap<String, u32>,
    /// Each row's key in the empirical MDP (iteration, t, state, action), when the run scores
    /// its methods against a reference (`--against`); empty otherwise.
    pub keys: Vec<RowKey>,
}

/// One window's rows for a comparison.
#[derive(Clone, Debug)]
pub struct CompareChunk {
    valid: Vec<bool>,
    success: Vec<bool>,
    position: Vec<u32>,
    /// (task per row as an index into the names, the window's task names).
    task: Option<(Vec<u32>, Vec<String>)>,
    /// One column per method.
    pub advantages: Vec<Vec<f64>>,
    /// Each row's key, when the run keeps them ([`CompareRows::keys`]).
    keys: Option<Vec<RowKey>>,
}

impl CompareChunk {
    pub fn of(batch: &StepBatch, advantages: Vec<Vec<f64>>) -> Self {
        let task = batch.tasks().map(|tasks| {
            let mut names: Vec<String> = Vec::new();
            let mut index: std::collections::HashMap<&str, u32> = Default::default();
            let ids = (0..batch.len())
                .map(|r| {
                    let name = tasks.get(r).unwrap_or("(none)");
                    *index.entry(name).or_insert_with(|| {
                        names.push(name.to_string());
                        (names.len() - 1) as u32
                    })
                })
                .collect();
            (ids, names)
        });
        CompareChunk {
            valid: batch.valid(),
            success: batch
                .traj_of_row
                .iter()
                .map(|&t| batch.trajs[t as usize].success)
                .collect(),
            position: batch.position.clone(),
            task,
            advantages,
            keys: None,
        }
    }

    /// The rows' keys, kept beside the rows ([`CompareRows::keys`]).
    pub fn with_keys(mut self, keys: Option<Vec<RowKey>>) -> Self {
        self.keys = keys;
        self
    }
}

impl CompareRows {
    /// Appends rows `rows` of a window (their advantages go to `advantages`, one column per method).
    pub fn append(&mut self, chunk: &CompareChunk, rows: &[usize], advantages: &mut [Vec<f64>]) {
        for &r in rows {
            self.valid.push(chunk.valid[r]);
            self.success.push(chunk.success[r]);
            self.position.push(chunk.position[r]);
        }
        if let Some(keys) = &chunk.keys {
            self.keys.extend(rows.iter().map(|&r| keys[r]));
        }
        if let Some((ids, names)) = &chunk.task {
            let global: Vec<u32> = names
                .iter()
                .map(|name| self.task_id(name.clone()))
                .collect();
            let task = self.task.get_or_insert_with(Vec::new);
            task.extend(rows.iter().map(|&r| global[ids[r] as usize]));
        }
        for (column, values) in advantages.iter_mut().zip(&chunk.advantages) {
            column.extend(rows.iter().map(|&r| values[r]));
        }
    }

    /// Adds the rows of logs read after these (`credit watch` reads a run file by file).
    pub fn extend(&mut self, later: CompareRows) {
        let (had, adds) = (self.valid.len(), later.valid.len());
        self.valid.extend(later.valid);
        self.success.extend(later.success);
        self.position.extend(later.position);
        self.keys.extend(later.keys);
        if later.task.is_none() && self.task.is_none() {
            return;
        }
        // Rows of logs that name no task have the task `(none)`, as a row without one does.
        let none = self.task_id("(none)".to_string());
        let ids: Vec<u32> = match later.task {
            Some(ids) => {
                let global: Vec<u32> = later
                    .task_names
                    .into_iter()
                    .map(|name| self.task_id(name))
                    .collect();
                ids.into_iter().map(|t| global[t as usize]).collect()
            }
            None => vec![none; adds],
        };
        let task = self.task.get_or_insert_with(|| vec![none; had]);
        task.extend(ids);
    }

    /// The index of task `name`, added when new.
    fn task_id(&mut self, name: String) -> u32 {
        if let Some(&id) = self.task_index.get(&name) {
            return id;
        }
        self.task_names.push(name.clone());
        let id = (self.task_names.len() - 1) as u32;
        self.task_index.insert(name, id);
        id
    }

    /// The rows of a whole batch.
    pub fn of(batch: &StepBatch) -> Self {
        let chunk = CompareChunk::of(batch, Vec::new());
        let mut rows = CompareRows::default();
        rows.append(&chunk, &(0..batch.len()).collect::<Vec<_>>(), &mut []);
        rows
    }

    pub fn len(&self) -> usize {
        self.valid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.valid.is_empty()
    }
}

/// Compares the advantage columns `advantages` (method label → one value per row of `rows`).
pub fn compare(rows: &CompareRows, advantages: &[(String, Vec<f64>)]) -> Comparison {
    let (valid, success, position) = (&rows.valid, &rows.success, &rows.position);
    let methods: Vec<String> = advantages.iter().map(|(m, _)| m.clone()).collect();

    let distributions = advantages
        .iter()
        .map(|(m, a)| (m.clone(), Distribution::of(a)))
        .collect();

    let mut pairwise = Vec::new();
    for i in 0..advantages.len() {
        for j in i + 1..advantages.len() {
            let (a, b) = (&advantages[i].1, &advantages[j].1);
            let agree = a
                .iter()
                .zip(b)
                .filter(|(x, y)| sign(**x) == sign(**y))
                .count();
            pairwise.push(Pair {
                a: advantages[i].0.clone(),
                b: advantages[j].0.clone(),
                spearman: spearman(a, b),
                kendall_tau_b: kendall_tau_b(a, b),
                sign_agreement: agree as f64 / a.len().max(1) as f64,
            });
        }
    }

    let mut cells = BTreeMap::new();
    let mut invalid_credit = BTreeMap::new();
    let mut by_position = BTreeMap::new();
    for (m, a) in advantages {
        let mut cell_rows = Vec::new();
        for s in [true, false] {
            for v in [true, false] {
                let vals: Vec<f64> = (0..a.len())
                    .filter(|&r| success[r] == s && valid[r] == v)
                    .map(|r| a[r])
                    .collect();
                let n = vals.len().max(1) as f64;
                cell_rows.push(Cell {
                    success: s,
                    valid: v,
                    steps: vals.len(),
                    mean: mean(&vals),
                    share_positive: vals.iter().filter(|&&x| x > 0.0).count() as f64 / n,
                    share_negative: vals.iter().filter(|&&x| x < 0.0).count() as f64 / n,
                });
            }
        }
        cells.insert(m.clone(), cell_rows);

        let invalid: Vec<usize> = (0..a.len()).filter(|&r| !valid[r]).collect();
        let invalid_succ: Vec<usize> = invalid.iter().copied().filter(|&r| success[r]).collect();
        let positive = |rows: &[usize]| {
            rows.iter().filter(|&&r| a[r] > 0.0).count() as f64 / rows.len().max(1) as f64
        };
        let agree = (0..a.len())
            .filter(|&r| sign(a[r]) == if valid[r] { 1 } else { -1 })
            .count();
        invalid_credit.insert(
            m.clone(),
            InvalidCredit {
                invalid_steps: invalid.len(),
                invalid_positive_share: positive(&invalid),
                invalid_steps_in_success: invalid_succ.len(),
                invalid_positive_share_in_success: positive(&invalid_succ),
                sign_agreement_with_validity: agree as f64 / a.len().max(1) as f64,
                mean_on_invalid: mean(&invalid.iter().map(|&r| a[r]).collect::<Vec<_>>()),
            },
        );

        let mut acc: BTreeMap<u32, [(f64, usize); 2]> = BTreeMap::new();
        for r in 0..a.len() {
            let e = acc.entry(position[r].min(POSITION_CAP)).or_default();
            let k = if success[r] { 0 } else { 1 };
            e[k].0 += a[r];
            e[k].1 += 1;
        }
        let positions = acc
            .into_iter()
            .map(|(position, [(ss, sn), (fs, fn_)])| Position {
                position,
                steps: sn + fn_,
                mean: (ss + fs) / (sn + fn_) as f64,
                mean_success: (sn > 0).then(|| ss / sn as f64),
                mean_failure: (fn_ > 0).then(|| fs / fn_ as f64),
            })
            .collect();
        by_position.insert(m.clone(), positions);
    }

    let mut per_task = Vec::new();
    if let Some(tasks) = &rows.task {
        let mut rows_of: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (r, &t) in tasks.iter().enumerate() {
            rows_of
                .entry(rows.task_names[t as usize].as_str())
                .or_default()
                .push(r);
        }
        for (task, task_rows) in rows_of {
            let invalid: Vec<usize> = task_rows.iter().copied().filter(|&r| !valid[r]).collect();
            per_task.push(TaskRow {
                task: task.to_string(),
                steps: task_rows.len(),
                mean: advantages
                    .iter()
                    .map(|(m, a)| {
                        (
                            m.clone(),
                            mean(&task_rows.iter().map(|&r| a[r]).collect::<Vec<_>>()),
                        )
                    })
                    .collect(),
                invalid_positive_share: advantages
                    .iter()
                    .map(|(m, a)| {
                        (
                            m.clone(),
                            invalid.iter().filter(|&&r| a[r] > 0.0).count() as f64
                                / invalid.len().max(1) as f64,
                        )
                    })
                    .collect(),
            });
        }
    }

    Comparison {
        methods,
        distributions,
        pairwise,
        cells,
        invalid_credit,
        by_position,
        per_task,
        logged: Vec::new(),
    }
}
