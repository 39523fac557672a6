//! GiGPO: episode- plus step-level group advantage (Feng et al. 2025, arXiv 2505.10978, Eq. 3, 5–8).
//!
//! A(a_t^(i)) = A^E(τ_i) + ω·A^S(a_t^(i)).
//! - A^E (Eq. 3): the GRPO group advantage of the episode score, `(R − μ_g)/(σ_g + ε)` in
//!   `mean_std_norm` or `R − μ_g` in `mean_norm`.
//! - R_t (Eq. 5): discounted return-to-go Σ_{k≥t} γ^{k−t} r_k of the raw step rewards (γ = 0.95).
//! - Anchor-state groups (Eq. 6): within a group, steps whose `obs` are byte-identical, across all
//!   trajectories and time steps.
//! - A^S (Eq. 7): R_t normalised within its anchor-state group the same way; a singleton or an
//!   all-identical cluster gives exactly 0.
//!
//! Profiles (reference: verl-agent `gigpo/core_gigpo.py::compute_gigpo_outcome_advantage`):
//! - `paper`: A^E over trajectories, no penalty.
//! - `verl`: A^E over step rows; invalid rows lose 0.1 from their episode score and from their
//!   already-discounted R_t (`apply_invalid_action_penalty`).
//!
//! Similarity groups (`similarity = θ`, verl-agent's `algorithm.gigpo.enable_similarity` with
//! `similarity_thresh`; `build_step_group`, PR #159): instead of byte equality, a step joins the
//! first cluster, in creation order, whose representative (its first member, never updated) it
//! matches with `difflib.SequenceMatcher(None, obs, representative).ratio() ≥ θ`
//! ([`crate::sequence_matcher`]); otherwise it founds a cluster. Steps are scanned in batch order:
//! trajectory by trajectory as they first appear in the log, each in step order (verl-agent's
//! rollout order). Nothing else changes. The merge is order-dependent and not transitive, as in
//! the reference; θ must lie in (0, 1).

use super::group_stats::{
    cluster_advantages, episode_advantages, episode_scores, episode_stats, step_returns, Clusters,
    Norm,
};
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::{Conventions, Profile};
use crate::schema::columns::OBS;
use crate::sequence_matcher::{similar, Matcher, Scratch, Text};
use polars::prelude::{PlHashMap, StringChunked};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(flatten)]
    pub conv: Conventions,
    /// `mean_std` (`mean_std_norm`, "GiGPO w/ std") or `mean` (`mean_norm`).
    pub mode: Norm,
    /// ω, the weight of the step term (`step_advantage_w`).
    pub omega: f64,
    /// θ of similarity-based anchor groups (`similarity_thresh`); `None` groups byte-identical
    /// states (`enable_similarity: False`, both presets).
    pub similarity: Option<f64>,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            conv: Conventions::of(Profile::Paper),
            mode: Norm::MeanStd,
            omega: 1.0,
            similarity: None,
        }
    }

    pub fn verl() -> Self {
        Params {
            conv: Conventions::of(Profile::Verl),
            mode: Norm::MeanStd,
            omega: 1.0,
            similarity: None,
        }
    }

    pub fn preset(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Self::paper(),
            Profile::Verl => Self::verl(),
        }
    }

    pub fn check(&self) -> Result<()> {
        match self.similarity {
            Some(t) if !(t > 0.0 && t < 1.0) => Err(Error::Param(format!(
                "gigpo.similarity = {t}: the similarity threshold must lie in (0, 1) (leave it unset for byte-identical anchors)"
            ))),
            _ => Ok(()),
        }
    }
}

/// The anchor-state clusters of every group, as lists of row indices in the order of their first
/// rows: byte-identical `obs` (`similarity` = None) or verl-agent's first-match similarity
/// clusters. Rows without `obs` are singletons. Shared with the analyses (step-group size
/// distributions) and the report's explorer.
pub fn anchor_clusters(batch: &StepBatch, similarity: Option<f64>) -> Clusters {
    let Some(similarity) = similarity else {
        return exact_clusters(batch);
    };
    let obs = batch.texts(OBS);
    // Groups are independent, and similarity groups cost a ratio per pair of distinct texts:
    // clustered in parallel, concatenated in group order.
    let per_group: Vec<Vec<Vec<u32>>> = (0..batch.groups.len())
        .into_par_iter()
        .map(|g| group_clusters(batch.group_rows(g), batch.groups[g].n_rows, obs, similarity))
        .collect();
    let mut clusters = Clusters::default();
    for cluster in per_group.iter().flatten() {
        clusters.push(cluster);
    }
    clusters
}

/// Exact anchor clusters from the batch's interned states ([`StepBatch::states`]): the rows
/// leaving each state node, as a node stands for one observation text (a row without one has a
/// node of its own), numbered in the order of their first rows.
fn exact_clusters(batch: &StepBatch) -> Clusters {
    let states = batch.states();
    let mut keyed = Vec::with_capacity(batch.len());
    let (mut cluster_of, mut clusters) = (Vec::new(), 0u32);
    for g in 0..batch.groups.len() {
        cluster_of.clear();
        cluster_of.resize(states.nodes(g).len(), u32::MAX);
        for &(row, source, _) in states.steps(g) {
            let cluster = &mut cluster_of[source as usize];
            if *cluster == u32::MAX {
                *cluster = clusters;
                clusters += 1;
            }
            keyed.push((*cluster, row));
        }
    }
    Clusters::by_key(&keyed, clusters as usize)
}

/// One group's similarity clusters, in the order of their first rows.
fn group_clusters(
    rows: impl Iterator<Item = u32>,
    n_rows: usize,
    obs: Option<&StringChunked>,
    threshold: f64,
) -> Vec<Vec<u32>> {
    let mut clusters: Vec<Vec<u32>> = Vec::new();
    // State text → its cluster. With similarity groups a repeated text lands where its first
    // occurrence did (the clusters before that one did not match it then and cannot now), so
    // each distinct text is compared once.
    // Sized for the rows up front: growing would hash each long text again.
    let mut index: PlHashMap<&str, usize> =
        PlHashMap::with_capacity_and_hasher(n_rows, Default::default());
    let mut representatives: Vec<(usize, Matcher)> = Vec::new();
    let mut scratch = Scratch::default();
    for r in rows {
        let Some(text) = obs.and_then(|o| o.get(r as usize)) else {
            clusters.push(vec![r]);
            continue;
        };
        let k = match index.get(text) {
            Some(&k) => k,
            None => {
                // Prepared once: to compare with the representatives, and as one itself.
                let prepared = Text::new(text);
                let found = representatives
                    .iter()
                    .find(|(_, rep)| similar(&prepared, rep, threshold, &mut scratch))
                    .map(|(k, _)| *k);
                let k = found.unwrap_or_else(|| {
                    clusters.push(Vec::new());
                    representatives.push((clusters.len() - 1, Matcher::new(prepared)));
                    clusters.len() - 1
                });
                index.insert(text, k);
                k
            }
        };
        clusters[k].push(r);
    }
    clusters
}

/// Columns `adv_gigpo`, `gigpo_episode`, `gigpo_step`, `gigpo_step_return`, `gigpo_group_size`.
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let conv = &params.conv;
    let scores = episode_scores(batch, conv);
    let stats = episode_stats(batch, &scores, conv.stats_over, conv.std_ddof);
    let episode = episode_advantages(batch, &scores, &stats, params.mode, conv.eps);
    let returns = step_returns(batch, conv)?;
    let clusters = anchor_clusters(batch, params.similarity);
    let mut step = vec![0.0; batch.len()];
    cluster_advantages(
        &returns,
        clusters.iter(),
        params.mode,
        conv.std_ddof,
        conv.eps,
        &mut step,
    );
    let mut size = vec![0i64; batch.len()];
    for c in clusters.iter() {
        for &r in c {
            size[r as usize] = c.len() as i64;
        }
    }
    let advantage = episode
        .iter()
        .zip(&step)
        .map(|(e, s)| e + params.omega * s)
        .collect();
    Ok(Advantages::new("gigpo", advantage)
        .part("gigpo", "episode", Values::F64(episode))
        .part("gigpo", "step", Values::F64(step))
        .part("gigpo", "step_return", Values::F64(returns))
        .part("gigpo", "group_size", Values::I64(size)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, spec_4_1};
    use crate::methods::part;

    // spec-proxmo-gigpo.md §4.4 (`paper`: trajectory statistics, ddof 1, ω = 1).
    #[test]
    fn vector_4_4_gigpo_paper_mean_std_norm() {
        let a = advantages(&spec_4_1(1.0, None), &Params::paper()).unwrap();
        assert_close(
            part(&a, "gigpo_step"),
            &[
                1.5, 1.5, 0.0, -0.5, -0.5, 0.0, -0.5, 0.0, -0.5, -0.5, -0.5, 0.5773, 0.0, -1.1547,
                0.5773, 0.0,
            ],
            1e-4,
        );
        assert_close(
            a.advantage(),
            &[
                3.0, 3.0, 1.5, -1.0, -1.0, -0.5, -1.0, -0.5, -1.0, -1.0, -1.0, 0.5773, 0.0,
                -1.1547, 0.5773, 0.0,
            ],
            1e-4,
        );
        let sizes = match a.column("gigpo_group_size") {
            Some(Values::I64(v)) => v.clone(),
            _ => panic!(),
        };
        assert_eq!(sizes, vec![4, 4, 1, 4, 4, 2, 4, 2, 4, 4, 4, 3, 2, 3, 3, 2]);
    }

    #[test]
    fn vector_4_4_gigpo_paper_mean_norm() {
        let p = Params {
            mode: Norm::Mean,
            ..Params::paper()
        };
        let a = advantages(&spec_4_1(1.0, None), &p).unwrap();
        assert_close(
            part(&a, "gigpo_step"),
            &[
                0.6769, 0.7125, 0.0, -0.2256, -0.2375, 0.0, -0.2256, 0.0, -0.2256, -0.2375,
                -0.2375, 0.0158, 0.0, -0.0317, 0.0158, 0.0,
            ],
            1e-4,
        );
        assert_close(
            a.advantage(),
            &[
                1.4269, 1.4625, 0.75, -0.4756, -0.4875, -0.25, -0.4756, -0.25, -0.4756, -0.4875,
                -0.4875, 0.0158, 0.0, -0.0317, 0.0158, 0.0,
            ],
            1e-4,
        );
    }

    // §4.6: rewards ×10, row 9 (t4, t = 2) invalid, penalty 0.1, row-level episode statistics.
    #[test]
    fn vector_4_6_gigpo_verl() {
        let a = advantages(&spec_4_1(10.0, Some(9)), &Params::verl()).unwrap();
        assert_close(
            part(&a, "gigpo_step_return"),
            &[
                9.025, 9.5, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.1, 0.0, 9.5, 10.0, 9.025, 9.5,
                10.0,
            ],
            1e-4,
        );
        assert_close(
            part(&a, "gigpo_step"),
            &[
                1.5, 1.4999, 0.0, -0.5, -0.4930, 0.0, -0.5, 0.0, -0.5, -0.5140, -0.4930, 0.5773,
                0.0, -1.1547, 0.5773, 0.0,
            ],
            1e-4,
        );
        assert_close(
            a.advantage(),
            &[
                3.0570, 3.0569, 1.5570, -1.0812, -1.0742, -0.5812, -1.0812, -0.5812, -1.0812,
                -1.1165, -1.0742, 0.5773, 0.0, -1.1547, 0.5773, 0.0,
            ],
            1e-4,
        );
    }

    #[test]
    fn exact_clusters_come_in_the_order_of_their_first_rows() {
        use crate::schema::columns::NEXT_OBS;
        use polars::prelude::Column;
        // τa ends in a logged next state Z (a node made before τb's Y), and τb reaches Z.
        let rows = [
            ("g", "a", 0, "X", 0.0, true),
            ("g", "b", 0, "Y", 0.0, true),
            ("g", "b", 1, "Z", 0.0, true),
            ("g", "b", 2, "X", 0.0, true),
        ];
        let next = Column::new(NEXT_OBS.into(), [Some("Z"), None, None, None]);
        let batch = crate::batch::testing::batch_with_columns(&rows, vec![next]);
        let clusters: Vec<Vec<u32>> = anchor_clusters(&batch, None)
            .iter()
            .map(<[u32]>::to_vec)
            .collect();
        assert_eq!(clusters, vec![vec![0, 3], vec![1], vec![2]]);
    }

    // Similarity groups, derived by hand. difflib ratios against the representatives:
    // "abxy"~"abcd" = 2·2/8 = 0.5 (new cluster); "abxyd"~"abcd" = 2·3/9 = 0.667 (joins the first
    // cluster, though "abxyd"~"abxy" = 8/9 is better: first match, not best); "zzzz" matches none.
    #[test]
    fn similarity_groups_first_match_in_batch_order() {
        let rows = [
            ("g", "1", 1, "abcd", 0.0, true),
            ("g", "1", 2, "abxy", 1.0, true),
            ("g", "2", 1, "abxyd", 0.0, true),
            ("g", "2", 2, "zzzz", 0.0, true),
        ];
        let batch = crate::batch::testing::batch(&rows);
        let clusters = |t| {
            anchor_clusters(&batch, Some(t))
                .iter()
                .map(<[u32]>::to_vec)
                .collect::<Vec<_>>()
        };
        assert_eq!(clusters(0.6), vec![vec![0, 2], vec![1], vec![3]]);
        // At 0.7 "abxyd" misses "abcd" and joins "abxy"; at 0.9 it misses both.
        assert_eq!(clusters(0.7), vec![vec![0], vec![1, 2], vec![3]]);
        assert_eq!(clusters(0.9).len(), 4);
        let p = Params {
            similarity: Some(0.6),
            ..Params::paper()
        };
        let a = advantages(&batch, &p).unwrap();
        // R = 0.95 (τ1, t1) and 0 (τ2, t1): μ = 0.475, σ = 0.475·√2, A^S = ±1/√2.
        let s = std::f64::consts::FRAC_1_SQRT_2;
        assert_close(part(&a, "gigpo_step"), &[s, 0.0, -s, 0.0], 1e-5);
        let exact = advantages(&batch, &Params::paper()).unwrap();
        assert_close(part(&exact, "gigpo_step"), &[0.0; 4], 0.0);
        assert!(Params {
            similarity: Some(1.0),
            ..Params::paper()
        }
        .check()
        .is_err());
        assert!(Params {
            similarity: Some(0.0),
            ..Params::paper()
        }
        .check()
        .is_err());
    }

    // spec-mgr.md §3: one group, m = 4, rewards 10 on success, penalty 0.1, γ = 0.95.
    #[test]
    fn vector_mgr_3_gigpo_column() {
        let (a, b, c, d) = ("A", "B", "C", "D");
        let rows = [
            ("g", "1", 1, a, 0.0, true),
            ("g", "1", 2, b, 0.0, false),
            ("g", "1", 3, b, 0.0, true),
            ("g", "1", 4, c, 10.0, true),
            ("g", "2", 1, a, 0.0, true),
            ("g", "2", 2, b, 0.0, true),
            ("g", "2", 3, c, 10.0, true),
            ("g", "3", 1, a, 0.0, true),
            ("g", "3", 2, d, 0.0, true),
            ("g", "3", 3, d, 0.0, true),
            ("g", "3", 4, d, 0.0, true),
            ("g", "4", 1, a, 0.0, false),
            ("g", "4", 2, a, 0.0, true),
            ("g", "4", 3, b, 0.0, false),
            ("g", "4", 4, b, 0.0, false),
        ];
        // Canonical form ([CHOICE] in §2): the penalty enters the step rewards before discounting
        // (r = 10·[success] − 0.1·[invalid]) and only A^S; A^E is over trajectories without it.
        let batch = crate::batch::testing::batch(&rows);
        let mut p = Params::paper();
        p.conv.invalid_penalty = 0.1;
        p.conv.penalty_mode = crate::profile::PenaltyMode::Reward;
        let with_penalty = advantages(&batch, &p).unwrap();
        let returns = [
            8.47875, 8.925, 9.5, 10.0, 9.025, 9.5, 10.0, 0.0, 0.0, 0.0, 0.0, -0.275988, -0.18525,
            -0.195, -0.1,
        ];
        assert_close(part(&with_penalty, "gigpo_step_return"), &returns, 1e-5);
        let step = [
            1.0384, 0.6556, 0.7665, 0.0, 1.1503, 0.7665, 0.0, -0.6981, 0.0, 0.0, 0.0, -0.7546,
            -0.7360, -1.1035, -1.0851,
        ];
        assert_close(part(&with_penalty, "gigpo_step"), &step, 1e-4);
        let without = advantages(&batch, &Params::paper()).unwrap();
        let episode = part(&without, "gigpo_episode");
        assert_close(
            episode,
            &[
                0.8660, 0.8660, 0.8660, 0.8660, 0.8660, 0.8660, 0.8660, -0.8660, -0.8660, -0.8660,
                -0.8660, -0.8660, -0.8660, -0.8660, -0.8660,
            ],
            1e-4,
        );
        let total: Vec<f64> = episode.iter().zip(&step).map(|(e, s)| e + s).collect();
        let gigpo = [
            1.9044, 1.5216, 1.6325, 0.8660, 2.0163, 1.6325, 0.8660, -1.5641, -0.8660, -0.8660,
            -0.8660, -1.6206, -1.6021, -1.9695, -1.9512,
        ];
        assert_close(&total, &gigpo, 2e-4);
        // verl-agent's cross-steps episode statistics (row scores R − 0.1·invalid) give τ1 t2 an
        // episode part of 1.0162 (§3: 1.0162 + 0.6556 = 1.6718).
        let mut rows_stats = Params::paper();
        rows_stats.conv.invalid_penalty = 0.1;
        rows_stats.conv.stats_over = crate::profile::StatsOver::Rows;
        let cross = advantages(&batch, &rows_stats).unwrap();
        assert!(
            (part(&cross, "gigpo_episode")[1] - 1.0162).abs() < 1e-4,
            "{}",
            part(&cross, "gigpo_episode")[1]
        );
    }
}
