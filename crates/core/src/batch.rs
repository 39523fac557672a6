//! The step batch: every validated step row in a polars `DataFrame` with canonical column names,
//! in input order, plus the group and trajectory index that every method and analysis walks.
//!
//! A *group* is (iteration, group_id): groups never span iterations. A trajectory's rows are kept in
//! step order. Derived per row: `episode_return` R(τ), `traj_success`, `traj_length`, `return_to_go`
//! R_t at the ingest γ, and `next_obs` (the next row's `obs` when the producer did not log it).

use crate::error::{Error, Result};
use crate::schema::columns::*;
use polars::prelude::*;

/// One group: the rollouts of one task from one start state, within one iteration.
#[derive(Clone, Debug)]
pub struct Group {
    pub id: String,
    pub iteration: Option<i64>,
    /// Trajectory indices, in first-appearance order.
    pub trajs: Vec<u32>,
    pub n_rows: usize,
}

/// One rollout.
#[derive(Clone, Debug)]
pub struct Traj {
    pub id: String,
    pub group: u32,
    /// Row indices in step order.
    pub rows: Vec<u32>,
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
}

impl StepBatch {
    /// Builds the index and derived columns from a frame holding canonical columns (at least
    /// `group_id`, `traj_id`, `step`, `reward`) whose rows are already validated by ingest:
    /// unique (traj_id, step), contiguous steps, one group per trajectory.
    pub fn new(mut frame: DataFrame, success_threshold: f64, gamma: f64) -> Result<Self> {
        frame.rechunk_mut();
        let n = frame.height();
        let group_ids = frame.column(GROUP_ID)?.str()?.clone();
        let traj_ids = frame.column(TRAJ_ID)?.str()?.clone();
        let steps = frame.column(STEP)?.i64()?.clone();
        let iterations = match frame.column(ITERATION) {
            Ok(c) => Some(c.i64()?.clone()),
            Err(_) => None,
        };

        let mut group_index: PlHashMap<(Option<i64>, &str), u32> = PlHashMap::default();
        let mut traj_index: PlHashMap<(Option<i64>, &str), u32> = PlHashMap::default();
        let mut groups: Vec<Group> = Vec::new();
        let mut trajs: Vec<Traj> = Vec::new();
        let mut group_of_row = Vec::with_capacity(n);
        let mut traj_of_row = Vec::with_capacity(n);
        for row in 0..n {
            let it = iterations.as_ref().and_then(|c| c.get(row));
            let gid = group_ids.get(row).ok_or_else(|| missing(GROUP_ID, row))?;
            let tid = traj_ids.get(row).ok_or_else(|| missing(TRAJ_ID, row))?;
            let g = *group_index.entry((it, gid)).or_insert_with(|| {
                groups.push(Group {
                    id: gid.to_string(),
                    iteration: it,
                    trajs: Vec::new(),
                    n_rows: 0,
                });
                (groups.len() - 1) as u32
            });
            let t = *traj_index.entry((it, tid)).or_insert_with(|| {
                trajs.push(Traj {
                    id: tid.to_string(),
                    group: g,
                    rows: Vec::new(),
                    episode_return: 0.0,
                    success: false,
                });
                groups[g as usize].trajs.push((trajs.len() - 1) as u32);
                (trajs.len() - 1) as u32
            });
            groups[g as usize].n_rows += 1;
            trajs[t as usize].rows.push(row as u32);
            group_of_row.push(g);
            traj_of_row.push(t);
        }
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
            let flags: Vec<bool> = success_col
                .as_ref()
                .map(|c| {
                    traj.rows
                        .iter()
                        .filter_map(|&r| c.get(r as usize))
                        .collect()
                })
                .unwrap_or_default();
            traj.success = if flags.is_empty() {
                traj.episode_return > success_threshold
            } else {
                flags.iter().any(|&s| s)
            };
        }

        let mut batch = StepBatch {
            frame,
            groups,
            trajs,
            group_of_row,
            traj_of_row,
            position,
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
        let mut next: Vec<Option<&str>> = (0..self.len())
            .map(|r| logged.and_then(|c| c.get(r)))
            .collect();
        for traj in &self.trajs {
            for w in traj.rows.windows(2) {
                let (r, following) = (w[0] as usize, w[1] as usize);
                if next[r].is_none() {
                    next[r] = obs.get(following);
                }
            }
        }
        Ok(Some(Column::new(NEXT_OBS.into(), next)))
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

    /// A method's float column by name (panics in tests when absent).
    pub fn part<'a>(a: &'a crate::methods::Advantages, name: &str) -> &'a [f64] {
        match a.column(name) {
            Some(crate::methods::Values::F64(v)) => v,
            _ => panic!("no f64 column {name}"),
        }
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
