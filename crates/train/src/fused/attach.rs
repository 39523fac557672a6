//! `out`, computed off the autograd graph, put on the graph as a function of up to three inputs
//! whose backward is a given closure: the one mechanism behind the model's hand-written
//! gradients (frozen weights, the fused ops, checkpointed blocks).
//!
//! candle's backward of `x·Wᵀ` (and of `x ⊙ w`) computes and stores the gradient of both
//! operands, so a frozen weight entering the graph through a plain op would still get a
//! full-size gradient every step. Here it is captured by the backward closure instead, and
//! gradients flow only to the inputs. The forward copies `out` once (a custom op must return
//! fresh storage); when no input is on the graph, `out` is returned as it is.

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Storage,
};
use candle_core::{Result, Tensor};
use std::sync::Mutex;

/// The gradients of the inputs (in their order; `None`: not needed) from the inputs, the output
/// and the output's gradient.
pub trait Backward:
    Fn(&[&Tensor], &Tensor, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static
{
}

impl<F> Backward for F where
    F: Fn(&[&Tensor], &Tensor, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static
{
}

/// `out` on the graph as a function of `x` alone, with backward `grad_x(x, out, grad_out)`.
pub fn attach<F>(x: &Tensor, out: Tensor, grad_x: F) -> Result<Tensor>
where
    F: Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
{
    attach_all(
        &[x],
        out,
        move |xs: &[&Tensor], y: &Tensor, g: &Tensor| match xs {
            [x] => Ok(vec![Some(grad_x(x, y, g)?)]),
            _ => candle_core::bail!("attached op: one input expected"),
        },
    )
}

/// `out` on the graph as a function of `inputs` (one to three), with backward `grads`.
pub fn attach_all<F: Backward>(inputs: &[&Tensor], out: Tensor, grads: F) -> Result<Tensor> {
    if !inputs.iter().any(|x| x.track_op()) {
        return Ok(out);
    }
    let op = Attached {
        out: Mutex::new(Some(out)),
        grads,
    };
    match inputs {
        [a] => a.apply_op1(op),
        [a, b] => a.apply_op2(b, op),
        [a, b, c] => a.apply_op3(b, c, op),
        _ => candle_core::bail!("attached op: one to three inputs, not {}", inputs.len()),
    }
}

fn poisoned() -> candle_core::Error {
    candle_core::Error::Msg("a backward closure panicked during the backward pass".into())
}

struct Attached<F> {
    out: Mutex<Option<Tensor>>,
    grads: F,
}

impl<F: Backward> Attached<F> {
    /// The output, contiguous from offset 0, so that its storage is exactly its elements.
    fn take(&self) -> Result<Tensor> {
        let out = self
            .out
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .ok_or_else(|| candle_core::Error::Msg("attached op run twice".into()))?;
        if out.is_contiguous() && out.layout().start_offset() == 0 {
            Ok(out)
        } else {
            out.force_contiguous()
        }
    }

    fn cpu(&self) -> Result<(CpuStorage, Shape)> {
        let out = self.take()?;
        let (storage, layout) = out.storage_and_layout();
        match &*storage {
            Storage::Cpu(s) => Ok((s.try_clone(layout)?, layout.shape().clone())),
            _ => candle_core::bail!("attached op: output and input on different devices"),
        }
    }

    fn cuda(&self) -> Result<(CudaStorage, Shape)> {
        let out = self.take()?;
        let (storage, layout) = out.storage_and_layout();
        match &*storage {
            Storage::Cuda(s) => Ok((s.try_clone(layout)?, layout.shape().clone())),
            _ => candle_core::bail!("attached op: output and input on different devices"),
        }
    }

    /// The closure's gradients, `n` of them.
    fn backward(
        &self,
        args: &[&Tensor],
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<impl Iterator<Item = Option<Tensor>>> {
        let grads = (self.grads)(args, res, grad)?;
        if grads.len() != args.len() {
            candle_core::bail!(
                "attached op: {} gradients for {} inputs",
                grads.len(),
                args.len()
            );
        }
        Ok(grads.into_iter())
    }
}

impl<F: Backward> CustomOp1 for Attached<F> {
    fn name(&self) -> &'static str {
        "credit-train-attached"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu()
    }

    fn cuda_fwd(&self, _: &CudaStorage, _: &Layout) -> Result<(CudaStorage, Shape)> {
        self.cuda()
    }

    fn bwd(&self, a: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let mut g = self.backward(&[a], res, grad)?;
        Ok(g.next().flatten())
    }
}

impl<F: Backward> CustomOp2 for Attached<F> {
    fn name(&self) -> &'static str {
        "credit-train-attached2"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu()
    }

    fn cuda_fwd(
        &self,
        _: &CudaStorage,
        _: &Layout,
        _: &CudaStorage,
        _: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        self.cuda()
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let mut g = self.backward(&[a, b], res, grad)?;
        Ok((g.next().flatten(), g.next().flatten()))
    }
}

impl<F: Backward> CustomOp3 for Attached<F> {
    fn name(&self) -> &'static str {
        "credit-train-attached3"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu()
    }

    fn cuda_fwd(
        &self,
        _: &CudaStorage,
        _: &Layout,
        _: &CudaStorage,
        _: &Layout,
        _: &CudaStorage,
        _: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        self.cuda()
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let mut g = self.backward(&[a, b, c], res, grad)?;
        Ok((g.next().flatten(), g.next().flatten(), g.next().flatten()))
    }
}
