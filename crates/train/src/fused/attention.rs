//! Causal grouped-query attention, block by block with an online softmax (FlashAttention-2,
//! Dao 2023), on the CPU in f32:
//!
//! o_i = Σ_{j≤i} p_ij v_j,  p_ij = e^{s_ij − L_i},  s_ij = q_i·k_j / √d,  L_i = ln Σ_{j≤i} e^{s_ij}
//!
//! query head h reading key/value head ⌊h / (H/KV)⌋ in place (no repeated copies). Forward: for
//! each block of query rows the key blocks up to the diagonal stream through a running row
//! maximum m and sum l (o ← o·e^{m−m'} + e^{s−m'} v, l ← l·e^{m−m'} + Σ e^{s−m'}), so that only
//! one block of scores exists at a time. The backward keeps q, k, v, o and the row statistics L
//! (`[B, H, T]`: O(T) per head, where the composed ops keep O(T²) scores and probabilities) and
//! recomputes each block's p: with D_i = do_i·o_i, dv_j = Σ_i p_ij do_i,
//! ds_ij = p_ij (do_i·v_j − D_i), dq_i = Σ_j ds_ij k_j / √d, dk_j = Σ_i ds_ij q_i / √d (summed
//! over the query heads that share the key head).
//!
//! Elsewhere (a GPU, half precision) [`composed`] runs: candle's matmuls with the probabilities'
//! hand-written softmax backward, keys and values repeated per query head.

use super::attach::{attach, attach_all};
use super::cpu::{matmul, tensor, with_f32s, Mat};
use candle_core::{DType, Result, Tensor, D};
use candle_nn::ops;
use rayon::prelude::*;

/// Rows of queries and of keys per block.
const BLOCK: usize = 64;

/// Causal attention of `q` `[B, T, H, d]` over `k`, `v` `[B, T, KV, d]` (H a multiple of KV):
/// `[B, T, H, d]`.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    if !super::fusable(&[q, k, v]) {
        return composed(q, k, v);
    }
    let n = Dims::of(q, k, v)?;
    let (o, lse) = with_f32s([q, k, v], |[q, k, v]| forward(q, k, v, &n))?;
    let out = tensor(o, q.shape())?;
    attach_all(&[q, k, v], out, move |xs, o, grad| {
        let &[q, k, v] = xs else {
            candle_core::bail!("attention: three inputs expected");
        };
        let (dq, dk, dv) = with_f32s([q, k, v, o, grad], |[q, k, v, o, g]| {
            backward(q, k, v, o, g, &lse, &n)
        })?;
        Ok(vec![
            super::gradient(q, dq)?,
            super::gradient(k, dk)?,
            super::gradient(v, dv)?,
        ])
    })
}

/// [`attention`] from candle's ops: `[B, H, T, T]` scores and probabilities, keys and values
/// repeated for every query head.
pub fn composed(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    let n = Dims::of(q, k, v)?;
    let heads = |x: &Tensor| x.transpose(1, 2)?.contiguous();
    let (q, k, v) = (heads(q)?, heads(k)?, heads(v)?);
    let k = repeat_kv(k, n.h / n.kv)?;
    let v = repeat_kv(v, n.h / n.kv)?;
    let probs = probabilities(&q.matmul(&k.t()?.contiguous()?)?, &n)?;
    probs.matmul(&v)?.transpose(1, 2)?.contiguous()
}

/// softmax(s/√d + causal mask) over the last dimension of the scores s = q kᵀ `[B, H, T, T]`,
/// computed off the graph and attached with the backward of the output alone,
/// ∂s = y ⊙ (∂y − Σ ∂y ⊙ y) / √d: the graph keeps s and y, not the four other `[B, H, T, T]`
/// tensors of the composed ops.
fn probabilities(scores: &Tensor, n: &Dims) -> Result<Tensor> {
    let t = n.t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    let mask = Tensor::from_vec(mask, (1, 1, t, t), scores.device())?.to_dtype(scores.dtype())?;
    let scale = 1.0 / (n.d as f64).sqrt();
    let masked = (scores.detach() * scale)?.broadcast_add(&mask)?;
    let probs = ops::softmax(&masked, D::Minus1)?;
    attach(scores, probs, move |_, y, grad| {
        let dot = (grad * y)?.sum_keepdim(D::Minus1)?;
        (grad.broadcast_sub(&dot)? * y)? * scale
    })
}

/// `[B, kv, T, d]` → `[B, kv·n, T, d]`, each key/value head serving `n` query heads in turn, as
/// `repeat_kv` in transformers.
fn repeat_kv(x: Tensor, n: usize) -> Result<Tensor> {
    if n == 1 {
        return Ok(x);
    }
    let (b, kv, t, d) = x.dims4()?;
    Tensor::cat(&vec![&x; n], 2)?.reshape((b, kv * n, t, d))
}

/// The sizes, and where row t of a head starts in the `[B, T, heads, d]` layouts.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    t: usize,
    h: usize,
    kv: usize,
    d: usize,
}

impl Dims {
    fn of(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Self> {
        let (b, t, h, d) = q.dims4()?;
        let (kb, kt, kv, kd) = k.dims4()?;
        if (kb, kt, kd) != (b, t, d) || v.dims() != k.dims() || kv == 0 || h % kv != 0 {
            candle_core::bail!(
                "attention: q {:?}, k {:?}, v {:?} (expected [B, T, H, d] and [B, T, KV, d], KV dividing H)",
                q.dims(),
                k.dims(),
                v.dims()
            );
        }
        if q.dtype() != DType::F32 && super::fusable(&[q]) {
            candle_core::bail!("attention: f32 expected");
        }
        Ok(Dims { b, t, h, kv, d })
    }

    fn q_row(&self, b: usize, h: usize, t: usize) -> usize {
        ((b * self.t + t) * self.h + h) * self.d
    }

    fn kv_row(&self, b: usize, g: usize, t: usize) -> usize {
        ((b * self.t + t) * self.kv + g) * self.d
    }

    fn scale(&self) -> f32 {
        1.0 / (self.d as f32).sqrt()
    }
}

/// o `[B, T, H, d]` and L `[B, H, T]`.
fn forward(q: &[f32], k: &[f32], v: &[f32], n: &Dims) -> Result<(Vec<f32>, Vec<f32>)> {
    let heads = (0..n.b * n.h)
        .into_par_iter()
        .map(|bh| head_forward(q, k, v, n, bh / n.h, bh % n.h))
        .collect::<Result<Vec<_>>>()?;
    let mut o = vec![0f32; n.b * n.t * n.h * n.d];
    let mut lse = Vec::with_capacity(n.b * n.h * n.t);
    for (bh, (oh, lh)) in heads.into_iter().enumerate() {
        scatter(&mut o, &oh, n.d, |t| n.q_row(bh / n.h, bh % n.h, t))?;
        lse.extend(lh);
    }
    Ok((o, lse))
}

/// One head's o `[T, d]` and L `[T]`.
fn head_forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n: &Dims,
    b: usize,
    h: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let (t, d) = (n.t, n.d);
    let g = h / (n.h / n.kv);
    let (qs, ks) = (n.h * d, n.kv * d);
    let (q0, k0) = (n.q_row(b, h, 0), n.kv_row(b, g, 0));
    let mut o = vec![0f32; t * d];
    let mut lse = vec![0f32; t];
    let mut s = vec![0f32; BLOCK * BLOCK];
    for (i0, (acc, lse)) in o
        .chunks_mut(BLOCK * d)
        .zip(lse.chunks_mut(BLOCK))
        .enumerate()
        .map(|(i, c)| (i * BLOCK, c))
    {
        let br = lse.len();
        let qi = Mat::rows(q, q0 + i0 * qs, qs)?;
        let mut m = [f32::NEG_INFINITY; BLOCK];
        let mut l = [0f32; BLOCK];
        for j0 in (0..i0 + br).step_by(BLOCK) {
            let bc = BLOCK.min(i0 + br - j0);
            let kj = Mat::rows(k, k0 + j0 * ks, ks)?;
            matmul(&mut s, BLOCK, (br, bc, d), qi, kj.t(), n.scale(), false)?;
            for (r, (row, (m, l))) in s
                .chunks_mut(BLOCK)
                .zip(m.iter_mut().zip(l.iter_mut()))
                .take(br)
                .enumerate()
            {
                let visible = (i0 + r + 1).saturating_sub(j0).min(bc);
                let (seen, hidden) = row.split_at_mut(visible);
                hidden.iter_mut().for_each(|x| *x = 0.0);
                if seen.is_empty() {
                    continue;
                }
                let top = seen.iter().fold(*m, |a, &x| a.max(x));
                let rescale = (*m - top).exp();
                let mut sum = 0.0;
                for x in seen.iter_mut() {
                    *x = (*x - top).exp();
                    sum += *x;
                }
                *l = *l * rescale + sum;
                *m = top;
                if rescale != 1.0 {
                    acc.chunks_mut(d)
                        .nth(r)
                        .into_iter()
                        .flatten()
                        .for_each(|x| *x *= rescale);
                }
            }
            let vj = Mat::rows(v, k0 + j0 * ks, ks)?;
            matmul(acc, d, (br, d, bc), Mat::rows(&s, 0, BLOCK)?, vj, 1.0, true)?;
        }
        for ((row, out), (m, l)) in acc.chunks_mut(d).zip(lse.iter_mut()).zip(m.iter().zip(&l)) {
            row.iter_mut().for_each(|x| *x /= l);
            *out = m + l.ln();
        }
    }
    Ok((o, lse))
}

/// dq `[B, T, H, d]`, dk and dv `[B, T, KV, d]`.
fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &[f32],
    go: &[f32],
    lse: &[f32],
    n: &Dims,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let groups = (0..n.b * n.kv)
        .into_par_iter()
        .map(|bg| group_backward(&[q, k, v, o, go], lse, n, bg / n.kv, bg % n.kv))
        .collect::<Result<Vec<_>>>()?;
    let per = n.h / n.kv;
    let mut dq = vec![0f32; q.len()];
    let mut dk = vec![0f32; k.len()];
    let mut dv = vec![0f32; v.len()];
    for (bg, (dqs, dkg, dvg)) in groups.into_iter().enumerate() {
        let (b, g) = (bg / n.kv, bg % n.kv);
        for (i, dqh) in dqs.iter().enumerate() {
            scatter(&mut dq, dqh, n.d, |t| n.q_row(b, g * per + i, t))?;
        }
        scatter(&mut dk, &dkg, n.d, |t| n.kv_row(b, g, t))?;
        scatter(&mut dv, &dvg, n.d, |t| n.kv_row(b, g, t))?;
    }
    Ok((dq, dk, dv))
}

type GroupGrads = (Vec<Vec<f32>>, Vec<f32>, Vec<f32>);

/// The dq `[T, d]` of each query head of key/value head `g`, and its dk and dv `[T, d]`.
fn group_backward(
    &[q, k, v, o, go]: &[&[f32]; 5],
    lse: &[f32],
    n: &Dims,
    b: usize,
    g: usize,
) -> Result<GroupGrads> {
    let (t, d) = (n.t, n.d);
    let per = n.h / n.kv;
    let (qs, ks) = (n.h * d, n.kv * d);
    let k0 = n.kv_row(b, g, 0);
    let mut dk = vec![0f32; t * d];
    let mut dv = vec![0f32; t * d];
    let mut p = vec![0f32; BLOCK * BLOCK];
    let mut dp = vec![0f32; BLOCK * BLOCK];
    let mut dqs = Vec::with_capacity(per);
    for h in g * per..(g + 1) * per {
        let q0 = n.q_row(b, h, 0);
        let Some(lse) = lse.get((b * n.h + h) * t..(b * n.h + h + 1) * t) else {
            candle_core::bail!("attention: row statistics missing");
        };
        let mut dsum = vec![0f32; t];
        for (i, di) in dsum.iter_mut().enumerate() {
            let at = q0 + i * qs;
            let (Some(a), Some(b)) = (go.get(at..at + d), o.get(at..at + d)) else {
                candle_core::bail!("attention: output row {i} out of bounds");
            };
            *di = a.iter().zip(b).map(|(x, y)| x * y).sum();
        }
        let mut dq = vec![0f32; t * d];
        for j0 in (0..t).step_by(BLOCK) {
            let bc = BLOCK.min(t - j0);
            let kj = Mat::rows(k, k0 + j0 * ks, ks)?;
            let vj = Mat::rows(v, k0 + j0 * ks, ks)?;
            for i0 in (j0..t).step_by(BLOCK) {
                let br = BLOCK.min(t - i0);
                let qi = Mat::rows(q, q0 + i0 * qs, qs)?;
                let doi = Mat::rows(go, q0 + i0 * qs, qs)?;
                matmul(&mut p, BLOCK, (br, bc, d), qi, kj.t(), n.scale(), false)?;
                matmul(&mut dp, BLOCK, (br, bc, d), doi, vj.t(), 1.0, false)?;
                for (r, (row, l)) in p.chunks_mut(BLOCK).zip(&lse[i0..]).take(br).enumerate() {
                    let visible = (i0 + r + 1 - j0).min(bc);
                    let (seen, hidden) = row.split_at_mut(visible);
                    hidden.iter_mut().for_each(|x| *x = 0.0);
                    seen.iter_mut().for_each(|x| *x = (*x - l).exp());
                }
                // dv_j += pᵀ do_i, before p turns into ds.
                let pm = Mat::rows(&p, 0, BLOCK)?;
                matmul(&mut dv[j0 * d..], d, (bc, d, br), pm.t(), doi, 1.0, true)?;
                for ((row, dprow), di) in p
                    .chunks_mut(BLOCK)
                    .zip(dp.chunks(BLOCK))
                    .zip(&dsum[i0..])
                    .take(br)
                {
                    for (x, &y) in row.iter_mut().zip(dprow).take(bc) {
                        *x *= y - di;
                    }
                }
                let ds = Mat::rows(&p, 0, BLOCK)?;
                matmul(&mut dq[i0 * d..], d, (br, d, bc), ds, kj, n.scale(), true)?;
                matmul(
                    &mut dk[j0 * d..],
                    d,
                    (bc, d, br),
                    ds.t(),
                    qi,
                    n.scale(),
                    true,
                )?;
            }
        }
        dqs.push(dq);
    }
    Ok((dqs, dk, dv))
}

/// Copies the rows of `src` (each `d` long) to `dst` from element `at(t)` for row t.
fn scatter(dst: &mut [f32], src: &[f32], d: usize, at: impl Fn(usize) -> usize) -> Result<()> {
    for (t, row) in src.chunks(d).enumerate() {
        let start = at(t);
        match dst.get_mut(start..start + row.len()) {
            Some(out) => out.copy_from_slice(row),
            None => candle_core::bail!("attention: row {t} out of bounds"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{check, random};
    use super::*;

    #[test]
    fn fused_attention_matches_the_composed_ops_over_several_blocks() {
        // T = 70: a full block and a partial one; 4 query heads on 2 key/value heads.
        let q = random(&[2, 70, 4, 8], 2.0, 1);
        let k = random(&[2, 70, 2, 8], 2.0, 2);
        let v = random(&[2, 70, 2, 8], 1.0, 3);
        let f = |xs: &[Tensor]| attention(&xs[0], &xs[1], &xs[2]);
        let c = |xs: &[Tensor]| composed(&xs[0], &xs[1], &xs[2]);
        check(&[q, k, v], &[0, 1, 2], f, c);
    }

    #[test]
    fn fused_attention_without_grouping() {
        let q = random(&[1, 5, 3, 4], 1.0, 4);
        let k = random(&[1, 5, 3, 4], 1.0, 5);
        let v = random(&[1, 5, 3, 4], 1.0, 6);
        let f = |xs: &[Tensor]| attention(&xs[0], &xs[1], &xs[2]);
        let c = |xs: &[Tensor]| composed(&xs[0], &xs[1], &xs[2]);
        check(&[q, k, v], &[0, 1, 2], f, c);
    }
}
