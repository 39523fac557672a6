//! `oracle`: the empirical-MDP advantage of each step row (issue #53), a reference to score the
//! other estimators against ([`crate::analyses::against`]). It is exact for the finite-sample
//! Markov projection of the logs, and an estimate of the true A^π wherever states recur.
//!
//! Over one batch (an `iteration`; the whole input without the column):
//! - state key (t, s): t the row's step index within its trajectory (counted from its first
//!   step, [`StepBatch::position`]), s its state text (`obs`: verl-agent's `anchor_obs`, the text
//!   GiGPO's anchor states group on);
//! - π̂(a | t, s) = the share of the batch's rows at (t, s) whose `action` text is a;
//! - a row's next key is (t + 1, s′), s′ the state of the next row of its trajectory; the
//!   trajectory's last row is terminal (V = 0);
//! - Q(t, s, a) = mean over the batch's rows i at (t, s, a) of [r_i + γ·V(next key of i)];
//! - V(t, s) = mean over the rows at (t, s) of Q(t, s, a_i) (= Σ_a π̂(a | t, s)·Q(t, s, a)),
//!   by backward induction over t;
//! - A(row) = Q(t, s, a_row) − V(t, s); r = the row's `reward` (no invalid-action penalty);
//!   γ = `gamma`, 1 by default.
//!
//! Limits:
//! - Where the key (t, s) holds one row, or one action, A = 0 exactly: the logs hold no
//!   alternative to compare with. [`covered`] marks the rows whose key holds ≥ 2 rows with ≥ 2
//!   distinct actions, the only rows where the oracle can say anything.
//! - The projection is Markov in (t, s): a state text that leaves out what matters pools rows of
//!   different true states, and the oracle is then exact for the projection, not for the task.
//! - An estimate: each Q is a mean of sampled returns, so its error falls as 1/√n with n rows per
//!   key (`tests/oracle.rs` measures it on three small MDPs), plus a small-sample bias where a
//!   rare next state's V is itself estimated from few rows.
//! - States and actions are compared by a 128-bit hash of their text (xxh3), so that a row's key
//!   is a few bytes whatever window it was read in. A row without a state text is a state of its
//!   own, a row without an action text an action of its own: nothing says what to pool them with.
//!
//! A ground truth from a simulator wins: a logged `oracle_advantage` column (or
//! `oracle_advantages`, `true_advantage`) is read as the oracle's advantage, as `logged` reads
//! `advantage`; its coverage is still counted from the rows' keys.
//!
//! Profiles: none. γ is 1 under both presets: the episode's undiscounted return, the quantity the
//! group-based methods credit.

use super::{out_of_range, Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::Profile;
use crate::schema::columns::{ACTION, OBS, ORACLE_ADVANTAGE, REWARD};
use crate::schema::{describe_accepted, field};
use polars::prelude::PlHashMap;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// γ of Q's backup.
    pub gamma: f64,
}

impl Params {
    pub fn preset(_: Profile) -> Self {
        Params { gamma: 1.0 }
    }
}

/// A row's place in the empirical MDP: its batch (`iteration`), step index t, state s and action
/// a, texts as 128-bit hashes; `None` where the row has no text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    pub iteration: Option<i64>,
    pub t: u32,
    pub state: Option<u128>,
    pub action: Option<u128>,
}

impl RowKey {
    pub fn new(iteration: Option<i64>, t: u32, state: Option<&str>, action: Option<&str>) -> Self {
        let hash = |text: &str| xxh3_128(text.as_bytes());
        RowKey {
            iteration,
            t,
            state: state.map(hash),
            action: action.map(hash),
        }
    }
}

/// Every row's key; an error names the column when the logs have no state (`obs`) or no
/// `action` text.
pub fn row_keys(batch: &StepBatch) -> Result<Vec<RowKey>> {
    let column = |name: &str| {
        batch.texts(name).ok_or_else(|| {
            let accepted = field(name).map_or_else(|| format!("`{name}`"), describe_accepted);
            Error::Param(format!(
                "oracle keys each step by its state and action: the logs have no {accepted} column"
            ))
        })
    };
    let (states, actions) = (column(OBS)?, column(ACTION)?);
    Ok((0..batch.len())
        .map(|r| {
            let group = &batch.groups[batch.group_of_row[r] as usize];
            RowKey::new(
                group.iteration,
                batch.position[r],
                states.get(r),
                actions.get(r),
            )
        })
        .collect())
}

/// Rows numbered by state key (iteration, t, s) and by (state key, action), densely in order of
/// first row; a row without a state or action text gets a number of its own.
pub(crate) struct Table {
    pub state: Vec<u32>,
    pub pair: Vec<u32>,
    /// Rows per state key and per pair.
    pub state_rows: Vec<u32>,
    pub pair_rows: Vec<u32>,
    /// The state key of each pair, and how many distinct actions each state key holds.
    pub pair_state: Vec<u32>,
    pub state_actions: Vec<u32>,
}

impl Table {
    pub fn of(keys: &[RowKey]) -> Self {
        let mut states: PlHashMap<(Option<i64>, u32, u128), u32> = PlHashMap::default();
        let mut pairs: PlHashMap<(u32, u128), u32> = PlHashMap::default();
        let mut table = Table {
            state: Vec::with_capacity(keys.len()),
            pair: Vec::with_capacity(keys.len()),
            state_rows: Vec::new(),
            pair_rows: Vec::new(),
            pair_state: Vec::new(),
            state_actions: Vec::new(),
        };
        for key in keys {
            let fresh = table.state_rows.len() as u32;
            let s = match key.state {
                Some(text) => *states.entry((key.iteration, key.t, text)).or_insert(fresh),
                None => fresh,
            };
            if s == fresh {
                table.state_rows.push(0);
                table.state_actions.push(0);
            }
            let fresh = table.pair_rows.len() as u32;
            let p = match key.action {
                Some(text) => *pairs.entry((s, text)).or_insert(fresh),
                None => fresh,
            };
            if p == fresh {
                table.pair_rows.push(0);
                table.pair_state.push(s);
                table.state_actions[s as usize] += 1;
            }
            table.state_rows[s as usize] += 1;
            table.pair_rows[p as usize] += 1;
            table.state.push(s);
            table.pair.push(p);
        }
        table
    }

    fn covered(&self, row: usize) -> bool {
        self.state_actions[self.state[row] as usize] >= 2
    }
}

/// Per row, whether its key (iteration, t, s) holds ≥ 2 rows with ≥ 2 distinct actions: where an
/// empirical advantage can be other than 0.
pub fn covered(keys: &[RowKey]) -> Vec<bool> {
    let table = Table::of(keys);
    (0..keys.len()).map(|r| table.covered(r)).collect()
}

/// The share of rows [`covered`]; 0 for no rows.
pub fn coverage(keys: &[RowKey]) -> f64 {
    let table = Table::of(keys);
    let n = (0..keys.len()).filter(|&r| table.covered(r)).count();
    n as f64 / keys.len().max(1) as f64
}

/// The oracle's columns, one value per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub advantage: Vec<f64>,
    pub q: Vec<f64>,
    pub v: Vec<f64>,
    pub covered: Vec<bool>,
}

/// The empirical-MDP advantage from the rows' keys, rewards and each row's next row in its
/// trajectory (`None` on its last row). An error when the lengths differ, a reward is not finite,
/// γ is outside [0, 1], or a next row is not at step t + 1 of the same iteration.
pub fn estimate(
    keys: &[RowKey],
    rewards: &[f64],
    next: &[Option<usize>],
    gamma: f64,
) -> Result<Estimate> {
    let n = keys.len();
    if rewards.len() != n || next.len() != n {
        return Err(Error::Param(format!(
            "oracle: {n} keys, {} rewards and {} next rows (one of each per row)",
            rewards.len(),
            next.len()
        )));
    }
    if let Some(message) = out_of_range("oracle.gamma", "gamma", gamma) {
        return Err(Error::Param(message));
    }
    if let Some(r) = rewards.iter().position(|x| !x.is_finite()) {
        return Err(Error::Numbers(format!(
            "oracle: row {r}'s reward is {} (rewards must be finite numbers)",
            rewards[r]
        )));
    }
    for (r, &following) in next.iter().enumerate() {
        let Some(j) = following else { continue };
        let fits = keys.get(j).is_some_and(|k| {
            k.iteration == keys[r].iteration && Some(k.t) == keys[r].t.checked_add(1)
        });
        if !fits {
            return Err(Error::Param(format!(
                "oracle: row {r}'s next row {j} is not the following step of the same iteration"
            )));
        }
    }
    let table = Table::of(keys);
    // Every next row sits one step later, so walking the steps from the last one down fills each
    // V before a row backs it up.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&r| std::cmp::Reverse(keys[r].t));
    let mut pair_sum = vec![0.0; table.pair_rows.len()];
    let mut state_sum = vec![0.0; table.state_rows.len()];
    let value =
        |state_sum: &[f64], s: u32| state_sum[s as usize] / table.state_rows[s as usize] as f64;
    for bucket in order.chunk_by(|&a, &b| keys[a].t == keys[b].t) {
        for &r in bucket {
            let future = next[r].map_or(0.0, |j| value(&state_sum, table.state[j]));
            pair_sum[table.pair[r] as usize] += rewards[r] + gamma * future;
        }
        for &r in bucket {
            let p = table.pair[r] as usize;
            state_sum[table.state[r] as usize] += pair_sum[p] / table.pair_rows[p] as f64;
        }
    }
    let mut out = Estimate {
        advantage: Vec::with_capacity(n),
        q: Vec::with_capacity(n),
        v: Vec::with_capacity(n),
        covered: Vec::with_capacity(n),
    };
    for r in 0..n {
        let p = table.pair[r] as usize;
        let q = pair_sum[p] / table.pair_rows[p] as f64;
        let covered = table.covered(r);
        // One action at the key: V is that action's Q, and A exactly 0 (the mean of n equal
        // values need not round back to the value).
        let v = if covered {
            value(&state_sum, table.state[r])
        } else {
            q
        };
        out.advantage.push(if covered { q - v } else { 0.0 });
        out.q.push(q);
        out.v.push(v);
        out.covered.push(covered);
    }
    Ok(out)
}

/// Columns `adv_oracle`, `oracle_q`, `oracle_v`, `oracle_covered` (1 where the row's key holds
/// ≥ 2 rows with ≥ 2 actions, else 0), with a note giving the coverage. With a logged
/// `oracle_advantage`, `adv_oracle` is that column as logged, and `oracle_covered` comes with it.
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let keys = row_keys(batch)?;
    if let Some(logged) = batch.opt_f64s(ORACLE_ADVANTAGE) {
        let values = (0..batch.len())
            .map(|r| {
                logged.get(r).ok_or_else(|| {
                    Error::Param(format!(
                        "oracle: {} has no logged `{ORACLE_ADVANTAGE}` (with the column logged, every step row needs one)",
                        super::step_rl::row_name(batch, r)
                    ))
                })
            })
            .collect::<Result<Vec<f64>>>()?;
        let covered = covered(&keys);
        // One wording for every batch (a run's notes are said once each); the share covered is
        // `oracle_covered`'s mean, and `--against oracle`'s coverage.
        let note = format!(
            "oracle: read from the logged `{ORACLE_ADVANTAGE}` column; `oracle_covered` marks the rows whose step and state hold ≥ 2 rows with ≥ 2 actions (`--against oracle` gives their share)"
        );
        let flags = covered.iter().map(|&c| i64::from(c)).collect();
        let mut out =
            Advantages::new("oracle", values).part("oracle", "covered", Values::I64(flags));
        out.notes.push(note);
        return Ok(out);
    }
    let mut next = vec![None; batch.len()];
    for traj in &batch.trajs {
        for w in traj.rows.windows(2) {
            next[w[0] as usize] = Some(w[1] as usize);
        }
    }
    let est = estimate(&keys, batch.f64s(REWARD)?, &next, params.gamma)?;
    // One wording for every batch (a run's notes are said once each); the share covered is
    // `oracle_covered`'s mean, and `--against oracle`'s coverage.
    let note = "oracle: 0 by construction on rows whose step and state hold fewer than 2 rows or a single action (`oracle_covered` 0; `--against oracle` gives the share covered)".to_string();
    let flags = est.covered.iter().map(|&c| i64::from(c)).collect();
    let mut out = Advantages::new("oracle", est.advantage)
        .part("oracle", "q", Values::F64(est.q))
        .part("oracle", "v", Values::F64(est.v))
        .part("oracle", "covered", Values::I64(flags));
    out.notes.push(note);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch, batch_with, Row};
    use crate::methods::part;

    /// One group, γ = 1. States S (t = 0) and then M or N (t = 1):
    ///
    /// | traj | t = 0 (S)      | t = 1           |
    /// |------|----------------|-----------------|
    /// | a    | go, r = 0      | M: fix, r = 1   |
    /// | b    | go, r = 0      | M: skip, r = 0  |
    /// | c    | go, r = 0      | M: fix, r = 1   |
    /// | d    | stay, r = 0.5  | (ends)          |
    fn small() -> (Vec<Row<'static>>, Vec<&'static str>) {
        let rows = vec![
            ("g", "a", 0, "S", 0.0, true),
            ("g", "a", 1, "M", 1.0, true),
            ("g", "b", 0, "S", 0.0, true),
            ("g", "b", 1, "M", 0.0, true),
            ("g", "c", 0, "S", 0.0, true),
            ("g", "c", 1, "M", 1.0, true),
            ("g", "d", 0, "S", 0.5, true),
        ];
        let actions = vec!["go", "fix", "go", "skip", "go", "fix", "stay"];
        (rows, actions)
    }

    // By hand: at M, Q(fix) = 1, Q(skip) = 0, V = (1 + 0 + 1)/3 = 2/3, A = 1/3, −2/3.
    // At S, Q(go) = mean(0 + V(M)) = 2/3, Q(stay) = 0.5, V = (3·2/3 + 0.5)/4 = 0.625;
    // A(go) = 2/3 − 0.625 = 1/24, A(stay) = −0.125.
    #[test]
    fn backward_induction_by_hand() {
        let (rows, actions) = small();
        let a = advantages(
            &batch_with(&rows, &actions),
            &Params::preset(Profile::Paper),
        )
        .unwrap();
        let (go, fix, skip) = (1.0 / 24.0, 1.0 / 3.0, -2.0 / 3.0);
        assert_close(a.advantage(), &[go, fix, go, skip, go, fix, -0.125], 1e-12);
        let qs = 2.0 / 3.0;
        assert_close(
            part(&a, "oracle_q"),
            &[qs, 1.0, qs, 0.0, qs, 1.0, 0.5],
            1e-12,
        );
        let (vs, vm) = (0.625, 2.0 / 3.0);
        assert_close(part(&a, "oracle_v"), &[vs, vm, vs, vm, vs, vm, vs], 1e-12);
        let Some(Values::I64(flags)) = a.column("oracle_covered") else {
            panic!("no oracle_covered")
        };
        assert_eq!(flags, &vec![1; 7]);
        assert!(
            a.notes[0]
                .contains("0 by construction on rows whose step and state hold fewer than 2 rows"),
            "{:?}",
            a.notes
        );
    }

    // γ = 0.5: Q(go) = 0 + 0.5·2/3 = 1/3, V(S) = (3·1/3 + 0.5)/4 = 0.375; A(go) = −1/24,
    // A(stay) = 0.125. M is the last step: unchanged.
    #[test]
    fn gamma_discounts_the_next_value() {
        let (rows, actions) = small();
        let a = advantages(&batch_with(&rows, &actions), &Params { gamma: 0.5 }).unwrap();
        let go = -1.0 / 24.0;
        let (fix, skip) = (1.0 / 3.0, -2.0 / 3.0);
        assert_close(a.advantage(), &[go, fix, go, skip, go, fix, 0.125], 1e-12);
    }

    #[test]
    fn one_action_or_one_row_gives_exactly_zero() {
        // Key (0, S) holds one action three times with rewards whose mean does not round back
        // (0.1, 0.2, 0.7): A = 0 exactly and V = Q. (1, T) holds a single row.
        let rows = [
            ("g", "a", 0, "S", 0.1, true),
            ("g", "b", 0, "S", 0.2, true),
            ("g", "c", 0, "S", 0.7, true),
            ("g", "c", 1, "T", 1.0, true),
        ];
        let a = advantages(
            &batch_with(&rows, &["x", "x", "x", "y"]),
            &Params { gamma: 1.0 },
        )
        .unwrap();
        assert_eq!(a.advantage(), &[0.0; 4]);
        assert_eq!(part(&a, "oracle_q"), part(&a, "oracle_v"));
        let Some(Values::I64(flags)) = a.column("oracle_covered") else {
            panic!("no oracle_covered")
        };
        assert_eq!(flags, &vec![0; 4]);
    }

    #[test]
    fn keys_split_by_iteration_and_step_and_missing_texts_stand_alone() {
        let k = |it, t, s: Option<&str>, a: Option<&str>| RowKey::new(it, t, s, a);
        // Rows 0, 1: one key, two actions (covered). Row 2: same state text at another step;
        // row 3: another iteration; rows 4, 5: no state text, each a state of its own; rows 6, 7:
        // one state, no action texts, each an action of its own (covered).
        let keys = [
            k(Some(0), 0, Some("s"), Some("a")),
            k(Some(0), 0, Some("s"), Some("b")),
            k(Some(0), 1, Some("s"), Some("a")),
            k(Some(1), 0, Some("s"), Some("b")),
            k(Some(0), 0, None, Some("a")),
            k(Some(0), 0, None, Some("b")),
            k(Some(0), 2, Some("u"), None),
            k(Some(0), 2, Some("u"), None),
        ];
        assert_eq!(
            covered(&keys),
            [true, true, false, false, false, false, true, true]
        );
        assert_eq!(coverage(&keys), 0.5);
        assert_eq!(coverage(&[]), 0.0);
        assert!(covered(&[]).is_empty());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let k = |t| RowKey::new(None, t, Some("s"), Some("a"));
        let keys = [k(0), k(1)];
        let ok = estimate(&keys, &[0.0, 1.0], &[Some(1), None], 1.0).unwrap();
        assert_eq!(ok.q, [1.0, 1.0]);
        let err = |e: Result<Estimate>| e.unwrap_err().to_string();
        assert!(
            err(estimate(&keys, &[0.0, f64::NAN], &[Some(1), None], 1.0))
                .contains("row 1's reward is NaN")
        );
        assert!(err(estimate(&keys, &[0.0], &[None, None], 1.0)).contains("1 rewards"));
        assert!(
            err(estimate(&keys, &[0.0, 1.0], &[None, None], 1.5)).contains("`oracle.gamma` = 1.5")
        );
        assert!(err(estimate(&keys, &[0.0, 1.0], &[None, None], f64::NAN)).contains("out of range"));
        // A next row that is not one step later (a cycle), or not a row at all.
        assert!(
            err(estimate(&keys, &[0.0, 1.0], &[None, Some(0)], 1.0)).contains("row 1's next row 0")
        );
        assert!(err(estimate(&keys, &[0.0, 1.0], &[Some(7), None], 1.0)).contains("next row 7"));
        let empty = estimate(&[], &[], &[], 1.0).unwrap();
        assert!(empty.advantage.is_empty() && empty.covered.is_empty());
    }

    #[test]
    fn a_logged_ground_truth_is_read_as_it_is() {
        use polars::prelude::Column;
        let (rows, actions) = small();
        let mut b = batch_with(&rows, &actions);
        let truth = vec![0.25, -1.5, 0.0, 2.0, 1e-3, -0.75, 3.0];
        b.with_column_f64(ORACLE_ADVANTAGE, truth.clone()).unwrap();
        let a = advantages(&b, &Params { gamma: 1.0 }).unwrap();
        assert_eq!(a.advantage(), truth.as_slice());
        assert!(a.column("oracle_q").is_none());
        // Every key of `small` holds two actions.
        let Some(Values::I64(flags)) = a.column("oracle_covered") else {
            panic!("no oracle_covered")
        };
        assert_eq!(flags, &vec![1; 7]);
        assert!(
            a.notes[0].contains("logged `oracle_advantage`"),
            "{:?}",
            a.notes
        );
        // A row without a value is named.
        let mut gap: Vec<Option<f64>> = truth.iter().copied().map(Some).collect();
        gap[3] = None;
        let b = crate::batch::testing::batch_with_columns(
            &rows,
            vec![
                Column::new(ACTION.into(), actions),
                Column::new(ORACLE_ADVANTAGE.into(), gap),
            ],
        );
        let e = advantages(&b, &Params { gamma: 1.0 })
            .unwrap_err()
            .to_string();
        assert!(e.contains("trajectory `b` step 1 has no logged"), "{e}");
    }

    #[test]
    fn logs_without_actions_name_the_column() {
        let rows = [("g", "a", 0, "S", 1.0, true)];
        let e = advantages(&batch(&rows), &Params { gamma: 1.0 }).unwrap_err();
        assert!(e.to_string().contains("no `action` (or"), "{e}");
        // One row with an action: covered nowhere, A = 0.
        let a = advantages(&batch_with(&rows, &["x"]), &Params { gamma: 1.0 }).unwrap();
        assert_eq!(a.advantage(), &[0.0]);
    }
}
