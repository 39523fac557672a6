//! RMSNorm over the rows of x `[N, H]`:
//!
//! y = w ⊙ x · r,  r = 1/√(mean(x²) + ε)
//!
//! dx = r (w ⊙ dy) − x r³ Σ(w ⊙ dy ⊙ x)/H,  dw = Σ_rows dy ⊙ x r (only when w trains).
//! The backward keeps x (and w), and recomputes each row's r; the composed ops keep x², its
//! mean, the root, the normalised rows and the product.

use super::attach::{attach, attach_all};
use super::cpu::{tensor, with_f32s};
use candle_core::{DType, Result, Tensor, D};
use rayon::prelude::*;

/// Rows per task of the weight's gradient (a sum over rows).
const ROWS: usize = 64;

/// RMSNorm of the rows of `x` `[N, H]` with weight `w` `[H]`, in f32 for half-precision
/// inputs as `candle_nn::RmsNorm::forward_diff` computes it.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    if !super::fusable(&[x, w]) {
        return composed(x, w, eps);
    }
    let h = w.dims1()?;
    let eps = eps as f32;
    let y = with_f32s([x, w], |[x, w]| {
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(h).zip(x.par_chunks(h)).for_each(|(y, x)| {
            let r = inverse_rms(x, eps);
            for ((y, x), w) in y.iter_mut().zip(x).zip(w) {
                *y = w * x * r;
            }
        });
        Ok(y)
    })?;
    let y = tensor(y, x.shape())?;
    attach_all(&[x, w], y, move |xs, _, grad| {
        let &[x, w] = xs else {
            candle_core::bail!("rms_norm: two inputs expected");
        };
        let trains = w.track_op();
        let (dx, dw) = with_f32s([x, w, grad], |[xs, ws, g]| {
            Ok((
                input_grad(xs, ws, g, eps),
                trains.then(|| w_grad(xs, g, h, eps)),
            ))
        })?;
        let dw = match dw {
            Some(dw) => super::gradient(w, dw)?,
            None => None,
        };
        Ok(vec![super::gradient(x, dx)?, dw])
    })
}

/// [`rms_norm`] from candle's ops; a `w` off the graph enters through [`attach`], so that no
/// gradient of it is computed.
pub fn composed(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let dtype = x.dtype();
    let internal = match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    let xf = x.to_dtype(internal)?;
    let mean_sq = xf.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = xf
        .broadcast_div(&(mean_sq + eps)?.sqrt()?)?
        .to_dtype(dtype)?;
    if w.track_op() {
        normed.broadcast_mul(&w.to_dtype(dtype)?)
    } else {
        let y = normed.detach().broadcast_mul(w)?;
        let w = w.clone();
        attach(&normed, y, move |_, _, grad| grad.broadcast_mul(&w))
    }
}

/// r = 1/√(mean(x²) + ε) of one row.
fn inverse_rms(x: &[f32], eps: f32) -> f32 {
    let mean = x.iter().map(|v| v * v).sum::<f32>() / x.len().max(1) as f32;
    1.0 / (mean + eps).sqrt()
}

/// dx = r (w ⊙ dy) − x r³ Σ(w ⊙ dy ⊙ x)/H, row by row.
fn input_grad(x: &[f32], w: &[f32], g: &[f32], eps: f32) -> Vec<f32> {
    let h = w.len().max(1);
    let mut dx = vec![0f32; x.len()];
    dx.par_chunks_mut(h)
        .zip(x.par_chunks(h).zip(g.par_chunks(h)))
        .for_each(|(dx, (x, g))| {
            let r = inverse_rms(x, eps);
            let dot: f32 = x.iter().zip(g).zip(w).map(|((x, g), w)| x * g * w).sum();
            let c = r * r * r * dot / h as f32;
            for (((dx, x), g), w) in dx.iter_mut().zip(x).zip(g).zip(w) {
                *dx = r * w * g - c * x;
            }
        });
    dx
}

/// dw = Σ_rows dy ⊙ x r.
fn w_grad(x: &[f32], g: &[f32], h: usize, eps: f32) -> Vec<f32> {
    if h == 0 {
        return Vec::new();
    }
    x.par_chunks(h * ROWS)
        .zip(g.par_chunks(h * ROWS))
        .map(|(x, g)| {
            let mut dw = vec![0f32; h];
            for (x, g) in x.chunks(h).zip(g.chunks(h)) {
                let r = inverse_rms(x, eps);
                for ((dw, x), g) in dw.iter_mut().zip(x).zip(g) {
                    *dw += g * x * r;
                }
            }
            dw
        })
        .reduce(
            || vec![0f32; h],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
                a
            },
        )
}

#[cfg(test)]
mod tests {
    use super::super::testing::{check, random};
    use super::*;

    #[test]
    fn fused_rms_norm_matches_the_composed_ops() {
        let x = random(&[130, 24], 2.0, 1);
        let w = random(&[24], 1.0, 2);
        let f = |xs: &[Tensor]| rms_norm(&xs[0], &xs[1], 1e-5);
        let c = |xs: &[Tensor]| composed(&xs[0], &xs[1], 1e-5);
        check(&[x.clone(), w.clone()], &[0, 1], f, c);
        // A frozen weight (LoRA): only the input's gradient.
        check(&[x, w], &[0], f, c);
    }
}
