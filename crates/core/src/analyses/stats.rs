//! Small descriptive statistics: distributions, quantiles, rank correlations, and the exact
//! streaming accumulators that let a summary be added up window by window ([`RunningSum`],
//! [`Counts`], [`SizeCounts`]): each gives the very number the whole-batch formula gives.

use serde::Serialize;
use std::collections::BTreeMap;

/// Σ of floats in the order they come, exactly as `Iterator::sum` adds them (from −0.0), and
/// their count: a mean folded window by window equals the whole-batch mean bit for bit.
#[derive(Clone, Copy, Debug)]
pub struct RunningSum {
    pub sum: f64,
    pub n: usize,
}

impl Default for RunningSum {
    fn default() -> Self {
        RunningSum { sum: -0.0, n: 0 }
    }
}

impl RunningSum {
    pub fn add(&mut self, x: f64) {
        self.sum += x;
        self.n += 1;
    }

    /// [`mean`] of the values added.
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }
}

/// Count, mean, median and max of whole-number lengths (steps per trajectory).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LengthStats {
    pub trajectories: usize,
    pub mean: f64,
    pub median: f64,
    pub max: usize,
}

/// A histogram of whole numbers: [`LengthStats`] without keeping the values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts(pub BTreeMap<usize, usize>);

impl Counts {
    pub fn add(&mut self, value: usize) {
        *self.0.entry(value).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Counts) {
        for (v, n) in &other.0 {
            *self.0.entry(*v).or_default() += n;
        }
    }

    pub fn len(&self) -> usize {
        self.0.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `k`-th smallest value (0-based).
    fn nth(&self, k: usize) -> usize {
        let mut seen = 0;
        for (&v, &n) in &self.0 {
            seen += n;
            if k < seen {
                return v;
            }
        }
        0
    }

    /// What [`mean`], [`median`] and the max give on the values (sums of whole numbers below
    /// 2^53 are exact in any order).
    pub fn length_stats(&self) -> LengthStats {
        let n = self.len();
        let total: usize = self.0.iter().map(|(v, c)| v * c).sum();
        let median = if n == 0 {
            0.0
        } else {
            let pos = 0.5 * (n - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            let (a, b) = (self.nth(lo) as f64, self.nth(hi) as f64);
            a + (b - a) * (pos - lo as f64)
        };
        LengthStats {
            trajectories: n,
            mean: if n == 0 { 0.0 } else { total as f64 / n as f64 },
            median,
            max: self.0.keys().next_back().copied().unwrap_or(0),
        }
    }
}

/// Sizes of exact-anchor clusters (GiGPO's step groups) or segments, bucketed 1 / 2 / 3 / >3.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SizeDistribution {
    pub clusters: usize,
    pub steps: usize,
    pub mean_size: f64,
    /// % of steps in clusters of size 1, 2, 3, >3 (ProxMO Table 2 counts this way).
    pub pct_steps: [f64; 4],
    /// % of clusters of size 1, 2, 3, >3 (verl-agent's `summarize_group_size` counts this way).
    pub pct_clusters: [f64; 4],
}

/// The counts behind a [`SizeDistribution`], added up size by size.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SizeCounts {
    clusters: usize,
    steps: usize,
    by_steps: [usize; 4],
    by_clusters: [usize; 4],
}

impl SizeCounts {
    pub fn add(&mut self, size: usize) {
        let b = size.clamp(1, 4) - 1;
        self.clusters += 1;
        self.steps += size;
        self.by_steps[b] += size;
        self.by_clusters[b] += 1;
    }

    pub fn merge(&mut self, o: &SizeCounts) {
        self.clusters += o.clusters;
        self.steps += o.steps;
        for b in 0..4 {
            self.by_steps[b] += o.by_steps[b];
            self.by_clusters[b] += o.by_clusters[b];
        }
    }

    pub fn finish(&self) -> SizeDistribution {
        let pct = |v: [usize; 4], d: usize| {
            v.map(|x| {
                if d == 0 {
                    0.0
                } else {
                    100.0 * x as f64 / d as f64
                }
            })
        };
        SizeDistribution {
            clusters: self.clusters,
            steps: self.steps,
            mean_size: if self.clusters == 0 {
                0.0
            } else {
                self.steps as f64 / self.clusters as f64
            },
            pct_steps: pct(self.by_steps, self.steps),
            pct_clusters: pct(self.by_clusters, self.clusters),
        }
    }
}

pub fn size_distribution(sizes: impl Iterator<Item = usize>) -> SizeDistribution {
    let mut counts = SizeCounts::default();
    sizes.for_each(|s| counts.add(s));
    counts.finish()
}

/// Mean, std (population), quantiles, and sign shares of a set of values.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Distribution {
    pub n: usize,
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub q05: f64,
    pub q25: f64,
    pub median: f64,
    pub q75: f64,
    pub q95: f64,
    pub max: f64,
    pub share_zero: f64,
    pub share_positive: f64,
    pub share_negative: f64,
}

impl Distribution {
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        if n == 0 {
            return Distribution {
                n: 0,
                mean: 0.0,
                std: 0.0,
                min: 0.0,
                q05: 0.0,
                q25: 0.0,
                median: 0.0,
                q75: 0.0,
                q95: 0.0,
                max: 0.0,
                share_zero: 0.0,
                share_positive: 0.0,
                share_negative: 0.0,
            };
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let share =
            |f: &dyn Fn(f64) -> bool| values.iter().filter(|&&v| f(v)).count() as f64 / n as f64;
        Distribution {
            n,
            mean,
            std: var.sqrt(),
            min: sorted[0],
            q05: quantile(&sorted, 0.05),
            q25: quantile(&sorted, 0.25),
            median: quantile(&sorted, 0.5),
            q75: quantile(&sorted, 0.75),
            q95: quantile(&sorted, 0.95),
            max: sorted[n - 1],
            share_zero: share(&|v| v == 0.0),
            share_positive: share(&|v| v > 0.0),
            share_negative: share(&|v| v < 0.0),
        }
    }
}

/// Linear-interpolated quantile of sorted values (numpy's default).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile(&sorted, 0.5)
}

/// Ranks with ties averaged (1-based), as scipy's `rankdata`.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut out = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = rank;
        }
        i = j + 1;
    }
    out
}

/// Pearson's r; `None` when either side is constant.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let (mx, my) = (mean(x), mean(y));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        None
    } else {
        Some(sxy / (sxx * syy).sqrt())
    }
}

/// Spearman's ρ (Pearson on tie-averaged ranks); `None` when either side is constant.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    pearson(&ranks(x), &ranks(y))
}

/// Kendall's τ-b in O(n log n) (Knight 1966), as scipy's `kendalltau`; `None` when either side is
/// constant.
pub fn kendall_tau_b(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len();
    if n < 2 {
        return None;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]).then(y[a].total_cmp(&y[b])));
    let pairs = |counts: &mut dyn Iterator<Item = u64>| {
        counts.map(|c| c * (c.saturating_sub(1)) / 2).sum::<u64>()
    };
    let runs = |key: &dyn Fn(usize) -> (f64, f64), idx: &[usize]| {
        let mut out = Vec::new();
        let mut i = 0;
        while i < idx.len() {
            let mut j = i + 1;
            while j < idx.len() && key(idx[j]) == key(idx[i]) {
                j += 1;
            }
            out.push((j - i) as u64);
            i = j;
        }
        out
    };
    let n0 = (n as u64) * (n as u64 - 1) / 2;
    let tx = pairs(&mut runs(&|k| (x[k], 0.0), &order).into_iter());
    let txy = pairs(&mut runs(&|k| (x[k], y[k]), &order).into_iter());
    // Count discordant pairs by merge-sorting on y (swaps = discordant).
    let mut ys: Vec<f64> = order.iter().map(|&k| y[k]).collect();
    let swaps = merge_count(&mut ys);
    let mut ys_sorted_idx: Vec<usize> = (0..n).collect();
    ys_sorted_idx.sort_by(|&a, &b| y[a].total_cmp(&y[b]));
    let ty = pairs(&mut runs(&|k| (y[k], 0.0), &ys_sorted_idx).into_iter());
    let concordant_minus_discordant =
        n0 as f64 - tx as f64 - ty as f64 + txy as f64 - 2.0 * swaps as f64;
    let denom = ((n0 - tx) as f64 * (n0 - ty) as f64).sqrt();
    if denom == 0.0 {
        None
    } else {
        Some(concordant_minus_discordant / denom)
    }
}

/// Sorts in place and returns the number of inversions (strictly greater before smaller).
fn merge_count(v: &mut [f64]) -> u64 {
    let n = v.len();
    if n < 2 {
        return 0;
    }
    let mid = n / 2;
    let mut swaps = merge_count(&mut v[..mid]) + merge_count(&mut v[mid..]);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, mid);
    while i < mid && j < n {
        if v[j] < v[i] {
            swaps += (mid - i) as u64;
            merged.push(v[j]);
            j += 1;
        } else {
            merged.push(v[i]);
            i += 1;
        }
    }
    merged.extend_from_slice(&v[i..mid]);
    merged.extend_from_slice(&v[j..n]);
    v.copy_from_slice(&merged);
    swaps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_correlations_match_scipy() {
        // x = [1, 2, 2, 3, 5, 4], y = [2, 1, 3, 3, 6, 5]: Pearson on tie-averaged ranks = 0.8676471;
        // τ-b by brute force over all 15 pairs (C = 12, D = 1, one tie in x, one in y: (C−D)/√((C+D+1)(C+D+1))) = 0.7857143,
        // computed in python3 with itertools.combinations (as scipy.stats.kendalltau's τ-b).
        let x = [1.0, 2.0, 2.0, 3.0, 5.0, 4.0];
        let y = [2.0, 1.0, 3.0, 3.0, 6.0, 5.0];
        assert!(
            (spearman(&x, &y).unwrap() - 0.8676471).abs() < 1e-6,
            "{:?}",
            spearman(&x, &y)
        );
        assert!(
            (kendall_tau_b(&x, &y).unwrap() - 0.7857143).abs() < 1e-6,
            "{:?}",
            kendall_tau_b(&x, &y)
        );
        assert_eq!(spearman(&x, &[1.0; 6]), None);
    }

    #[test]
    fn counts_give_the_whole_list_statistics() {
        // [3, 1, 4, 1, 5, 9, 2, 6]: mean 31/8, sorted [1, 1, 2, 3, 4, 5, 6, 9], median (3 + 4)/2.
        let values = [3usize, 1, 4, 1, 5, 9, 2, 6];
        let mut c = Counts::default();
        values.iter().for_each(|&v| c.add(v));
        let s = c.length_stats();
        assert_eq!((s.trajectories, s.max), (8, 9));
        assert_eq!(s.mean, 31.0 / 8.0);
        assert_eq!(s.median, 3.5);
        let mut odd = Counts::default();
        [7usize, 2, 5].iter().for_each(|&v| odd.add(v));
        assert_eq!(odd.length_stats().median, 5.0);
        assert_eq!(Counts::default().length_stats().median, 0.0);
        // A running sum adds in the order given, like `Iterator::sum` (from −0.0).
        let xs = [0.1, 0.2, 0.3, -0.0];
        let mut r = RunningSum::default();
        xs.iter().for_each(|&x| r.add(x));
        assert_eq!(r.sum.to_bits(), xs.iter().sum::<f64>().to_bits());
        assert_eq!(
            RunningSum::default().sum.to_bits(),
            [0.0f64; 0].iter().sum::<f64>().to_bits()
        );
    }

    #[test]
    fn vector_4_4_cluster_size_diagnostic() {
        // spec-proxmo-gigpo.md §4.4: clusters {4,4,1,2,3,2}: singletons are 1/6 = 16.67% of clusters
        // and 1/16 = 6.25% of steps.
        let d = size_distribution([4, 4, 1, 2, 3, 2].into_iter());
        assert!((d.pct_clusters[0] - 16.6667).abs() < 1e-3);
        assert!((d.pct_steps[0] - 6.25).abs() < 1e-9);
        assert_eq!(d.steps, 16);
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        // np.quantile([1, 2, 3, 4], 0.25) = 1.75
        assert!((quantile(&[1.0, 2.0, 3.0, 4.0], 0.25) - 1.75).abs() < 1e-12);
    }
}
