//! Fused ops with hand-written backward passes, so that a training step keeps only what each
//! gradient needs and runs as few passes over memory as it can: attention block by block with an
//! online softmax ([`attention`]), RMSNorm ([`rms_norm`]), SwiGLU ([`swiglu`]) and rotary
//! embeddings ([`rope`]).
//!
//! Each runs its own kernel on the CPU in f32, parallel over rows or heads, and enters the
//! autograd graph through [`attach`]; elsewhere (CUDA, half precision) it is the composition of
//! candle ops it replaces, which is also what the tests check it against.

pub mod attach;
pub mod attention;
mod cpu;
pub mod rms_norm;
pub mod rope;
pub mod swiglu;
#[cfg(test)]
mod testing;

use candle_core::{DType, Result, Tensor};

/// Whether the fused kernels run on `ts`: f32 tensors on the CPU.
fn fusable(ts: &[&Tensor]) -> bool {
    ts.iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
}

/// The gradient of `x` from its computed elements, or `None` when `x` is off the graph.
fn gradient(x: &Tensor, g: Vec<f32>) -> Result<Option<Tensor>> {
    if x.track_op() {
        cpu::tensor(g, x.shape()).map(Some)
    } else {
        Ok(None)
    }
}
