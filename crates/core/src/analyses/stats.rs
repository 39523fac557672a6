//! Small descriptive statistics: distributions, quantiles, rank correlations.

use serde::Serialize;

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
    fn quantiles_interpolate_like_numpy() {
        // np.quantile([1, 2, 3, 4], 0.25) = 1.75
        assert!((quantile(&[1.0, 2.0, 3.0, 4.0], 0.25) - 1.75).abs() < 1e-12);
    }
}
