//! The step batch: every validated step row in a polars `DataFrame` with canonical column names,
//! in input order, plus the group and trajectory index that every method and analysis walks.
//!
//! A *group* is (iteration, group_id): groups never span iterations. A trajectory's rows are kept in
//! step order. Derived per row: `episode_return` R(τ), `traj_success`, `traj_length`, `return_to_go`
//! R_t at the ingest γ, and `next_obs` (the next row's `obs` when the producer did not log it).

use crate::error::{Error, Result};
use crate::schema::columns::*;
use polars::prelude::*;

mod states;
pub use states::{BatchStates, NodeKind};

/// Indices held inline up to four (as many as a `Vec`'s own size holds): a log of single-row
/// groups builds a group and a trajectory per row, and each would otherwise allocate.
pub type Indices = smallvec::SmallVec<[u32; 4]>;

/// One group: the rollouts of one task from one start state, within one iteration.
#[derive(Clone, Debug)]
pub struct Group {
    /// Inline up to 23 bytes, like `Indices`.
    pub id: PlSmallStr,
    pub iteration: Option<i64>,
    /// Trajectory indices, in first-appearance order.
    pub trajs: Indices,
    pub n_rows: usize,
}

/// One rollout.
#[derive(Clone, Debug)]
pub struct Traj {
    pub id: PlSmallStr,
    pub group: u32,
    /// Row indices in step order.
    pub rows: Indices,
    pub episode_return: f64,
    pub success: bool,
}

#[derive(Clone, Debug)]
pub struct StepBatch {
    frame: DataFrame,
    pub groups: Vec<Group>,
    pub trajs: Vec<Traj>,
    pub group_of_row: Vec<u32>,
    pub traj_of_row: Vec<u32>,
    /// The 0-based position of each row within its trajectory.
    pub position: Vec<u32>,
    /// The states interned, when first asked for ([`StepBatch::states`]).
    states: std::sync::OnceLock<BatchStates>,
}

impl StepBatch {
    /// Builds the index and derived columns from a frame holding canonical columns (at least
    /// `group_id`, `traj_id`, `step`, `reward`) whose rows are already validated by ingest:
    /// unique (traj_id, step), contiguous steps, one group per trajectory.
    pub fn new(frame: DataFrame, success_threshold: f64, gamma: f64) -> Result<Self> {
        Self::indexed(frame, success_threshold, gamma, None)
    }

    /// [`StepBatch::new`] for a frame whose groups each come as one run of rows (ingest's
    /// windows of whole groups): `group_rows` rows each, with each row's trajectory numbered
    /// within its group in order of first appearance (`traj_in_group`, as ingest's checks
    /// numbered them). Nothing is looked up or compared.
    pub(crate) fn of_group_runs(
        frame: DataFrame,
        success_threshold: f64,
        gamma: f64,
        group_rows: &[usize],
        traj_in_group: &[u32],
    ) -> Result<Self> {
        Self::indexed(
            frame,
            success_threshold,
            gamma,
            Some((group_rows, traj_in_group)),
        )
    }

    fn indexed(
        mut frame: DataFrame,
        success_threshold: f64,
        gamma: f64,
        runs: Option<(&[usize], &[u32])>,
    ) -> Result<Self> {
        frame.rechunk_mut();
        let n = frame.height();
        let steps = frame.column(STEP)?.i64()?.clone();
        let keys = Keys {
            group_ids: frame.column(GROUP_ID)?.str()?,
            traj_ids: frame.column(TRAJ_ID)?.str()?,
            iterations: match frame.column(ITERATION) {
                Ok(c) => Some(c.i64()?),
                Err(_) => None,
            },
        };
        let Index {
            groups,
            mut trajs,
            group_of_row,
            traj_of_row,
        } = match runs {
            Some((group_rows, traj_in_group)) => keys.group_runs(group_rows, traj_in_group)?,
            None => keys.looked_up()?,
        };
        let step_of = |r: u32| steps.get(r as usize).unwrap_or(0);
        for traj in &mut trajs {
            traj.rows.sort_by_key(|&r| step_of(r));
        }
        let mut position = vec![0u32; n];
        for traj in &trajs {
            for (k, &r) in traj.rows.iter().enumerate() {
                position[r as usize] = k as u32;
            }
        }

        let rewards = frame.column(REWARD)?.f64()?.cont_slice()?.to_vec();
        let episode_rewards = frame
            .column(EPISODE_REWARD)
            .ok()
            .map(|c| c.f64().cloned())
            .transpose()?;
        let success_col = frame
            .column(SUCCESS)
            .ok()
            .map(|c| c.bool().cloned())
            .transpose()?;
        for traj in &mut trajs {
            let logged = episode_rewards
                .as_ref()
                .and_then(|c| traj.rows.iter().find_map(|&r| c.get(r as usize)));
            traj.episode_return =
                logged.unwrap_or_else(|| traj.rows.iter().map(|&r| rewards[r as usize]).sum());
            // Any logged flag decides; without one, the return does.
            let logged_success = success_col.as_ref().and_then(|c| {
                traj.rows
                    .iter()
                    .filter_map(|&r| c.get(r as usize))
                    .fold(None, |any, s| Some(any.unwrap_or(false) || s))
            });
            traj.success = logged_success.unwrap_or(traj.episode_return > success_threshold);
        }

        let mut batch = StepBatch {
            frame,
            groups,
            trajs,
            group_of_row,
            traj_of_row,
            position,
            states: std::sync::OnceLock::new(),
        };
        let per_row = |f: &dyn Fn(&Traj) -> f64| -> Vec<f64> {
            batch
                .traj_of_row
                .iter()
                .map(|&t| f(&batch.trajs[t as usize]))
                .collect()
        };
        let episode_return = per_row(&|t| t.episode_return);
        let traj_length: Vec<i64> = batch
            .traj_of_row
            .iter()
            .map(|&t| batch.trajs[t as usize].rows.len() as i64)
            .collect();
        let traj_success: Vec<bool> = batch
            .traj_of_row
            .iter()
            .map(|&t| batch.trajs[t as usize].success)
            .collect();
        let return_to_go = batch.discounted_returns(&rewards, gamma);
        let next_obs = batch.next_obs_filled()?;
        let derived = [
            Column::new(EPISODE_RETURN.into(), episode_return),
            Column::new(TRAJ_SUCCESS.into(), traj_success),
            Column::new(TRAJ_LENGTH.into(), traj_length),
            Column::new(RETURN_TO_GO.into(), return_to_go),
        ];
        for c in derived {
            batch.frame.with_column(c)?;
        }
        if let Some(next_obs) = next_obs {
            batch.frame.with_column(next_obs)?;
        }
        Ok(batch)
    }

    pub fn frame(&self) -> &DataFrame {
        &self.frame
    }

    pub fn len(&self) -> usize {
        self.frame.height()
    }

    pub fn is_empty(&self) -> bool {
        self.frame.height() == 0
    }

    pub fn has(&self, column: &str) -> bool {
        self.frame.column(column).is_ok()
    }

    pub fn has_iteration(&self) -> bool {
        self.has(ITERATION)
    }

    /// Every group's state nodes and steps, interned when first asked for and then shared by
    /// whatever reads the batch's states (methods, analyses, graphs).
    pub fn states(&self) -> &BatchStates {
        self.states.get_or_init(|| BatchStates::of(self))
    }

    /// Adds (or replaces) the float column `name` with one value per row, e.g. `progress` filled
    /// from a trained estimator.
    pub fn with_column_f64(&mut self, name: &str, values: Vec<f64>) -> Result<()> {
        self.with_column(Column::new(name.into(), values))
    }

    /// As [`StepBatch::with_column_f64`], with nulls where a row has no value.
    pub fn with_column_opt_f64(&mut self, name: &str, values: Vec<Option<f64>>) -> Result<()> {
        self.with_column(Column::new(name.into(), values))
    }

    fn with_column(&mut self, column: Column) -> Result<()> {
        if column.len() != self.len() {
            return Err(Error::Param(format!(
                "column `{}`: {} values for {} rows",
                column.name(),
                column.len(),
                self.len()
            )));
        }
        self.frame.with_column(column)?;
        // The states are read from `obs` and `next_obs`, which a column may replace.
        self.states = std::sync::OnceLock::new();
        Ok(())
    }

    /// A float column without nulls (`reward`, `episode_return`, `return_to_go`).
    pub fn f64s(&self, column: &str) -> Result<&[f64]> {
        Ok(self.frame.column(column)?.f64()?.cont_slice()?)
    }

    /// A float column that may be absent or hold nulls.
    pub fn opt_f64s(&self, column: &str) -> Option<&Float64Chunked> {
        self.frame.column(column).ok().and_then(|c| c.f64().ok())
    }

    pub fn opt_i64s(&self, column: &str) -> Option<&Int64Chunked> {
        self.frame.column(column).ok().and_then(|c| c.i64().ok())
    }

    /// A text column, if present.
    pub fn texts(&self, column: &str) -> Option<&StringChunked> {
        self.frame.column(column).ok().and_then(|c| c.str().ok())
    }

    /// The observation text the policy saw: `policy_obs` when the log carries it beside the state
    /// (verl-agent's `obs` next to `anchor_obs`), else the state `obs`.
    pub fn policy_texts(&self) -> Option<&StringChunked> {
        self.texts(POLICY_OBS).or_else(|| self.texts(OBS))
    }

    /// `valid` per row; rows without a logged value are valid (schema default).
    pub fn valid(&self) -> Vec<bool> {
        match self.frame.column(VALID).ok().and_then(|c| c.bool().ok()) {
            Some(c) => c.iter().map(|v| v.unwrap_or(true)).collect(),
            None => vec![true; self.len()],
        }
    }

    /// The task label of each row, if logged.
    pub fn tasks(&self) -> Option<&StringChunked> {
        self.texts(TASK)
    }

    /// R_t = Σ_{k≥t} γ^{k−t} r_k per trajectory, computed backwards (`run = r_t + γ·run`).
    pub fn discounted_returns(&self, rewards: &[f64], gamma: f64) -> Vec<f64> {
        let mut out = vec![0.0; rewards.len()];
        for traj in &self.trajs {
            let mut run = 0.0;
            for &r in traj.rows.iter().rev() {
                run = rewards[r as usize] + gamma * run;
                out[r as usize] = run;
            }
        }
        out
    }

    /// Rows of each group, trajectory by trajectory, each in step order.
    pub fn group_rows(&self, g: usize) -> impl Iterator<Item = u32> + '_ {
        self.groups[g]
            .trajs
            .iter()
            .flat_map(move |&t| self.trajs[t as usize].rows.iter().copied())
    }

    /// The `next_obs` column with the schema default (the next row's `obs` within the trajectory)
    /// filled in; `None` when nothing is to be filled.
    fn next_obs_filled(&self) -> Result<Option<Column>> {
        let Some(obs) = self.texts(OBS) else {
            return Ok(None);
        };
        let logged = self.texts(NEXT_OBS);
        if logged.is_some_and(|c| c.null_count() == 0) {
            return Ok(None);
        }
        // Each row's following row in its trajectory; the texts are gathered as views into the
        // observations' buffers, not copied.
        let mut following: Vec<Option<IdxSize>> = vec![None; self.len()];
        for traj in &self.trajs {
            for w in traj.rows.windows(2) {
                following[w[0] as usize] = Some(w[1] as IdxSize);
            }
        }
        let following = obs.take(&IdxCa::from_iter_options("".into(), following.into_iter()))?;
        let next = match logged {
            Some(logged) => logged.zip_with(&logged.is_not_null(), &following)?,
            None => following,
        };
        Ok(Some(next.with_name(NEXT_OBS.into()).into_column()))
    }
}

/// The key columns of a frame, from which its groups and trajectories are indexed.
struct Keys<'a> {
    group_ids: &'a StringChunked,
    traj_ids: &'a StringChunked,
    iterations: Option<&'a Int64Chunked>,
}

/// Groups and trajectories, each row's in both (trajectories' rows still in row order).
struct Index {
    groups: Vec<Group>,
    trajs: Vec<Traj>,
    group_of_row: Vec<u32>,
    traj_of_row: Vec<u32>,
}

impl Group {
    fn new(id: &str, iteration: Option<i64>) -> Group {
        Group {
            id: id.into(),
            iteration,
            trajs: Indices::new(),
            n_rows: 0,
        }
    }
}

impl Traj {
    fn new(id: &str, group: u32) -> Traj {
        Traj {
            id: id.into(),
            group,
            rows: Indices::new(),
            episode_return: 0.0,
            success: false,
        }
    }
}

impl Keys<'_> {
    fn group_id(&self, row: usize) -> Result<&str> {
        self.group_ids
            .get(row)
            .ok_or_else(|| missing(GROUP_ID, row))
    }

    fn traj_id(&self, row: usize) -> Result<&str> {
        self.traj_ids.get(row).ok_or_else(|| missing(TRAJ_ID, row))
    }

    fn iteration(&self, row: usize) -> Option<i64> {
        self.iterations.and_then(|c| c.get(row))
    }

    /// Groups of `(iteration, group_id)` and trajectories of `(iteration, traj_id)`, numbered in
    /// order of first appearance, looked up in tables.
    fn looked_up(&self) -> Result<Index> {
        let n = self.group_ids.len();
        // Sized for as many groups and trajectories as there are runs of rows of one: the tables
        // never grow (a window can hold one group per row).
        let (mut group_run_count, mut traj_run_count) = (0, 0);
        let mut previous: Option<(Option<i64>, Option<&str>, Option<&str>)> = None;
        for row in 0..n {
            let key = (
                self.iteration(row),
                self.group_ids.get(row),
                self.traj_ids.get(row),
            );
            if previous.is_none_or(|(it, g, _)| (it, g) != (key.0, key.1)) {
                group_run_count += 1;
            }
            if previous != Some(key) {
                traj_run_count += 1;
            }
            previous = Some(key);
        }
        let mut group_index: PlHashMap<(Option<i64>, &str), u32> =
            PlHashMap::with_capacity_and_hasher(group_run_count, Default::default());
        let mut traj_index: PlHashMap<(Option<i64>, &str), u32> =
            PlHashMap::with_capacity_and_hasher(traj_run_count, Default::default());
        let mut index = Index {
            groups: Vec::with_capacity(group_run_count),
            trajs: Vec::with_capacity(traj_run_count),
            group_of_row: Vec::with_capacity(n),
            traj_of_row: Vec::with_capacity(n),
        };
        // The previous row's keys and (group, trajectory): a row of the same trajectory looks
        // nothing up.
        let mut previous: Option<(Option<i64>, &str, &str, u32, u32)> = None;
        for row in 0..n {
            let it = self.iteration(row);
            let (gid, tid) = (self.group_id(row)?, self.traj_id(row)?);
            let (g, t) = match previous {
                Some((pit, pgid, ptid, g, t)) if (pit, pgid, ptid) == (it, gid, tid) => (g, t),
                _ => {
                    let g = match previous {
                        Some((pit, pgid, _, g, _)) if (pit, pgid) == (it, gid) => g,
                        _ => *group_index.entry((it, gid)).or_insert_with(|| {
                            index.groups.push(Group::new(gid, it));
                            (index.groups.len() - 1) as u32
                        }),
                    };
                    let t = *traj_index.entry((it, tid)).or_insert_with(|| {
                        index.trajs.push(Traj::new(tid, g));
                        let t = (index.trajs.len() - 1) as u32;
                        index.groups[g as usize].trajs.push(t);
                        t
                    });
                    (g, t)
                }
            };
            previous = Some((it, gid, tid, g, t));
            index.push(row, g, t);
        }
        Ok(index)
    }

    /// Groups that each come as one run of `group_rows` rows, and each row's trajectory
    /// numbered within its group (`traj_in_group`).
    fn group_runs(&self, group_rows: &[usize], traj_in_group: &[u32]) -> Result<Index> {
        let n = self.group_ids.len();
        if group_rows.iter().sum::<usize>() != n || traj_in_group.len() != n {
            return Err(Error::Config(format!(
                "{n} batch rows but {} in groups and {} trajectory numbers",
                group_rows.iter().sum::<usize>(),
                traj_in_group.len()
            )));
        }
        // A group's trajectories are numbered from 0: its largest number tells how many it has.
        let mut trajs = 0;
        let mut start = 0;
        for &rows in group_rows {
            trajs += traj_in_group[start..start + rows]
                .iter()
                .max()
                .map_or(0, |&t| t as usize + 1);
            start += rows;
        }
        let mut index = Index {
            groups: Vec::with_capacity(group_rows.len()),
            trajs: Vec::with_capacity(trajs),
            group_of_row: Vec::with_capacity(n),
            traj_of_row: Vec::with_capacity(n),
        };
        let mut start = 0;
        for &rows in group_rows {
            let g = index.groups.len() as u32;
            index
                .groups
                .push(Group::new(self.group_id(start)?, self.iteration(start)));
            let first_traj = index.trajs.len();
            for (row, &number) in (start..).zip(&traj_in_group[start..start + rows]) {
                let t = first_traj + number as usize;
                if t == index.trajs.len() {
                    index.trajs.push(Traj::new(self.traj_id(row)?, g));
                    index.groups[g as usize].trajs.push(t as u32);
                } else if t > index.trajs.len() {
                    return Err(Error::Config(format!(
                        "batch row {row}: its trajectory is numbered past the ones before it"
                    )));
                }
                index.push(row, g, t as u32);
            }
            start += rows;
        }
        Ok(index)
    }
}

impl Index {
    fn push(&mut self, row: usize, g: u32, t: u32) {
        self.groups[g as usize].n_rows += 1;
        self.trajs[t as usize].rows.push(row as u32);
        self.group_of_row.push(g);
        self.traj_of_row.push(t);
    }
}

fn missing(column: &str, row: usize) -> Error {
    Error::Config(format!("batch row {row} has no `{column}`"))
}

/// Small hand-made batches for the spec vectors in the methods' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// (group, traj, step, obs, reward, valid)
    pub type Row<'a> = (&'a str, &'a str, i64, &'a str, f64, bool);

    pub fn batch(rows: &[Row]) -> StepBatch {
        build(rows, None, Vec::new(), 0.5)
    }

    /// As [`batch`], with an `action` per row.
    pub fn batch_with(rows: &[Row], actions: &[&str]) -> StepBatch {
        build(rows, Some(actions), Vec::new(), 0.5)
    }

    /// As [`batch`], with further canonical columns (`progress`, `value`, `segment`, …), one value per row.
    pub fn batch_with_columns(rows: &[Row], extra: Vec<Column>) -> StepBatch {
        build(rows, None, extra, 0.5)
    }

    fn build(
        rows: &[Row],
        actions: Option<&[&str]>,
        extra: Vec<Column>,
        success_threshold: f64,
    ) -> StepBatch {
        let mut columns = vec![
            Column::new(
                GROUP_ID.into(),
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            ),
            Column::new(TRAJ_ID.into(), rows.iter().map(|r| r.1).collect::<Vec<_>>()),
            Column::new(STEP.into(), rows.iter().map(|r| r.2).collect::<Vec<_>>()),
            Column::new(OBS.into(), rows.iter().map(|r| r.3).collect::<Vec<_>>()),
            Column::new(REWARD.into(), rows.iter().map(|r| r.4).collect::<Vec<_>>()),
            Column::new(VALID.into(), rows.iter().map(|r| r.5).collect::<Vec<_>>()),
        ];
        if let Some(actions) = actions {
            columns.push(Column::new(ACTION.into(), actions.to_vec()));
        }
        columns.extend(extra);
        StepBatch::new(
            DataFrame::new(rows.len(), columns).unwrap(),
            success_threshold,
            0.95,
        )
        .unwrap()
    }

    /// The spec's §4.1 dataset (`spec-proxmo-gigpo.md`): two groups, six trajectories, 16 rows,
    /// binary rewards on the last step; `scale` multiplies rewards (10 for the `verl` vectors) and
    /// `invalid_row` marks one row invalid.
    pub fn spec_4_1(scale: f64, invalid_row: Option<usize>) -> StepBatch {
        const A: &str = "you are in the middle of a room";
        const B: &str = "you arrive at countertop 1 you see a mug 1";
        const C: &str = "you pick up the mug 1 from the countertop 1";
        const D: &str = "you arrive at countertop 1 you see a knife 1 and a mug 1";
        const P: &str = "you are in the hallway";
        const Q: &str = "you open the door";
        let base: [(&str, &str, i64, &str, f64); 16] = [
            ("g1", "t1", 1, A, 0.0),
            ("g1", "t1", 2, B, 0.0),
            ("g1", "t1", 3, C, 1.0),
            ("g1", "t2", 1, A, 0.0),
            ("g1", "t2", 2, B, 0.0),
            ("g1", "t2", 3, D, 0.0),
            ("g1", "t3", 1, A, 0.0),
            ("g1", "t3", 2, D, 0.0),
            ("g1", "t4", 1, A, 0.0),
            ("g1", "t4", 2, B, 0.0),
            ("g1", "t4", 3, B, 0.0),
            ("g2", "t5", 1, P, 0.0),
            ("g2", "t5", 2, Q, 1.0),
            ("g2", "t6", 1, P, 0.0),
            ("g2", "t6", 2, P, 0.0),
            ("g2", "t6", 3, Q, 1.0),
        ];
        let rows: Vec<Row> = base
            .iter()
            .enumerate()
            .map(|(i, &(g, t, s, o, r))| (g, t, s, o, r * scale, invalid_row != Some(i)))
            .collect();
        build(&rows, None, Vec::new(), 0.5 * scale)
    }

    pub fn assert_close(got: &[f64], expected: &[f64], tol: f64) {
        assert_eq!(got.len(), expected.len(), "length");
        for (i, (g, e)) in got.iter().zip(expected).enumerate() {
            assert!(
                (g - e).abs() <= tol,
                "row {i}: got {g}, expected {e} (tol {tol})\n got: {got:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{assert_close, batch, batch_with_columns, Row};
    use super::*;

    #[test]
    fn group_runs_with_numbers_that_do_not_fit_are_errors_not_panics() {
        let b = batch(&[
            ("g1", "a", 0, "s", 0.0, true),
            ("g1", "b", 0, "s", 1.0, true),
            ("g2", "c", 0, "s", 0.0, true),
        ]);
        let of_runs = |rows: &[usize], trajs: &[u32]| {
            StepBatch::of_group_runs(b.frame().clone(), 0.5, 1.0, rows, trajs)
        };
        let good = of_runs(&[2, 1], &[0, 1, 0]).unwrap();
        assert_eq!(good.traj_of_row, b.traj_of_row);
        assert_eq!(good.group_of_row, b.group_of_row);
        // Fewer rows in the groups than in the frame; a number past the group's next one.
        assert!(of_runs(&[2], &[0, 1, 0]).is_err());
        assert!(of_runs(&[2, 1], &[0, 1]).is_err());
        assert!(of_runs(&[2, 1], &[0, 2, 0]).is_err());
    }

    /// Rows out of step order and out of group order:
    ///
    /// | row | group | traj | step | obs | reward | valid |
    /// |-----|-------|------|------|-----|--------|-------|
    /// | 0   | g1    | a    | 1    | s0  | 0      | yes   |
    /// | 1   | g1    | b    | 0    | s0  | 0      | yes   |
    /// | 2   | g1    | a    | 0    | x   | 0      | no    |
    /// | 3   | g2    | c    | 0    | p   | 0.25   | yes   |
    /// | 4   | g1    | b    | 1    | s1  | 1      | yes   |
    /// | 5   | g1    | a    | 2    | s2  | 1      | yes   |
    fn mixed() -> StepBatch {
        let rows: [Row; 6] = [
            ("g1", "a", 1, "s0", 0.0, true),
            ("g1", "b", 0, "s0", 0.0, true),
            ("g1", "a", 0, "x", 0.0, false),
            ("g2", "c", 0, "p", 0.25, true),
            ("g1", "b", 1, "s1", 1.0, true),
            ("g1", "a", 2, "s2", 1.0, true),
        ];
        batch(&rows)
    }

    /// A frame with only the given columns (for what the helpers always add, like `valid`).
    fn bare(columns: Vec<Column>) -> Result<StepBatch> {
        let height = columns[0].len();
        StepBatch::new(DataFrame::new(height, columns).unwrap(), 0.5, 0.95)
    }

    #[test]
    fn index_follows_first_appearance_and_step_order() {
        let b = mixed();
        assert_eq!(b.len(), 6);
        // Groups in first-appearance order: g1 (row 0) = 0, g2 (row 3) = 1.
        assert_eq!(b.groups.len(), 2);
        assert_eq!(
            (b.groups[0].id.as_str(), b.groups[1].id.as_str()),
            ("g1", "g2")
        );
        assert_eq!((b.groups[0].n_rows, b.groups[1].n_rows), (5, 1));
        // Trajectories: a (row 0) = 0, b (row 1) = 1, c (row 3) = 2.
        let ids: Vec<&str> = b.trajs.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(b.groups[0].trajs[..], [0, 1]);
        assert_eq!(b.groups[1].trajs[..], [2]);
        assert_eq!(
            b.trajs.iter().map(|t| t.group).collect::<Vec<_>>(),
            [0, 0, 1]
        );
        assert_eq!(b.group_of_row, vec![0, 0, 0, 1, 0, 0]);
        assert_eq!(b.traj_of_row, vec![0, 1, 0, 2, 1, 0]);
        // a's rows by step: step 0 = row 2, step 1 = row 0, step 2 = row 5.
        assert_eq!(b.trajs[0].rows[..], [2, 0, 5]);
        assert_eq!(b.trajs[1].rows[..], [1, 4]);
        assert_eq!(b.trajs[2].rows[..], [3]);
        // Position within the trajectory, per row.
        assert_eq!(b.position, vec![1, 0, 0, 0, 1, 2]);
        // group_rows: trajectory by trajectory, each in step order.
        assert_eq!(b.group_rows(0).collect::<Vec<_>>(), vec![2, 0, 5, 1, 4]);
        assert_eq!(b.group_rows(1).collect::<Vec<_>>(), vec![3]);
        assert!(!b.has_iteration());
        assert!(b.groups.iter().all(|g| g.iteration.is_none()));
    }

    #[test]
    fn derived_columns_per_row() {
        let b = mixed();
        // R(τ): a = 0 + 0 + 1 = 1, b = 0 + 1 = 1, c = 0.25; success when R > 0.5.
        assert_close(
            b.f64s(EPISODE_RETURN).unwrap(),
            &[1.0, 1.0, 1.0, 0.25, 1.0, 1.0],
            1e-12,
        );
        assert_eq!(
            b.trajs.iter().map(|t| t.success).collect::<Vec<_>>(),
            [true, true, false]
        );
        let success: Vec<Option<bool>> = b
            .frame()
            .column(TRAJ_SUCCESS)
            .unwrap()
            .bool()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(
            success,
            [true, true, true, false, true, true].map(Some).to_vec()
        );
        let lengths: Vec<Option<i64>> = b.opt_i64s(TRAJ_LENGTH).unwrap().iter().collect();
        assert_eq!(lengths, [3, 2, 3, 1, 2, 3].map(Some).to_vec());
        // return_to_go at γ = 0.95, backwards along each trajectory:
        // a: row 5 = 1, row 0 = 0 + 0.95·1 = 0.95, row 2 = 0 + 0.95·0.95 = 0.9025;
        // b: row 4 = 1, row 1 = 0.95; c: row 3 = 0.25.
        assert_close(
            b.f64s(RETURN_TO_GO).unwrap(),
            &[0.95, 0.95, 0.9025, 0.25, 1.0, 1.0],
            1e-12,
        );
        // next_obs: the next row's obs in step order; null on each trajectory's last step.
        // a (rows 2, 0, 5): row 2 → "s0" (row 0), row 0 → "s2" (row 5); b: row 1 → "s1".
        let next: Vec<Option<&str>> = b.texts(NEXT_OBS).unwrap().iter().collect();
        assert_eq!(
            next,
            vec![Some("s2"), Some("s1"), Some("s0"), None, None, None]
        );
        // Without `policy_obs`, the policy saw `obs`.
        assert_eq!(b.policy_texts().unwrap().get(3), Some("p"));
    }

    #[test]
    fn discounted_returns_walk_each_trajectory_backwards() {
        let b = mixed();
        let rewards = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0];
        // γ = 0.5. a (rows 2, 0, 5): R5 = 32, R0 = 1 + 0.5·32 = 17, R2 = 4 + 0.5·17 = 12.5.
        // b (rows 1, 4): R4 = 16, R1 = 2 + 0.5·16 = 10. c (row 3): R3 = 8.
        assert_close(
            &b.discounted_returns(&rewards, 0.5),
            &[17.0, 10.0, 12.5, 8.0, 16.0, 32.0],
            1e-12,
        );
        // γ = 0: each row's own reward; γ = 1: plain sums of the rest of the trajectory
        // (a: 32, 33, 37; b: 16, 18).
        assert_close(&b.discounted_returns(&rewards, 0.0), &rewards, 0.0);
        assert_close(
            &b.discounted_returns(&rewards, 1.0),
            &[33.0, 18.0, 37.0, 8.0, 16.0, 32.0],
            1e-12,
        );
    }

    #[test]
    fn iterations_split_groups_and_trajectories() {
        // The same group and trajectory ids in iterations 0 and 1 are different groups and
        // trajectories; rows 0 and 2 (iteration 0) are one trajectory, row 1 is another.
        let rows: [Row; 3] = [
            ("g", "t", 0, "o", 0.0, true),
            ("g", "t", 0, "o", 1.0, true),
            ("g", "t", 1, "o", 1.0, true),
        ];
        let it = Column::new(ITERATION.into(), vec![0i64, 1, 0]);
        let b = batch_with_columns(&rows, vec![it]);
        assert!(b.has_iteration());
        assert_eq!(b.groups.len(), 2);
        assert_eq!(
            (b.groups[0].iteration, b.groups[1].iteration),
            (Some(0), Some(1))
        );
        assert_eq!((b.groups[0].n_rows, b.groups[1].n_rows), (2, 1));
        assert_eq!(b.trajs.len(), 2);
        assert_eq!(b.trajs[0].rows[..], [0, 2]);
        assert_eq!(b.trajs[1].rows[..], [1]);
        assert_eq!(b.group_of_row, vec![0, 1, 0]);
        assert_eq!(b.traj_of_row, vec![0, 1, 0]);
        // Returns stay per iteration: iteration 0's trajectory R = 0 + 1 = 1, iteration 1's = 1;
        // return_to_go row 0 = 0 + 0.95·1 = 0.95, row 2 = 1, row 1 = 1.
        assert_close(b.f64s(RETURN_TO_GO).unwrap(), &[0.95, 1.0, 1.0], 1e-12);
        assert_eq!(b.trajs[0].episode_return, 1.0);
    }

    #[test]
    fn logged_episode_reward_and_success_take_precedence() {
        // t1: rewards sum to 0 but episode_reward 2 is logged on its second step → R = 2,
        // success by threshold (no success column here).
        // t2: rewards sum to 3 but episode_reward 0.1 is logged on step 0 → R = 0.1, fails.
        let rows: [Row; 4] = [
            ("g", "t1", 0, "a", 0.0, true),
            ("g", "t1", 1, "b", 0.0, true),
            ("g", "t2", 0, "a", 1.0, true),
            ("g", "t2", 1, "b", 2.0, true),
        ];
        let logged = Column::new(
            EPISODE_REWARD.into(),
            vec![None, Some(2.0), Some(0.1), None],
        );
        let b = batch_with_columns(&rows, vec![logged]);
        assert_eq!(b.trajs[0].episode_return, 2.0);
        assert_eq!(b.trajs[1].episode_return, 0.1);
        assert!(b.trajs[0].success && !b.trajs[1].success);

        // A success column decides over the threshold: any true row marks the trajectory.
        // t1 (R = 0) has `true` on one row → success; t2 (R = 3) has only false/null → failure.
        let flags = Column::new(
            SUCCESS.into(),
            vec![Some(false), Some(true), None, Some(false)],
        );
        let b = batch_with_columns(&rows, vec![flags]);
        assert_eq!(b.trajs[1].episode_return, 3.0);
        assert!(b.trajs[0].success && !b.trajs[1].success);
    }

    #[test]
    fn valid_defaults_to_true() {
        // Logged: row 2 invalid.
        let b = mixed();
        assert_eq!(b.valid(), vec![true, true, false, true, true, true]);
        let base = || {
            vec![
                Column::new(GROUP_ID.into(), ["g", "g", "g"]),
                Column::new(TRAJ_ID.into(), ["t", "t", "t"]),
                Column::new(STEP.into(), [0i64, 1, 2]),
                Column::new(REWARD.into(), [0.0, 0.0, 1.0]),
            ]
        };
        // No `valid` column: every row valid.
        let b = bare(base()).unwrap();
        assert_eq!(b.valid(), vec![true, true, true]);
        // Nulls are valid; only an explicit false is not.
        let mut columns = base();
        columns.push(Column::new(VALID.into(), [Some(false), None, Some(true)]));
        let b = bare(columns).unwrap();
        assert_eq!(b.valid(), vec![false, true, true]);
        // Without `obs` there is nothing to fill `next_obs` from.
        assert!(!b.has(NEXT_OBS) && !b.has(OBS));
        assert!(b.policy_texts().is_none());
    }

    #[test]
    fn column_accessors() {
        let rows: [Row; 2] = [
            ("g", "t", 0, "state 0", 0.0, true),
            ("g", "t", 1, "state 1", 1.0, true),
        ];
        let extra = vec![
            Column::new(POLICY_OBS.into(), ["shown 0", "shown 1"]),
            Column::new(TASK.into(), ["pick", "pick"]),
            Column::new(VALUE.into(), [Some(0.5), None]),
        ];
        let mut b = batch_with_columns(&rows, extra);
        assert!(b.has(OBS) && b.has(VALUE) && !b.has(COST));
        assert_eq!(b.texts(OBS).unwrap().get(1), Some("state 1"));
        // A text accessor on a number column, or an absent column, gives None.
        assert!(b.texts(REWARD).is_none() && b.texts(COST).is_none());
        // policy_texts prefers `policy_obs` over `obs`.
        assert_eq!(b.policy_texts().unwrap().get(0), Some("shown 0"));
        assert_eq!(b.tasks().unwrap().get(1), Some("pick"));
        assert_eq!(b.f64s(REWARD).unwrap(), &[0.0, 1.0]);
        assert!(b.f64s(COST).is_err());
        let value: Vec<Option<f64>> = b.opt_f64s(VALUE).unwrap().iter().collect();
        assert_eq!(value, vec![Some(0.5), None]);
        assert!(b.opt_f64s(COST).is_none() && b.opt_f64s(OBS).is_none());
        assert_eq!(b.opt_i64s(STEP).unwrap().get(1), Some(1));
        assert!(b.opt_i64s(REWARD).is_none());

        // Adding columns: one value per row, else a parameter error naming the column.
        b.with_column_f64(PROGRESS, vec![0.25, 0.75]).unwrap();
        assert_eq!(b.f64s(PROGRESS).unwrap(), &[0.25, 0.75]);
        // Replacing an existing column keeps the height.
        b.with_column_opt_f64(PROGRESS, vec![None, Some(1.0)])
            .unwrap();
        assert_eq!(b.opt_f64s(PROGRESS).unwrap().get(0), None);
        assert_eq!(b.len(), 2);
        let e = b.with_column_f64("x", vec![1.0]).unwrap_err();
        assert!(matches!(e, Error::Param(_)), "{e}");
        assert!(e.to_string().contains("`x`: 1 values for 2 rows"), "{e}");
        assert!(!b.has("x"));
    }

    #[test]
    fn logged_next_obs_is_kept_and_gaps_filled() {
        // Row 0 logs its next_obs ("elsewhere", not the next row's obs); row 1 logs none and gets
        // row 2's obs; row 2 is the last step and stays null.
        let rows: [Row; 3] = [
            ("g", "t", 0, "a", 0.0, true),
            ("g", "t", 1, "b", 0.0, true),
            ("g", "t", 2, "c", 0.0, true),
        ];
        let logged = Column::new(NEXT_OBS.into(), [Some("elsewhere"), None, None]);
        let b = batch_with_columns(&rows, vec![logged]);
        let next: Vec<Option<&str>> = b.texts(NEXT_OBS).unwrap().iter().collect();
        assert_eq!(next, vec![Some("elsewhere"), Some("c"), None]);
    }

    #[test]
    fn missing_ids_are_errors() {
        let columns = vec![
            Column::new(GROUP_ID.into(), [Some("g"), None]),
            Column::new(TRAJ_ID.into(), ["t", "u"]),
            Column::new(STEP.into(), [0i64, 0]),
            Column::new(REWARD.into(), [0.0, 0.0]),
        ];
        let e = bare(columns).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert_eq!(e.to_string(), "batch row 1 has no `group_id`");
        // A required column absent altogether is an error too.
        let columns = vec![
            Column::new(GROUP_ID.into(), ["g"]),
            Column::new(TRAJ_ID.into(), ["t"]),
            Column::new(STEP.into(), [0i64]),
        ];
        assert!(bare(columns).is_err());
    }

    #[test]
    fn empty_frame_gives_empty_batch() {
        let columns = vec![
            Column::new(GROUP_ID.into(), Vec::<&str>::new()),
            Column::new(TRAJ_ID.into(), Vec::<&str>::new()),
            Column::new(STEP.into(), Vec::<i64>::new()),
            Column::new(REWARD.into(), Vec::<f64>::new()),
        ];
        let b = bare(columns).unwrap();
        assert!(b.is_empty());
        assert!(b.groups.is_empty() && b.trajs.is_empty());
        assert!(b.valid().is_empty());
    }
}
