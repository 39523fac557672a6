//! Every estimator against a reference advantage (issue #53): the `oracle`
//! ([`crate::methods::oracle`]) or a simulator's logged ground truth. Per method, over all rows:
//!
//! - `spearman`: Spearman's ρ with ties given their average rank, values with |v| < 1e-8
//!   ([`ZERO`]) ranked as exactly 0 on both sides (float noise around a true 0 is not an order);
//!   0 when either side has no variance;
//! - `sign_accuracy`: over the rows with |ref| ≥ 1e-8, the share where sign(adv) = sign(ref), an
//!   |adv| < 1e-8 counting as 0 and so as wrong; `None` when no row has |ref| ≥ 1e-8;
//! - `leakage`: Σ|adv| over the rows with |ref| < 1e-8, divided by Σ|adv| over all rows, the share
//!   of the method's credit spent where the reference sees none (an |adv| < 1e-8 adds nothing);
//!   0 when the method gives none;
//! - `gradient_cosine`: the policy gradient each would give a tabular softmax policy at the
//!   empirical π̂: a row i at key k = (iteration, t, s) adds A_i·(e_{a_i} − π̂(·|k)) over the
//!   actions seen at k, so g(k, b) = Σ_{i at (k, b)} A_i − π̂(b|k)·Σ_{i at k} A_i; the cosine of the
//!   method's g with the reference's, `None` when either has norm < 1e-8. Credit that is constant
//!   over a key's actions moves no logit: only what separates actions counts.
//!
//! `coverage` is the share of rows whose (iteration, t, s) holds ≥ 2 rows with ≥ 2 distinct
//! actions ([`oracle::coverage`]): elsewhere an empirical reference is 0 by construction.

use super::stats::spearman as spearman_on_ranks;
use crate::error::{Error, Result};
use crate::methods::oracle::{self, RowKey, Table};
use crate::methods::spa;
use serde::Serialize;
use std::collections::BTreeMap;

/// Values with a smaller magnitude are 0: to rank, to sign, to leak and for a gradient's norm.
pub const ZERO: f64 = 1e-8;

/// One method's scores against the reference.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scores {
    pub spearman: f64,
    pub sign_accuracy: Option<f64>,
    pub leakage: f64,
    pub gradient_cosine: Option<f64>,
}

/// Every method against one reference (`--against METHOD`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Against {
    /// The reference method's name.
    pub method: String,
    pub coverage: f64,
    pub scores: BTreeMap<String, Scores>,
}

/// The reference's parts that every method is scored against.
struct Reference {
    rows: usize,
    snapped: Vec<f64>,
    table: Table,
    gradient: Vec<f64>,
}

impl Reference {
    fn new(values: &[f64], keys: &[RowKey]) -> Result<Self> {
        check("the reference", values, keys.len())?;
        let table = Table::of(keys);
        let gradient = gradient(&table, values);
        Ok(Reference {
            rows: values.len(),
            snapped: snap(values),
            table,
            gradient,
        })
    }

    fn score(&self, name: &str, adv: &[f64]) -> Result<Scores> {
        check(name, adv, self.rows)?;
        let snapped = snap(adv);
        let spearman = spearman_on_ranks(&self.snapped, &snapped).unwrap_or(0.0);
        let (mut right, mut scored) = (0usize, 0usize);
        let (mut leaked, mut total) = (0.0, 0.0);
        for (&r, &a) in self.snapped.iter().zip(&snapped) {
            total += a.abs();
            if r == 0.0 {
                leaked += a.abs();
            } else {
                scored += 1;
                right += usize::from(a != 0.0 && (a > 0.0) == (r > 0.0));
            }
        }
        Ok(Scores {
            spearman,
            sign_accuracy: (scored > 0).then(|| right as f64 / scored as f64),
            leakage: if total > 0.0 { leaked / total } else { 0.0 },
            gradient_cosine: cosine(&gradient(&self.table, adv), &self.gradient),
        })
    }
}

/// One value per row, all finite, or an error naming what is wrong.
fn check(name: &str, values: &[f64], rows: usize) -> Result<()> {
    if values.len() != rows {
        return Err(Error::Param(format!(
            "{name}: {} values for {rows} rows",
            values.len()
        )));
    }
    match values.iter().position(|v| !v.is_finite()) {
        Some(r) => Err(Error::Numbers(format!(
            "{name}: row {r}'s advantage is {}",
            values[r]
        ))),
        None => Ok(()),
    }
}

fn snap(values: &[f64]) -> Vec<f64> {
    values
        .iter()
        .map(|&v| if v.abs() < ZERO { 0.0 } else { v })
        .collect()
}

/// g(k, b) = Σ_{i at (k, b)} A_i − π̂(b|k)·Σ_{i at k} A_i, one entry per (key, action).
fn gradient(table: &Table, adv: &[f64]) -> Vec<f64> {
    let mut pair_sum = vec![0.0; table.pair_rows.len()];
    let mut state_sum = vec![0.0; table.state_rows.len()];
    for (r, &a) in adv.iter().enumerate() {
        pair_sum[table.pair[r] as usize] += a;
        state_sum[table.state[r] as usize] += a;
    }
    pair_sum
        .iter()
        .enumerate()
        .map(|(p, &sum)| {
            let s = table.pair_state[p] as usize;
            let share = table.pair_rows[p] as f64 / table.state_rows[s] as f64;
            sum - share * state_sum[s]
        })
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> Option<f64> {
    let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(x, y)| x * y).sum::<f64>();
    let (aa, bb) = (dot(a, a), dot(b, b));
    // One root of the product: a vector's cosine with itself is then exactly 1.
    (aa.sqrt() >= ZERO && bb.sqrt() >= ZERO)
        .then(|| (dot(a, b) / (aa * bb).sqrt()).clamp(-1.0, 1.0))
}

/// One method's scores against the reference, both one value per row of `keys`.
pub fn scores(reference: &[f64], method: &[f64], keys: &[RowKey]) -> Result<Scores> {
    Reference::new(reference, keys)?.score("the method", method)
}

/// Every method of `methods` (name, one value per row of `keys`) against the reference
/// `reference` named `method`; an error when a column's length differs or a value is not finite.
pub fn against(
    method: &str,
    reference: &[f64],
    methods: &[(String, Vec<f64>)],
    keys: &[RowKey],
) -> Result<Against> {
    let columns = methods
        .iter()
        .map(|(name, adv)| (name.as_str(), adv.as_slice()));
    against_columns(method, reference, columns, keys)
}

/// [`against`] over borrowed columns (a run's gathered advantages, the reference among them left
/// out by the caller).
pub fn against_columns<'a>(
    method: &str,
    reference: &[f64],
    methods: impl IntoIterator<Item = (&'a str, &'a [f64])>,
    keys: &[RowKey],
) -> Result<Against> {
    let prepared = Reference::new(reference, keys)?;
    let scores = methods
        .into_iter()
        .map(|(name, adv)| Ok((name.to_string(), prepared.score(name, adv)?)))
        .collect::<Result<_>>()?;
    Ok(Against {
        method: method.to_string(),
        coverage: oracle::coverage(keys),
        scores,
    })
}

/// A warning where SPA's released weighting misleads on the logs at hand: StepTool's position
/// weight scores step k of n as r_k·(n − 1 − k), so a trajectory's last step gets no reward, a
/// 1-step trajectory none at all, and a 2-step one only on its first step; whitening then gives
/// every such step a credit set by the rest of the batch, not by its outcome. `None` when the
/// weight is off or no trajectory has 1 or 2 steps.
pub fn spa_weighting_note(
    params: &spa::Params,
    traj_lengths: impl IntoIterator<Item = usize>,
) -> Option<String> {
    if !params.steptool_position_weight {
        return None;
    }
    let (mut short, mut all) = (0usize, 0usize);
    for n in traj_lengths {
        all += 1;
        short += usize::from((1..=2).contains(&n));
    }
    (short > 0).then(|| {
        format!(
            "spa: {short} of {all} trajectories have 1–2 steps, where the `verl` weighting (StepTool's position weight r_k·(n−1−k)) gives the last step no reward: there its credit does not follow the outcome and its gradient can oppose the oracle's (`--set spa.steptool_position_weight=false` turns it off)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(spec: &[(u32, &str, &str)]) -> Vec<RowKey> {
        spec.iter()
            .map(|&(t, s, a)| RowKey::new(Some(0), t, Some(s), Some(a)))
            .collect()
    }

    // By hand. ref = [1, −1, 0, 2e−9], adv = [2, 0.5, 0.5, −1]; snapped ref = [1, −1, 0, 0] ranks
    // [4, 1, 2.5, 2.5]; adv ranks [4, 2.5, 2.5, 1]. Centred (mean 2.5): x = [1.5, −1.5, 0, 0],
    // y = [1.5, 0, 0, −1.5]: Σxy = 2.25, Σx² = Σy² = 4.5, ρ = 0.5.
    // Sign accuracy over rows 0, 1: row 0 right, row 1 wrong: 0.5.
    // Leakage: (0.5 + 1)/(2 + 0.5 + 0.5 + 1) = 0.375.
    #[test]
    fn scores_by_hand() {
        let k = keys(&[(0, "s", "a"), (0, "s", "b"), (1, "u", "a"), (1, "u", "b")]);
        let s = scores(&[1.0, -1.0, 0.0, 2e-9], &[2.0, 0.5, 0.5, -1.0], &k).unwrap();
        assert!((s.spearman - 0.5).abs() < 1e-12, "{s:?}");
        assert_eq!(s.sign_accuracy, Some(0.5));
        assert!((s.leakage - 0.375).abs() < 1e-12);
        // Key (0, s): π̂ = ½ each. ref g = [1 − ½·0, −1 − ½·0] = [1, −1]; adv: Σ = 2.5,
        // g = [2 − 1.25, 0.5 − 1.25] = [0.75, −0.75]. Key (1, u): ref Σ = 2e−9, g = [−1e−9, 1e−9];
        // adv Σ = −0.5, g = [0.5 + 0.25, −1 + 0.25] = [0.75, −0.75].
        // cos = (0.75 + 0.75)/(√2 · √2.25) = 1.5/(1.41421·1.5) = 0.70711 (to 1e−8).
        let cos = s.gradient_cosine.unwrap();
        assert!(
            (cos - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-8,
            "{cos}"
        );
    }

    #[test]
    fn degenerate_sides() {
        let k = keys(&[(0, "s", "a"), (0, "s", "a"), (0, "s", "a")]);
        // A constant method (and one of float noise): ρ = 0; no gradient at a key of one action.
        let s = scores(&[1.0, 2.0, 3.0], &[5.0, 5.0, 5.0], &k).unwrap();
        assert_eq!((s.spearman, s.gradient_cosine), (0.0, None));
        let noise = scores(&[1.0, 2.0, 3.0], &[1e-9, -1e-9, 3e-9], &k).unwrap();
        assert_eq!(noise.spearman, 0.0);
        assert_eq!(noise.sign_accuracy, Some(0.0));
        // A zero reference: no row to sign, everything leaks.
        let s = scores(&[0.0; 3], &[1.0, -1.0, 0.0], &k).unwrap();
        assert_eq!((s.sign_accuracy, s.leakage), (None, 1.0));
        // A zero method leaks nothing.
        assert_eq!(scores(&[0.0; 3], &[0.0; 3], &k).unwrap().leakage, 0.0);
        // No rows at all, and one row.
        let empty = scores(&[], &[], &[]).unwrap();
        assert_eq!(
            empty,
            Scores {
                spearman: 0.0,
                sign_accuracy: None,
                leakage: 0.0,
                gradient_cosine: None
            }
        );
        let one = scores(&[1.0], &[1.0], &k[..1]).unwrap();
        assert_eq!((one.spearman, one.sign_accuracy), (0.0, Some(1.0)));
    }

    #[test]
    fn bad_columns_are_errors() {
        let k = keys(&[(0, "s", "a"), (0, "s", "b")]);
        let e = against("oracle", &[1.0, -1.0], &[("m".into(), vec![1.0])], &k).unwrap_err();
        assert!(e.to_string().contains("m: 1 values for 2 rows"), "{e}");
        let e = against("oracle", &[1.0, f64::NAN], &[], &k).unwrap_err();
        assert!(
            e.to_string()
                .contains("the reference: row 1's advantage is NaN"),
            "{e}"
        );
        let e = scores(&[1.0, -1.0], &[f64::INFINITY, 0.0], &k).unwrap_err();
        assert!(e.to_string().contains("row 0's advantage is inf"), "{e}");
    }

    #[test]
    fn against_serialises_with_the_issue_field_names() {
        let k = keys(&[(0, "s", "a"), (0, "s", "b"), (0, "s", "b")]);
        let reference = [1.0, -0.5, -0.5];
        let methods = vec![
            ("same".to_string(), reference.to_vec()),
            ("flat".to_string(), vec![0.0; 3]),
        ];
        let a = against("oracle", &reference, &methods, &k).unwrap();
        assert_eq!(a.coverage, 1.0);
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["method"], "oracle");
        assert_eq!(
            json["scores"]["same"],
            serde_json::json!({"spearman": 1.0, "sign_accuracy": 1.0, "leakage": 0.0, "gradient_cosine": 1.0})
        );
        assert_eq!(
            json["scores"]["flat"],
            serde_json::json!({"spearman": 0.0, "sign_accuracy": 0.0, "leakage": 0.0, "gradient_cosine": null})
        );
    }

    #[test]
    fn spa_note_only_for_the_weighting_on_short_trajectories() {
        let verl = spa::Params::verl();
        let note = spa_weighting_note(&verl, [1, 5, 2, 7]).unwrap();
        assert!(
            note.starts_with("spa: 2 of 4 trajectories have 1–2 steps"),
            "{note}"
        );
        assert_eq!(spa_weighting_note(&verl, [3, 5]), None);
        assert_eq!(spa_weighting_note(&spa::Params::paper(), [1, 2]), None);
    }
}
