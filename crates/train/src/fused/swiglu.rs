//! SwiGLU's gating, elementwise over the MLP's gate and up projections a, b `[N, I]`:
//!
//! y = silu(a) ⊙ b = a σ(a) b
//!
//! da = dy ⊙ b ⊙ σ(a) (1 + a (1 − σ(a))),  db = dy ⊙ a σ(a). The backward keeps a and b and
//! recomputes σ(a); the composed ops also keep silu(a).

use super::attach::attach_all;
use super::cpu::{tensor, with_f32s};
use candle_core::{Result, Tensor};
use rayon::prelude::*;

/// Elements per task.
const CHUNK: usize = 1 << 14;

/// silu(`a`) ⊙ `b`, for tensors of one shape.
pub fn swiglu(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if !super::fusable(&[a, b]) {
        return composed(a, b);
    }
    if a.shape() != b.shape() {
        candle_core::bail!("swiglu: shapes {:?} and {:?}", a.dims(), b.dims());
    }
    let y = with_f32s([a, b], |[a, b]| {
        let mut y = vec![0f32; a.len()];
        y.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
            .for_each(|(y, (a, b))| {
                for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
                    *y = a * sigmoid(*a) * b;
                }
            });
        Ok(y)
    })?;
    let y = tensor(y, a.shape())?;
    attach_all(&[a, b], y, |xs, _, grad| {
        let &[a, b] = xs else {
            candle_core::bail!("swiglu: two inputs expected");
        };
        let (da, db) = with_f32s([a, b, grad], |[a, b, g]| {
            let mut da = vec![0f32; a.len()];
            let mut db = vec![0f32; a.len()];
            da.par_chunks_mut(CHUNK)
                .zip(db.par_chunks_mut(CHUNK))
                .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
                .zip(g.par_chunks(CHUNK))
                .for_each(|(((da, db), (a, b)), g)| {
                    for ((((da, db), a), b), g) in
                        da.iter_mut().zip(db.iter_mut()).zip(a).zip(b).zip(g)
                    {
                        let s = sigmoid(*a);
                        *da = g * b * s * (1.0 + a * (1.0 - s));
                        *db = g * a * s;
                    }
                });
            Ok((da, db))
        })?;
        Ok(vec![super::gradient(a, da)?, super::gradient(b, db)?])
    })
}

/// [`swiglu`] from candle's ops.
pub fn composed(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.silu()? * b
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{check, random};
    use super::*;

    #[test]
    fn fused_swiglu_matches_the_composed_ops() {
        let a = random(&[70, 300], 4.0, 1);
        let b = random(&[70, 300], 1.0, 2);
        let f = |xs: &[Tensor]| swiglu(&xs[0], &xs[1]);
        let c = |xs: &[Tensor]| composed(&xs[0], &xs[1]);
        check(&[a, b], &[0, 1], f, c);
    }
}
