//! The policy loss: PPO's clipped surrogate over action tokens, an optional KL penalty to the
//! initial model with the low-variance ("k3") estimator, averaged over tokens.
//!
//! Per action token t of a step with advantage A (Schulman et al. 2017, Eq. 7; verl's
//! `compute_policy_loss`):
//!
//! r_t = exp(clamp(log π(t) − log π_old(t), −20, 20))
//! ℓ_t = max(−A·r_t, −A·clip(r_t, 1 − ε, 1 + ε))
//!
//! and, with β > 0, the penalty k3 (Schulman 2020; verl's `kl_penalty(…, "low_var_kl")`):
//!
//! k_t = clamp(exp(log π_ref(t) − log π(t)) − (log π_ref(t) − log π(t)) − 1, −10, 10)
//!
//! The loss is the token-level mean over every action token of the optimizer step, as verl's
//! `loss_agg_mode = "token-mean"`: L = Σ_t (ℓ_t + β·k_t) / N.
//!
//! When only the step's total log-likelihood was logged (`logprob`, a sum over its tokens), the
//! per-token ratio cannot be formed; every token of that step then uses the step's length-
//! normalised ratio, log r = (Σ_t log π(t) − logprob) / |a| (GSPO's sequence ratio), with the
//! same clipping.

use candle_core::{DType, Result, Tensor};

/// verl clamps the log-ratio before `exp` so one wild token cannot overflow.
const LOG_RATIO_LIMIT: f64 = 20.0;
/// verl clamps the k3 estimate per token.
const KL_LIMIT: f64 = 10.0;

/// Per-token clipped surrogate ℓ_t and, as 0/1 f32, whether the clipped branch was taken
/// (verl's `pg_clipfrac` is its mean). All inputs `[N]` f32.
pub fn clipped_surrogate(
    log_ratio: &Tensor,
    advantages: &Tensor,
    clip_eps: f64,
) -> Result<(Tensor, Tensor)> {
    let ratio = log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)?.exp()?;
    let unclipped = (advantages.neg()? * &ratio)?;
    let clipped = (advantages.neg()? * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)?)?;
    let taken = clipped.gt(&unclipped)?.to_dtype(DType::F32)?;
    Ok((unclipped.maximum(&clipped)?, taken))
}

/// k3 = exp(ref − logp) − (ref − logp) − 1 per token: unbiased for KL(π‖π_ref), always ≥ 0.
pub fn low_var_kl(logp: &Tensor, ref_logp: &Tensor) -> Result<Tensor> {
    let d = (ref_logp - logp)?;
    ((d.exp()? - &d)? - 1.0)?.clamp(-KL_LIMIT, KL_LIMIT)
}

/// The mean of `x` over each token's segment (its step), broadcast back to the tokens.
/// `segment[t]` indexes `lengths`, which holds each segment's token count.
pub fn segment_mean(x: &Tensor, segment: &Tensor, lengths: &Tensor) -> Result<Tensor> {
    let sums = lengths.zeros_like()?.index_add(segment, x, 0)?;
    (sums / lengths)?.index_select(segment, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_slice(v, v.len(), &Device::Cpu).unwrap()
    }

    fn close(got: &[f32], expected: &[f64], tol: f64) {
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(expected) {
            assert!(
                (*g as f64 - e).abs() <= tol,
                "got {got:?}, expected {expected:?}"
            );
        }
    }

    #[test]
    fn surrogate_values_gradients_and_clip_indicator() {
        // python3:
        // import math
        // lr = [0.1, -0.5, 0.0, 0.5]; A = [1.0, -1.0, 2.0, 1.0]; eps = 0.2
        // r = [math.exp(x) for x in lr]                      # 1.10517, 0.60653, 1.0, 1.64872
        // l1 = [-a*x for a, x in zip(A, r)]; l2 = [-a*min(max(x, 1-eps), 1+eps) for a, x in zip(A, r)]
        // [max(u, c) for u, c in zip(l1, l2)] → [-1.105171, 0.8, -2.0, -1.2]
        // clipped branch where l2 > l1: [0, 1, 0, 1]
        // d loss / d lr: unclipped branch -A·r, clipped branch 0 → [-1.105171, 0, -2.0, 0]
        let lr = Var::from_tensor(&t(&[0.1, -0.5, 0.0, 0.5])).unwrap();
        let (loss, taken) =
            clipped_surrogate(lr.as_tensor(), &t(&[1.0, -1.0, 2.0, 1.0]), 0.2).unwrap();
        close(
            &loss.to_vec1().unwrap(),
            &[-1.105171, 0.8, -2.0, -1.2],
            1e-5,
        );
        close(&taken.to_vec1().unwrap(), &[0.0, 1.0, 0.0, 1.0], 0.0);
        let grads = loss.sum_all().unwrap().backward().unwrap();
        let g: Vec<f32> = grads.get(lr.as_tensor()).unwrap().to_vec1().unwrap();
        close(&g, &[-1.105171, 0.0, -2.0, 0.0], 1e-5);
    }

    #[test]
    fn low_var_kl_matches_k3() {
        // python3: import math; [math.exp(r - l) - (r - l) - 1 for l, r in [(-1.0, -1.2), (-2.0, -1.0), (-0.3, -0.3)]]
        // → [0.018730753, 0.718281828, 0.0]
        let kl = low_var_kl(&t(&[-1.0, -2.0, -0.3]), &t(&[-1.2, -1.0, -0.3])).unwrap();
        close(
            &kl.to_vec1().unwrap(),
            &[0.018730753, 0.718281828, 0.0],
            1e-6,
        );
    }

    #[test]
    fn segment_mean_averages_within_steps_and_spreads_gradient() {
        // Tokens [-1, -3 | -2, -4, -6]: means -2 and -4; d(Σ output)/dx_t = 1 for every token
        // (each of a segment's n outputs carries 1/n of every token in it).
        let x = Var::from_tensor(&t(&[-1.0, -3.0, -2.0, -4.0, -6.0])).unwrap();
        let seg = Tensor::from_slice(&[0u32, 0, 1, 1, 1], 5, &Device::Cpu).unwrap();
        let m = segment_mean(x.as_tensor(), &seg, &t(&[2.0, 3.0])).unwrap();
        close(&m.to_vec1().unwrap(), &[-2.0, -2.0, -4.0, -4.0, -4.0], 1e-6);
        let g: Vec<f32> = m
            .sum_all()
            .unwrap()
            .backward()
            .unwrap()
            .get(x.as_tensor())
            .unwrap()
            .to_vec1()
            .unwrap();
        close(&g, &[1.0; 5], 1e-6);
    }
}
