//! RLOO: leave-one-out baseline, A_i = R_i − mean_{j≠i} R_j = N/(N−1)·(R_i − μ_g).
//!
//! The same quantity is MGR's R_global (`spec-mgr.md` §1.4, Eq. 5). No std division.
//! Profiles (reference: verl `core_algos.py::compute_rloo_outcome_advantage`):
//! - `paper`: N and μ over trajectories.
//! - `verl`: N and μ over step rows (one value per row, as verl's batch rows), penalty 0.1 per
//!   invalid row. A group of one value keeps its raw score, as verl does.

use super::group_stats::episode_scores;
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::Result;
use crate::profile::{Conventions, Profile, StatsOver};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(flatten)]
    pub conv: Conventions,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            conv: Conventions::of(Profile::Paper),
        }
    }

    pub fn verl() -> Self {
        Params {
            conv: Conventions::of(Profile::Verl),
        }
    }

    pub fn preset(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Self::paper(),
            Profile::Verl => Self::verl(),
        }
    }
}

/// Columns `adv_rloo`, `rloo_baseline` (the leave-one-out mean).
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let scores = episode_scores(batch, &params.conv);
    let mut advantage = vec![0.0; batch.len()];
    let mut baseline = vec![0.0; batch.len()];
    for (g, group) in batch.groups.iter().enumerate() {
        let (sum, n) = match params.conv.stats_over {
            StatsOver::Rows => (
                batch.group_rows(g).map(|r| scores[r as usize]).sum::<f64>(),
                group.n_rows,
            ),
            StatsOver::Trajectories => (
                group
                    .trajs
                    .iter()
                    .map(|&t| scores[batch.trajs[t as usize].rows[0] as usize])
                    .sum::<f64>(),
                group.trajs.len(),
            ),
        };
        for r in batch.group_rows(g) {
            let x = scores[r as usize];
            if n > 1 {
                // Own score: the trajectory's first row under `Trajectories`, the row itself under `Rows`.
                let own = match params.conv.stats_over {
                    StatsOver::Rows => x,
                    StatsOver::Trajectories => {
                        scores[batch.trajs[batch.traj_of_row[r as usize] as usize].rows[0] as usize]
                    }
                };
                let b = (sum - own) / (n - 1) as f64;
                baseline[r as usize] = b;
                advantage[r as usize] = x - b;
            } else {
                advantage[r as usize] = x;
            }
        }
    }
    Ok(Advantages::new("rloo", advantage).part("rloo", "baseline", Values::F64(baseline)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch};

    #[test]
    fn leave_one_out_matches_mgr_r_global() {
        // spec-mgr.md §1.4: m = 4, k = 1 → success +1.0, failures −1/3; §3 non-binary S = [0.2, 0.5, 0.9]
        // → [−0.5, −0.05, 0.55].
        let b = batch(&[
            ("g", "a", 0, "x", 1.0, true),
            ("g", "b", 0, "x", 0.0, true),
            ("g", "c", 0, "x", 0.0, true),
            ("g", "d", 0, "x", 0.0, true),
            ("h", "e", 0, "x", 0.2, true),
            ("h", "f", 0, "x", 0.5, true),
            ("h", "g", 0, "x", 0.9, true),
        ]);
        let a = advantages(&b, &Params::paper()).unwrap();
        assert_close(
            a.advantage(),
            &[1.0, -1.0 / 3.0, -1.0 / 3.0, -1.0 / 3.0, -0.5, -0.05, 0.55],
            1e-9,
        );
    }
}
