//! `credit analyze`, logged signals: SPA's per-step progress ĉ_t (`progress`) and HISR's segments
//! (`segment`, `segment_reward`), when the logs carry them (`spec-spa-hisr.md` A3–A4, B3, B10).
//!
//! - Progress: mean ĉ_t and the cumulative progress Φ_t = Σ_{k≤t} ĉ_k by step position, for
//!   successful and failed trajectories; the share of negative-progress steps in successful
//!   trajectories; the calibration of Σ_t ĉ_t against R (the estimator's loss, MSE, and Pearson r).
//! - Segments: segments per trajectory, turns per segment (HISR Fig. 3), and the share of reward
//!   on the first, middle and last segments before and after HISR's modulation (Fig. 4).

use super::compare::POSITION_CAP;
use super::stats::{mean, pearson, Counts, LengthStats, RunningSum, SizeCounts, SizeDistribution};
use crate::batch::StepBatch;
use crate::methods::hisr;
use crate::methods::spa::potential;
use crate::schema::columns::PROGRESS;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct ProgressStats {
    /// Trajectories with ĉ_t on every step; the others are left out.
    pub trajectories: usize,
    pub steps: usize,
    /// Trajectories left out because a step has no ĉ_t.
    pub incomplete_trajectories: usize,
    pub by_position: Vec<ProgressPosition>,
    pub success_steps: usize,
    pub negative_steps_in_success: usize,
    /// #{ĉ_t < 0, trajectory succeeded} / #{steps of successful trajectories}.
    pub share_negative_in_success: f64,
    pub calibration: Calibration,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProgressPosition {
    /// 0-based step position; the last bucket holds every position ≥ `POSITION_CAP`.
    pub position: u32,
    pub success: Option<Curve>,
    pub failure: Option<Curve>,
}

/// Mean ĉ_t and Φ_t of the steps at one position.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Curve {
    pub steps: usize,
    pub mean_progress: f64,
    pub mean_cumulative: f64,
}

/// Σ_t ĉ_t (the estimator's prediction R̂) against the outcome R, over trajectories.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    /// mean (R̂ − R)², the estimator's training loss (SPA Eq. 7).
    pub mse: f64,
    /// Pearson r of R̂ and R; `None` (null) when either is constant.
    pub pearson: Option<f64>,
    pub mean_predicted: f64,
    pub mean_return: f64,
    /// (R̂, R) per trajectory, for the report's calibration plot; one pair per trajectory, so left
    /// out of the JSON.
    #[serde(skip)]
    pub points: Vec<(f64, f64)>,
}

/// One window's progress, trajectory by trajectory, ready to be added in input order.
#[derive(Clone, Debug, Default)]
pub struct ProgressPart {
    incomplete: usize,
    /// Per complete trajectory: its outcome, (bucket, ĉ_t, Φ_t) per step, and (R̂, R).
    trajs: Vec<TrajProgress>,
}

type TrajProgress = (bool, Vec<(usize, f64, f64)>, (f64, f64));

/// A window's part of [`ProgressStats`], when a `progress` column is logged.
pub fn progress_part(batch: &StepBatch) -> Option<ProgressPart> {
    let column = batch.opt_f64s(PROGRESS)?;
    let progress: Vec<f64> = (0..batch.len())
        .map(|r| column.get(r).unwrap_or(0.0))
        .collect();
    let cumulative = potential(batch, &progress);
    let mut part = ProgressPart::default();
    for traj in &batch.trajs {
        if traj.rows.iter().any(|&r| column.get(r as usize).is_none()) {
            part.incomplete += 1;
            continue;
        }
        let steps = traj
            .rows
            .iter()
            .enumerate()
            .map(|(k, &r)| {
                let bucket = (k as u32).min(POSITION_CAP) as usize;
                (bucket, progress[r as usize], cumulative[r as usize])
            })
            .collect();
        let last = traj.rows.last().map_or(0.0, |&r| cumulative[r as usize]);
        part.trajs
            .push((traj.success, steps, (last, traj.episode_return)));
    }
    Some(part)
}

/// [`ProgressStats`] added up part by part, in input order (sums in the order the whole-batch
/// loop makes them).
#[derive(Clone, Debug, Default)]
pub struct ProgressBuilder {
    /// Per position bucket, per side (success, failure): (steps, Σ ĉ, Σ Φ).
    sums: Vec<[(usize, f64, f64); 2]>,
    predicted: Vec<f64>,
    returns: Vec<f64>,
    steps: usize,
    success_steps: usize,
    negative: usize,
    incomplete: usize,
}

impl ProgressBuilder {
    pub fn add(&mut self, part: ProgressPart) {
        self.incomplete += part.incomplete;
        for (success, steps, (predicted, ret)) in part.trajs {
            let side = if success { 0 } else { 1 };
            for (bucket, c, phi) in steps {
                if self.sums.len() <= bucket {
                    self.sums.resize(bucket + 1, [(0, 0.0, 0.0); 2]);
                }
                let cell = &mut self.sums[bucket][side];
                cell.0 += 1;
                cell.1 += c;
                cell.2 += phi;
                self.steps += 1;
                if success {
                    self.success_steps += 1;
                    self.negative += (c < 0.0) as usize;
                }
            }
            self.predicted.push(predicted);
            self.returns.push(ret);
        }
    }

    pub fn finish(self) -> ProgressStats {
        let curve = |(n, c, phi): (usize, f64, f64)| {
            (n > 0).then(|| Curve {
                steps: n,
                mean_progress: c / n as f64,
                mean_cumulative: phi / n as f64,
            })
        };
        let by_position = self
            .sums
            .iter()
            .enumerate()
            .map(|(k, [s, f])| ProgressPosition {
                position: k as u32,
                success: curve(*s),
                failure: curve(*f),
            })
            .collect();
        let (predicted, returns) = (self.predicted, self.returns);
        let errors: Vec<f64> = predicted
            .iter()
            .zip(&returns)
            .map(|(p, r)| (p - r) * (p - r))
            .collect();
        ProgressStats {
            trajectories: predicted.len(),
            steps: self.steps,
            incomplete_trajectories: self.incomplete,
            by_position,
            success_steps: self.success_steps,
            negative_steps_in_success: self.negative,
            share_negative_in_success: self.negative as f64 / self.success_steps.max(1) as f64,
            calibration: Calibration {
                mse: mean(&errors),
                pearson: pearson(&predicted, &returns),
                mean_predicted: mean(&predicted),
                mean_return: mean(&returns),
                points: predicted.into_iter().zip(returns).collect(),
            },
        }
    }
}

/// Progress statistics of a whole batch, when a `progress` column is logged.
pub fn progress_stats(batch: &StepBatch) -> Option<ProgressStats> {
    let mut builder = ProgressBuilder::default();
    builder.add(progress_part(batch)?);
    Some(builder.finish())
}

#[derive(Clone, Debug, Serialize)]
pub struct SegmentStats {
    /// What made the segments (HISR's `segments`): `logged` (the `segment` column), `per_turn`
    /// (asked for, or no `segment` column) or `rule`.
    pub segmenter: hisr::Segments,
    /// Trajectories whose `segment` ids were missing or not contiguous: one segment per turn.
    pub fallback_trajectories: usize,
    pub segments_per_trajectory: LengthStats,
    /// Turns per segment (sizes 1, 2, 3, >3; `pct_steps` counts turns), by trajectory outcome.
    pub turns_per_segment_success: SizeDistribution,
    pub turns_per_segment_failure: SizeDistribution,
    /// Share of reward by segment position, when `segment_reward` is logged.
    pub reward_share: Option<RewardShare>,
}

/// Mean share of a trajectory's Σ_i |r_i| on its first, middle and last segments, over the
/// trajectories with at least two segments and a non-zero reward.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RewardShare {
    pub trajectories: usize,
    /// The logged segment rewards r̂_i.
    pub raw: [f64; 3],
    /// After HISR's modulation with `params` (`paper`: β = 0.3, z(s) summed, L1 norm).
    pub modulated: [f64; 3],
}

/// One window's segments, trajectory by trajectory.
#[derive(Clone, Debug)]
pub struct SegmentPart {
    segmenter: hisr::Segments,
    fallback: usize,
    /// Per trajectory: its outcome and its segments' sizes.
    trajs: Vec<(bool, Vec<usize>)>,
    /// Whether `segment_reward` is logged.
    rewarded: bool,
    /// Per trajectory with shares: (raw, modulated) shares of first, middle and last segments.
    shares: Vec<([f64; 3], [f64; 3])>,
}

/// A window's part of [`SegmentStats`], when a `segment` or `segment_reward` column is logged,
/// with the segments and modulation of HISR's `params` (the method's own segmenter); an error
/// when they cannot segment these logs (`rule` without an `action` column).
pub fn segment_part(
    batch: &StepBatch,
    params: &hisr::Params,
) -> crate::error::Result<Option<SegmentPart>> {
    if !batch.has(crate::schema::columns::SEGMENT)
        && !batch.has(crate::schema::columns::SEGMENT_REWARD)
    {
        return Ok(None);
    }
    let segments = hisr::segmentation(batch, params.segments, &params.rl)?;
    let trajs = batch
        .trajs
        .iter()
        .zip(&segments.ranges)
        .map(|(t, ranges)| (t.success, ranges.iter().map(|r| r.len()).collect()))
        .collect();
    let mut shares_of = Vec::new();
    let rewards = hisr::segment_rewards(batch, &segments);
    if let Some((rewards, _)) = &rewards {
        let (log_z, _) = hisr::log_importance(batch, params.beta, params.z_clip);
        for ((traj, ranges), traj_rewards) in batch.trajs.iter().zip(&segments.ranges).zip(rewards)
        {
            let Some(r_hat) = traj_rewards.iter().copied().collect::<Option<Vec<f64>>>() else {
                continue;
            };
            let log_zs =
                hisr::segment_log_importances(traj, ranges, log_z.as_deref(), params.seg_agg);
            if let (Some(a), Some(b)) = (
                shares(&r_hat),
                shares(&hisr::modulate(&r_hat, &log_zs, params.norm)),
            ) {
                shares_of.push((a, b));
            }
        }
    }
    Ok(Some(SegmentPart {
        segmenter: segments.segmenter,
        fallback: segments.fallback,
        trajs,
        rewarded: rewards.is_some(),
        shares: shares_of,
    }))
}

/// [`SegmentStats`] added up part by part, in input order.
#[derive(Clone, Debug, Default)]
pub struct SegmentBuilder {
    segmenter: Option<hisr::Segments>,
    fallback: usize,
    counts: Counts,
    success: SizeCounts,
    failure: SizeCounts,
    rewarded: bool,
    raw: [RunningSum; 3],
    modulated: [RunningSum; 3],
}

impl SegmentBuilder {
    pub fn add(&mut self, part: SegmentPart) {
        self.segmenter = Some(part.segmenter);
        self.fallback += part.fallback;
        for (success, sizes) in part.trajs {
            self.counts.add(sizes.len());
            let side = if success {
                &mut self.success
            } else {
                &mut self.failure
            };
            sizes.into_iter().for_each(|s| side.add(s));
        }
        self.rewarded |= part.rewarded;
        for (raw, modulated) in part.shares {
            for i in 0..3 {
                self.raw[i].add(raw[i]);
                self.modulated[i].add(modulated[i]);
            }
        }
    }

    pub fn finish(self) -> Option<SegmentStats> {
        Some(SegmentStats {
            segmenter: self.segmenter?,
            fallback_trajectories: self.fallback,
            segments_per_trajectory: self.counts.length_stats(),
            turns_per_segment_success: self.success.finish(),
            turns_per_segment_failure: self.failure.finish(),
            reward_share: self.rewarded.then(|| RewardShare {
                trajectories: self.raw[0].n,
                raw: self.raw.map(|s| s.mean()),
                modulated: self.modulated.map(|s| s.mean()),
            }),
        })
    }
}

/// Segment statistics of a whole batch (see [`segment_part`]).
pub fn segment_stats(
    batch: &StepBatch,
    params: &hisr::Params,
) -> crate::error::Result<Option<SegmentStats>> {
    let Some(part) = segment_part(batch, params)? else {
        return Ok(None);
    };
    let mut builder = SegmentBuilder::default();
    builder.add(part);
    Ok(builder.finish())
}

/// |r_first|, Σ|r_middle|, |r_last| over Σ|r|; `None` for a zero total.
fn shares(rewards: &[f64]) -> Option<[f64; 3]> {
    let total: f64 = rewards.iter().map(|r| r.abs()).sum();
    let (first, rest) = rewards.split_first()?;
    let (last, middle) = rest.split_last()?;
    (total > 0.0).then(|| {
        [
            first.abs() / total,
            middle.iter().map(|r| r.abs()).sum::<f64>() / total,
            last.abs() / total,
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{batch_with_columns, Row};
    use crate::schema::columns::{
        ACTION, HINDSIGHT_LOGPROB, LOGPROB, N_TOKENS, SEGMENT, SEGMENT_REWARD,
    };
    use polars::prelude::Column;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b}");
    }

    #[test]
    fn progress_by_position_negative_share_and_calibration() {
        // s: success (R = 1), ĉ = [0.2, −0.1, 0.7], Φ = [0.2, 0.1, 0.8];
        // f: failure (R = 0), ĉ = [0.1, 0.3], Φ = [0.1, 0.4];
        // u: success (R = 1), ĉ = [0.5, 0.6], Φ = [0.5, 1.1];
        // x: failure, a step without ĉ: left out.
        let rows: [Row; 9] = [
            ("g", "s", 0, "o", 0.0, true),
            ("g", "s", 1, "o", 0.0, true),
            ("g", "s", 2, "o", 1.0, true),
            ("g", "f", 0, "o", 0.0, true),
            ("g", "f", 1, "o", 0.0, true),
            ("g", "u", 0, "o", 0.0, true),
            ("g", "u", 1, "o", 1.0, true),
            ("g", "x", 0, "o", 0.0, true),
            ("g", "x", 1, "o", 0.0, true),
        ];
        let c = [
            Some(0.2),
            Some(-0.1),
            Some(0.7),
            Some(0.1),
            Some(0.3),
            Some(0.5),
            Some(0.6),
            Some(9.0),
            None,
        ];
        let p = progress_stats(&batch_with_columns(
            &rows,
            vec![Column::new(PROGRESS.into(), c)],
        ))
        .unwrap();
        assert_eq!(
            (p.trajectories, p.steps, p.incomplete_trajectories),
            (3, 7, 1)
        );
        // Position 0: success ĉ (0.2 + 0.5)/2 = 0.35, Φ 0.35; failure ĉ = Φ = 0.1.
        // Position 1: success ĉ (−0.1 + 0.6)/2 = 0.25, Φ (0.1 + 1.1)/2 = 0.6; failure ĉ 0.3, Φ 0.4.
        // Position 2: success ĉ 0.7, Φ 0.8; no failure.
        let expected = [
            (Some((2, 0.35, 0.35)), Some((1, 0.1, 0.1))),
            (Some((2, 0.25, 0.6)), Some((1, 0.3, 0.4))),
            (Some((1, 0.7, 0.8)), None),
        ];
        assert_eq!(p.by_position.len(), 3);
        for (got, (s, f)) in p.by_position.iter().zip(expected) {
            for (curve, want) in [(&got.success, s), (&got.failure, f)] {
                match (curve, want) {
                    (Some(c), Some((n, m, phi))) => {
                        assert_eq!(c.steps, n);
                        close(c.mean_progress, m, 1e-12);
                        close(c.mean_cumulative, phi, 1e-12);
                    }
                    (None, None) => {}
                    other => panic!("position {}: {other:?}", got.position),
                }
            }
        }
        // One negative step (s, t = 1) among the 5 steps of successful trajectories.
        assert_eq!((p.negative_steps_in_success, p.success_steps), (1, 5));
        close(p.share_negative_in_success, 0.2, 1e-12);
        // R̂ = [0.8, 0.4, 1.1], R = [1, 0, 1]: MSE (0.04 + 0.16 + 0.01)/3 = 0.07; Pearson:
        // S_xy = 0.366667, S_xx = 0.246667, S_yy = 0.666667 → r = 0.366667/√(0.164444) = 0.904194.
        close(p.calibration.mse, 0.07, 1e-12);
        close(p.calibration.pearson.unwrap(), 0.904194, 1e-6);
        close(p.calibration.mean_predicted, 2.3 / 3.0, 1e-12);
        close(p.calibration.mean_return, 2.0 / 3.0, 1e-12);
        let mut points = p.calibration.points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(points.len(), 3);
        for ((got_p, got_r), (want_p, want_r)) in
            points.into_iter().zip([(0.4, 0.0), (0.8, 1.0), (1.1, 1.0)])
        {
            close(got_p, want_p, 1e-12);
            assert_eq!(got_r, want_r);
        }
    }

    #[test]
    fn vector_a9_t_spa_1_estimator_loss() {
        // spec-spa-hisr.md A9, T-SPA-1: Σc = 0.95 against R = 1 gives the loss (0.95 − 1)² = 0.0025.
        let rows: [Row; 4] = [
            ("g", "a", 1, "o", 0.0, true),
            ("g", "a", 2, "o", 0.0, true),
            ("g", "a", 3, "o", 0.0, false),
            ("g", "a", 4, "o", 1.0, true),
        ];
        let p = progress_stats(&batch_with_columns(
            &rows,
            vec![Column::new(PROGRESS.into(), [0.05, 0.20, -0.10, 0.80])],
        ))
        .unwrap();
        close(p.calibration.mse, 0.0025, 1e-12);
        assert_eq!(p.calibration.pearson, None);
    }

    #[test]
    fn segments_turns_and_reward_share_before_and_after_modulation() {
        // s: success, 5 turns, segments [0,0,1,2,2] (sizes 2, 1, 2), r̂ = [0.1, 0.2, 0.7], z per turn
        //    [2, 2, 1, 1, 1] → z(s) = [4, 1, 2] → products [0.4, 0.2, 1.4] → L1 [0.2, 0.1, 0.7].
        // f: failure, 3 turns, segments [0,1,1] (sizes 1, 2), r̂ = [−0.1, 0.3], z ≡ 1 → z(s) = [1, 2]
        //    → products [−0.1, 0.6] → shares |·|/0.7 = [1/7, 6/7]; raw shares [0.25, 0.75].
        // o: success, 2 turns in one segment (size 2): counted in sizes, not in reward shares.
        let rows: [Row; 10] = [
            ("g", "s", 0, "o", 0.0, true),
            ("g", "s", 1, "o", 0.0, true),
            ("g", "s", 2, "o", 0.0, true),
            ("g", "s", 3, "o", 0.0, true),
            ("g", "s", 4, "o", 1.0, true),
            ("g", "f", 0, "o", 0.0, true),
            ("g", "f", 1, "o", 0.0, true),
            ("g", "f", 2, "o", 0.0, true),
            ("g", "o", 0, "o", 0.0, true),
            ("g", "o", 1, "o", 1.0, true),
        ];
        // z = 2 needs (lp_hind − lp_pol)/(β·n) = ln 2 with β = 0.3, n = 1.
        let two = 0.3 * 2f64.ln();
        let b = batch_with_columns(
            &rows,
            vec![
                Column::new(SEGMENT.into(), [0i64, 0, 1, 2, 2, 0, 1, 1, 7, 7]),
                Column::new(
                    SEGMENT_REWARD.into(),
                    [0.1, 0.1, 0.2, 0.7, 0.7, -0.1, 0.3, 0.3, 1.0, 1.0],
                ),
                Column::new(LOGPROB.into(), [0.0; 10]),
                Column::new(
                    HINDSIGHT_LOGPROB.into(),
                    [two, two, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                ),
                Column::new(N_TOKENS.into(), [1i64; 10]),
            ],
        );
        let s = segment_stats(&b, &hisr::Params::paper()).unwrap().unwrap();
        assert_eq!(s.segmenter, hisr::Segments::Logged);
        assert_eq!(s.fallback_trajectories, 0);
        // Segments per trajectory [3, 2, 1]: mean 2, median 2, max 3.
        assert_eq!(
            (
                s.segments_per_trajectory.trajectories,
                s.segments_per_trajectory.max
            ),
            (3, 3)
        );
        close(s.segments_per_trajectory.mean, 2.0, 1e-12);
        close(s.segments_per_trajectory.median, 2.0, 1e-12);
        // Successful sizes [2, 1, 2, 2]: 25% / 75% of segments, 1/7 and 6/7 of turns; failed [1, 2].
        let ok = &s.turns_per_segment_success;
        assert_eq!((ok.clusters, ok.steps), (4, 7));
        close(ok.pct_clusters[0], 25.0, 1e-9);
        close(ok.pct_clusters[1], 75.0, 1e-9);
        close(ok.pct_steps[1], 600.0 / 7.0, 1e-9);
        close(s.turns_per_segment_failure.pct_clusters[0], 50.0, 1e-9);
        // Raw: first (0.1 + 0.25)/2 = 0.175, middle (0.2 + 0)/2 = 0.1, last (0.7 + 0.75)/2 = 0.725.
        // Modulated: first (0.2 + 1/7)/2 = 0.171429, middle 0.1/2 = 0.05, last (0.7 + 6/7)/2 = 0.778571.
        let share = s.reward_share.unwrap();
        assert_eq!(share.trajectories, 2);
        for (got, want) in share.raw.iter().zip([0.175, 0.1, 0.725]) {
            close(*got, want, 1e-12);
        }
        for (got, want) in share.modulated.iter().zip([0.171429, 0.05, 0.778571]) {
            close(*got, want, 1e-6);
        }
    }

    #[test]
    fn segments_come_from_the_methods_segmenter() {
        // One trajectory, actions go / take ✓ / go / put ✓ / look: `rule` closes after the take and
        // the put and leaves the look as the last segment ([2, 2, 1] turns); the default `logged`
        // without a `segment` column counts one segment per turn; `rule` without `action` is an error.
        let rows: [Row; 5] = [
            ("g", "a", 0, "o", 0.0, true),
            ("g", "a", 1, "o", 0.0, true),
            ("g", "a", 2, "o", 0.0, true),
            ("g", "a", 3, "o", 0.0, true),
            ("g", "a", 4, "o", 1.0, true),
        ];
        let actions = [
            "go to countertop 1",
            "take apple 1 from countertop 1",
            "go to fridge 1",
            "put apple 1 in/on fridge 1",
            "look",
        ];
        let b = batch_with_columns(
            &rows,
            vec![
                Column::new(ACTION.into(), actions),
                Column::new(SEGMENT_REWARD.into(), [0.5; 5]),
            ],
        );
        let rule = hisr::Params {
            segments: hisr::Segments::Rule,
            ..hisr::Params::paper()
        };
        let s = segment_stats(&b, &rule).unwrap().unwrap();
        assert_eq!(s.segmenter, hisr::Segments::Rule);
        assert_eq!(s.segments_per_trajectory.max, 3);
        close(
            s.turns_per_segment_success.pct_clusters[1],
            200.0 / 3.0,
            1e-9,
        );
        let s = segment_stats(&b, &hisr::Params::paper()).unwrap().unwrap();
        assert_eq!(s.segmenter, hisr::Segments::PerTurn);
        assert_eq!(s.segments_per_trajectory.max, 5);
        let bare = batch_with_columns(&rows, vec![Column::new(SEGMENT_REWARD.into(), [0.5; 5])]);
        assert!(segment_stats(&bare, &rule).is_err());
    }

    #[test]
    fn nothing_without_the_columns() {
        let b = batch_with_columns(&[("g", "a", 0, "o", 1.0, true)], vec![]);
        assert!(progress_stats(&b).is_none());
        assert!(segment_stats(&b, &hisr::Params::paper()).unwrap().is_none());
        // `segment` alone: sizes, no reward shares.
        let b = batch_with_columns(
            &[("g", "a", 0, "o", 0.0, true), ("g", "a", 1, "o", 1.0, true)],
            vec![Column::new(SEGMENT.into(), [3i64, 3])],
        );
        let s = segment_stats(&b, &hisr::Params::paper()).unwrap().unwrap();
        assert!(s.reward_share.is_none());
        assert_eq!(s.turns_per_segment_success.pct_clusters[1], 100.0);
    }
}
