//! What the CPU kernels of the fused ops share: the f32 elements of a tensor, a tensor from
//! computed elements, and a bounds-checked matrix product on the `gemm`
//! crate's micro-kernels (the ones candle's own matmul runs).

use candle_core::{CpuStorage, Device, Result, Shape, Storage, Tensor};

/// Runs `f` on the f32 elements of each of `ts` (CPU tensors) in row-major order.
pub fn with_f32s<const N: usize, R>(
    ts: [&Tensor; N],
    f: impl FnOnce([&[f32]; N]) -> Result<R>,
) -> Result<R> {
    let owned = ts
        .iter()
        .map(|t| t.contiguous())
        .collect::<Result<Vec<_>>>()?;
    let guards: Vec<_> = owned.iter().map(|t| t.storage_and_layout()).collect();
    let mut slices = Vec::with_capacity(N);
    for (storage, layout) in &guards {
        let start = layout.start_offset();
        let len = layout.shape().elem_count();
        match &**storage {
            Storage::Cpu(CpuStorage::F32(v)) => match v.get(start..start + len) {
                Some(s) => slices.push(s),
                None => candle_core::bail!("fused op: a tensor's layout exceeds its storage"),
            },
            _ => candle_core::bail!("fused op: an f32 tensor on the CPU expected"),
        }
    }
    match <[&[f32]; N]>::try_from(slices) {
        Ok(slices) => f(slices),
        Err(_) => candle_core::bail!("fused op: {N} tensors expected"),
    }
}

/// The CPU tensor of `shape` holding `data`.
pub fn tensor(data: Vec<f32>, shape: impl Into<Shape>) -> Result<Tensor> {
    Tensor::from_vec(data, shape, &Device::Cpu)
}

/// A matrix read from a slice: element (i, j) at `i·rs + j·cs`.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// Row-major rows `stride` apart, from element `offset` of `data`.
    pub fn rows(data: &'a [f32], offset: usize, stride: usize) -> Result<Self> {
        match data.get(offset..) {
            Some(data) => Ok(Mat {
                data,
                rs: stride,
                cs: 1,
            }),
            None => candle_core::bail!("fused op: offset {offset} past {} elements", data.len()),
        }
    }

    /// The transpose.
    pub fn t(self) -> Self {
        Mat {
            data: self.data,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// Whether an m × n matrix fits.
    fn holds(&self, m: usize, n: usize) -> bool {
        m == 0 || n == 0 || (m - 1) * self.rs + (n - 1) * self.cs < self.data.len()
    }
}

/// `dst` (m × n, rows `dst_rs` apart) ← [`dst` +] `alpha` · `a` (m × k) · `b` (k × n), on the
/// calling thread.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    dst: &mut [f32],
    dst_rs: usize,
    (m, n, k): (usize, usize, usize),
    a: Mat,
    b: Mat,
    alpha: f32,
    accumulate: bool,
) -> Result<()> {
    let out = Mat {
        data: dst,
        rs: dst_rs,
        cs: 1,
    };
    if !(out.holds(m, n) && a.holds(m, k) && b.holds(k, n)) {
        candle_core::bail!("fused op: a {m}×{k} · {k}×{n} product out of bounds");
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            for row in dst.chunks_mut(dst_rs).take(m) {
                row.iter_mut().take(n).for_each(|x| *x = 0.0);
            }
        }
        return Ok(());
    }
    // SAFETY: the three extents were checked against their slices above, `dst` is borrowed
    // mutably (no overlap with `a` or `b`), and every stride is a positive element count.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    Ok(())
}
