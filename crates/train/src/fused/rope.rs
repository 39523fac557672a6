//! Rotary position embedding (Su et al. 2021), the half-split form of Llama and Qwen2 (`rope_slow`
//! in candle, `rotate_half` in transformers), on x `[B, T, heads, d]` at position t:
//!
//! y_i = x_i cos θ_ti − x_{i+d/2} sin θ_ti,  y_{i+d/2} = x_{i+d/2} cos θ_ti + x_i sin θ_ti  (i < d/2)
//!
//! A rotation, so the backward is the rotation by −θ: dx = rope(dy) with sin negated. It keeps
//! nothing but the shared cos and sin `[T, d/2]`; the composed ops keep both halves, their
//! products and the rotated copy.

use super::attach::attach;
use super::cpu::{tensor, with_f32s};
use candle_core::{Result, Tensor, D};
use rayon::prelude::*;

/// `x` `[B, T, heads, d]` rotated by the angles whose cosines and sines are `cos`, `sin` `[T, d/2]`.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    if !super::fusable(&[x, cos, sin]) {
        return composed(x, cos, sin);
    }
    let (_, t, heads, d) = x.dims4()?;
    if cos.dims() != [t, d / 2] || sin.dims() != [t, d / 2] || d % 2 != 0 {
        candle_core::bail!(
            "rope: x {:?} with cos {:?} and sin {:?}",
            x.dims(),
            cos.dims(),
            sin.dims()
        );
    }
    let y = with_f32s([x, cos, sin], |[x, c, s]| {
        Ok(rotate(x, c, s, t, heads * d, 1.0))
    })?;
    let y = tensor(y, x.shape())?;
    let (cos, sin) = (cos.clone(), sin.clone());
    attach(x, y, move |_, _, grad| {
        let dx = with_f32s([grad, &cos, &sin], |[g, c, s]| {
            Ok(rotate(g, c, s, t, heads * d, -1.0))
        })?;
        tensor(dx, grad.shape())
    })
}

/// [`rope`] from candle's ops: x ⊙ cos + rotate_half(x) ⊙ sin.
pub fn composed(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (_, t, _, d) = x.dims4()?;
    let widen = |c: &Tensor| Tensor::cat(&[c, c], D::Minus1)?.reshape((1, t, 1, d));
    let x1 = x.narrow(3, 0, d / 2)?;
    let x2 = x.narrow(3, d / 2, d / 2)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], 3)?;
    x.broadcast_mul(&widen(cos)?)? + rotated.broadcast_mul(&widen(sin)?)?
}

/// `x` rotated by `sign`·θ, a row of `width` = heads·d elements per (batch, position).
fn rotate(x: &[f32], cos: &[f32], sin: &[f32], t: usize, width: usize, sign: f32) -> Vec<f32> {
    let half = cos.len() / t.max(1);
    let mut y = vec![0f32; x.len()];
    if half == 0 || t == 0 {
        return y;
    }
    y.par_chunks_mut(width)
        .zip(x.par_chunks(width))
        .enumerate()
        .for_each(|(row, (y, x))| {
            let at = (row % t) * half;
            let (c, s) = (&cos[at..at + half], &sin[at..at + half]);
            for (y, x) in y.chunks_mut(2 * half).zip(x.chunks(2 * half)) {
                let (y1, y2) = y.split_at_mut(half);
                let (x1, x2) = x.split_at(half);
                for i in 0..half {
                    let (c, s) = (c[i], sign * s[i]);
                    y1[i] = x1[i] * c - x2[i] * s;
                    y2[i] = x2[i] * c + x1[i] * s;
                }
            }
        });
    y
}

#[cfg(test)]
mod tests {
    use super::super::testing::{check, random};
    use super::*;

    #[test]
    fn fused_rope_matches_the_composed_ops() {
        let x = random(&[2, 7, 3, 8], 1.0, 1);
        let angles = random(&[7, 4], 3.0, 2);
        let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
        let f = |xs: &[Tensor]| rope(&xs[0], &xs[1], &xs[2]);
        let c = |xs: &[Tensor]| composed(&xs[0], &xs[1], &xs[2]);
        check(&[x, cos, sin], &[0], f, c);
    }
}
