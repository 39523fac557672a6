//! Group statistics shared by every estimator: mean and std with ddof, the episode-level group
//! normalisation (GRPO, GiGPO's A^E, ProxMO's A^E), and the penalised episode scores and step
//! returns of `crate::profile::PenaltyMode`.

use crate::batch::StepBatch;
use crate::error::Result;
use crate::profile::{Conventions, PenaltyMode, StatsOver};
use crate::schema::columns::*;

/// Mean and standard deviation with `ddof` (1 = sample std, as `torch.std`). With fewer than
/// `ddof + 1` values the std is 0.
pub fn mean_std(values: &[f64], ddof: u32) -> (f64, f64) {
    let n = values.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n <= ddof as usize {
        return (mean, 0.0);
    }
    let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    (mean, (ss / (n - ddof as usize) as f64).sqrt())
}

/// `(x − μ)/(σ + ε)` or `x − μ`; exactly 0 when every value is bit-identical, so float rounding in
/// μ cannot leave noise where the spec's answer is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    #[serde(alias = "mean_std_norm")]
    MeanStd,
    #[serde(alias = "mean_norm")]
    Mean,
}

/// Group statistics of the episode part: μ, σ per group.
#[derive(Clone, Debug)]
pub struct EpisodeStats {
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

/// Per-row episode scores: R(τ), with the invalid-action penalty applied as the conventions say.
pub fn episode_scores(batch: &StepBatch, conv: &Conventions) -> Vec<f64> {
    let valid = batch.valid();
    let c = conv.invalid_penalty;
    match conv.penalty_mode {
        PenaltyMode::Ref => batch
            .traj_of_row
            .iter()
            .zip(&valid)
            .map(|(&t, &v)| batch.trajs[t as usize].episode_return - if v { 0.0 } else { c })
            .collect(),
        PenaltyMode::Reward => {
            let mut per_traj = vec![0.0; batch.trajs.len()];
            for (t, traj) in batch.trajs.iter().enumerate() {
                let invalid = traj.rows.iter().filter(|&&r| !valid[r as usize]).count();
                per_traj[t] = traj.episode_return - c * invalid as f64;
            }
            batch
                .traj_of_row
                .iter()
                .map(|&t| per_traj[t as usize])
                .collect()
        }
    }
}

/// Per-row discounted returns R_t (γ) with the penalty applied as the conventions say.
pub fn step_returns(batch: &StepBatch, conv: &Conventions) -> Result<Vec<f64>> {
    let rewards = batch.f64s(REWARD)?;
    let valid = batch.valid();
    let c = conv.invalid_penalty;
    Ok(match conv.penalty_mode {
        PenaltyMode::Ref => {
            let mut returns = batch.discounted_returns(rewards, conv.gamma);
            for (r, v) in returns.iter_mut().zip(&valid) {
                if !v {
                    *r -= c;
                }
            }
            returns
        }
        PenaltyMode::Reward => {
            let penalised: Vec<f64> = rewards
                .iter()
                .zip(&valid)
                .map(|(r, &v)| r - if v { 0.0 } else { c })
                .collect();
            batch.discounted_returns(&penalised, conv.gamma)
        }
    })
}

/// Group μ and σ of the per-row `scores`, over rows or over trajectories (each trajectory's first
/// row). A group of one value gets μ = 0 and σ = 1, as every reference does.
pub fn episode_stats(
    batch: &StepBatch,
    scores: &[f64],
    stats_over: StatsOver,
    ddof: u32,
) -> EpisodeStats {
    let mut mean = Vec::with_capacity(batch.groups.len());
    let mut std = Vec::with_capacity(batch.groups.len());
    let mut values = Vec::new();
    for (g, group) in batch.groups.iter().enumerate() {
        values.clear();
        match stats_over {
            StatsOver::Rows => values.extend(batch.group_rows(g).map(|r| scores[r as usize])),
            StatsOver::Trajectories => values.extend(
                group
                    .trajs
                    .iter()
                    .map(|&t| scores[batch.trajs[t as usize].rows[0] as usize]),
            ),
        }
        let (m, s) = if values.len() == 1 {
            (0.0, 1.0)
        } else {
            mean_std(&values, ddof)
        };
        mean.push(m);
        std.push(s);
    }
    EpisodeStats { mean, std }
}

/// The episode-level group advantage of every row: `(score − μ_g)/(σ_g + ε)` or `score − μ_g`.
pub fn episode_advantages(
    batch: &StepBatch,
    scores: &[f64],
    stats: &EpisodeStats,
    norm: Norm,
    eps: f64,
) -> Vec<f64> {
    scores
        .iter()
        .zip(&batch.group_of_row)
        .map(|(&x, &g)| {
            let (m, s) = (stats.mean[g as usize], stats.std[g as usize]);
            match norm {
                Norm::MeanStd => (x - m) / (s + eps),
                Norm::Mean => x - m,
            }
        })
        .collect()
}

/// Clusters of indices (rows, or edges) laid end to end: cluster k is
/// `members[starts[k]..starts[k + 1]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Clusters {
    members: Vec<u32>,
    starts: Vec<usize>,
}

impl Default for Clusters {
    fn default() -> Self {
        Clusters {
            members: Vec::new(),
            starts: vec![0],
        }
    }
}

impl Clusters {
    /// Members grouped by their key (< `n_keys`): a cluster per key that has any, in key order,
    /// each holding its members in the order given (a counting sort, nothing hashed).
    pub fn by_key(keyed: &[(u32, u32)], n_keys: usize) -> Self {
        let mut counts = vec![0usize; n_keys + 1];
        for &(key, _) in keyed {
            counts[key as usize + 1] += 1;
        }
        let starts: Vec<usize> = std::iter::once(0)
            .chain(counts[1..].iter().filter(|&&n| n > 0).scan(0, |end, &n| {
                *end += n;
                Some(*end)
            }))
            .collect();
        // Where each key's next member goes.
        for k in 0..n_keys {
            counts[k + 1] += counts[k];
        }
        let mut members = vec![0u32; keyed.len()];
        for &(key, member) in keyed {
            members[counts[key as usize]] = member;
            counts[key as usize] += 1;
        }
        Clusters { members, starts }
    }

    /// Appends a cluster.
    pub fn push(&mut self, members: &[u32]) {
        self.members.extend_from_slice(members);
        self.starts.push(self.members.len());
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u32]> + '_ {
        self.starts.windows(2).map(|w| &self.members[w[0]..w[1]])
    }
}

/// Normalises each value against its cluster: `(x − μ)/(σ + ε)` or `x − μ`; clusters of one value
/// or of bit-identical values give exactly 0. Each cluster lists the indices of its values.
pub fn cluster_advantages<'c>(
    values: &[f64],
    clusters: impl IntoIterator<Item = &'c [u32]>,
    norm: Norm,
    ddof: u32,
    eps: f64,
    out: &mut [f64],
) {
    let mut buffer = Vec::new();
    for members in clusters {
        let first = values[members[0] as usize];
        if members
            .iter()
            .all(|&r| values[r as usize].to_bits() == first.to_bits())
        {
            for &r in members {
                out[r as usize] = 0.0;
            }
            continue;
        }
        buffer.clear();
        buffer.extend(members.iter().map(|&r| values[r as usize]));
        let (m, s) = mean_std(&buffer, ddof);
        for &r in members {
            let x = values[r as usize];
            out[r as usize] = match norm {
                Norm::MeanStd => (x - m) / (s + eps),
                Norm::Mean => x - m,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_and_population_std() {
        // numpy: np.std([1,0,0,0], ddof=1) = 0.5, ddof=0 = 0.4330127
        let (m, s1) = mean_std(&[1.0, 0.0, 0.0, 0.0], 1);
        let (_, s0) = mean_std(&[1.0, 0.0, 0.0, 0.0], 0);
        assert!((m - 0.25).abs() < 1e-12);
        assert!((s1 - 0.5).abs() < 1e-12);
        assert!((s0 - 0.4330127).abs() < 1e-7);
    }

    #[test]
    fn clusters_by_key_come_in_key_order_members_as_given() {
        let clusters = Clusters::by_key(&[(2, 10), (0, 11), (2, 12), (4, 13), (0, 14)], 5);
        let members: Vec<Vec<u32>> = clusters.iter().map(<[u32]>::to_vec).collect();
        // Keys 1 and 3 have no members and make no cluster.
        assert_eq!(members, vec![vec![11, 14], vec![10, 12], vec![13]]);
        assert_eq!(clusters.len(), 3);
    }

    #[test]
    fn identical_cluster_is_exactly_zero() {
        let values = [0.1 + 0.2, 0.1 + 0.2, 0.3];
        let mut out = [f64::NAN; 3];
        cluster_advantages(
            &values,
            [&[0, 1][..], &[2]],
            Norm::MeanStd,
            1,
            1e-6,
            &mut out,
        );
        assert_eq!(out, [0.0, 0.0, 0.0]);
    }
}
