//! `logged`: the advantage the trainer itself computed, read from the logs.
//!
//! A run's own advantages are what its policy was trained on; every other method is what
//! `credit` recomputes from the rewards. Running `logged` beside them (`--methods logged,gigpo
//! --preset verl`) holds the trainer to the reference: `compare` names the first rows where the
//! two differ ([`crate::analyses::logged`]), and the report and the explorer show `adv_logged`
//! like any other column. One value per step row, from the `advantage` column (or `advantages`,
//! `adv`, or a column mapped with `--schema`); verl-agent's token-level tensor is reduced to that
//! by `integrations/verl_agent_dump.py` (its value at the row's first response token, where
//! every estimator puts the row's one scalar).
//!
//! Profiles: none. The values are taken as logged under both presets; `logged` has no parameters.

use super::step_rl::row_name;
use super::Advantages;
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::schema::{columns::ADVANTAGE, describe_accepted, field};

/// Column `adv_logged`: the logged advantage of every row; an error names the accepted columns
/// when the logs have none, or the first row without a value.
pub fn advantages(batch: &StepBatch) -> Result<Advantages> {
    let column = batch.opt_f64s(ADVANTAGE).ok_or_else(|| {
        let accepted = field(ADVANTAGE).map_or_else(|| format!("`{ADVANTAGE}`"), describe_accepted);
        Error::Param(format!(
            "logged reads the advantages the trainer computed, and the logs have none: log an {accepted} column, one value per step row (verl-agent: `dump_advantages` in integrations/verl_agent_dump.py), or map yours with `--schema` (`your_name = \"{ADVANTAGE}\"`)"
        ))
    })?;
    let values = (0..batch.len())
        .map(|r| {
            column.get(r).ok_or_else(|| {
                Error::Param(format!(
                    "logged: {} has no logged advantage (every step row needs one)",
                    row_name(batch, r)
                ))
            })
        })
        .collect::<Result<Vec<f64>>>()?;
    Ok(Advantages::new("logged", values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::batch_with_columns;
    use polars::prelude::Column;

    const ROWS: [crate::batch::testing::Row; 3] = [
        ("g", "a", 0, "s", 0.0, true),
        ("g", "a", 1, "s", 1.0, true),
        ("g", "b", 0, "s", 0.0, true),
    ];

    #[test]
    fn the_logged_values_as_they_are() {
        let logged = vec![0.5, -1.25, 3.0e-7];
        let b = batch_with_columns(&ROWS, vec![Column::new(ADVANTAGE.into(), logged.clone())]);
        let a = advantages(&b).unwrap();
        assert_eq!(a.columns[0].name, "adv_logged");
        assert_eq!(a.advantage(), logged.as_slice());
    }

    #[test]
    fn no_column_names_the_accepted_ones_and_a_gap_names_the_row() {
        let err = advantages(&batch_with_columns(&ROWS, Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`advantage` (or advantages, adv)"), "{err}");
        let gap = vec![Some(0.5), None, Some(1.0)];
        let b = batch_with_columns(&ROWS, vec![Column::new(ADVANTAGE.into(), gap)]);
        let err = advantages(&b).unwrap_err().to_string();
        assert!(
            err.contains("trajectory `a` step 1 has no logged advantage"),
            "{err}"
        );
    }
}
