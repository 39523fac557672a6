//! Why a GGUF base is dequantised (docs/training.md, "A GGUF file"): the frozen projections of one
//! SmolLM2-135M block, forward and backward to their input, kept two ways:
//!
//! - **dequantised** (what `credit train` does): W in f32, y = x·Wᵀ and ∂x = g·W;
//! - **quantised** (QLoRA-style): y = `QMatMul`(W_q)(x), and since `QMatMul` has no backward,
//!   ∂x = g·dequantise(W_q) with the weight dequantised again in every backward pass.
//!
//! Both hold the same weights (random, quantised to the file's Q4_1, the dense side dequantised
//! from them), so the forward's difference is what the quantised product does to the activations
//! (candle's CPU kernels quantise x to Q8_1 for the dot products). Prints, per projection shape
//! and for the block's seven: milliseconds for T tokens (median of 5), the weights' bytes, and the
//! forward's largest difference relative to the largest output.
//!
//! ```sh
//! cargo bench --profile dev -p credit-train --bench quantised_base            # T = 1024
//! cargo bench --profile dev -p credit-train --bench quantised_base -- 256     # another T
//! ```

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use std::time::Instant;

/// SmolLM2-135M's projections (out, in) and how many of each a block has: q and o, k and v,
/// gate and up, down.
const SHAPES: [(&str, usize, usize, usize); 4] = [
    ("q, o", 576, 576, 2),
    ("k, v", 192, 576, 2),
    ("gate, up", 1536, 576, 2),
    ("down", 576, 1536, 1),
];
const BLOCKS: usize = 30;

fn median_ms(mut run: impl FnMut() -> candle_core::Result<()>) -> candle_core::Result<f64> {
    run()?;
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        run()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[2])
}

fn main() -> candle_core::Result<()> {
    let tokens: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1024);
    let device = Device::Cpu;
    println!("{tokens} tokens, f32 activations, {} threads", cores());
    println!("| projection | dense fwd ms | dense bwd ms | quantised fwd ms | quantised bwd ms (dequantise + product) | dense MB | Q4_1 MB | fwd rel. diff |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut total = [0.0f64; 4];
    let mut bytes = [0usize; 2];
    for (name, out, inp, per_block) in SHAPES {
        let w = (Tensor::randn(0f32, 1.0, (out, inp), &device)? * 0.02)?;
        let q = QTensor::quantize(&w, GgmlDType::Q4_1)?;
        let dense = q.dequantize(&device)?;
        let x = Tensor::randn(0f32, 1.0, (tokens, inp), &device)?;
        let g = Tensor::randn(0f32, 1.0, (tokens, out), &device)?;
        let dense_t = dense.t()?;
        let fwd_dense = median_ms(|| x.matmul(&dense_t).map(drop))?;
        let bwd_dense = median_ms(|| g.matmul(&dense).map(drop))?;
        let q_bytes = q.storage_size_in_bytes();
        let qmm = QMatMul::from_qtensor(q)?;
        let fwd_quant = median_ms(|| qmm.forward(&x).map(drop))?;
        let QMatMul::QTensor(qt) = &qmm else {
            unreachable!("a Q4_1 tensor stays quantised")
        };
        let bwd_quant = median_ms(|| g.matmul(&qt.dequantize(&device)?).map(drop))?;
        let reference = x.matmul(&dense_t)?;
        let largest = reference.abs()?.max_all()?.to_scalar::<f32>()?;
        let diff = (qmm.forward(&x)? - &reference)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        let dense_bytes = out * inp * DType::F32.size_in_bytes();
        println!(
            "| {name} ({out}×{inp}) | {fwd_dense:.2} | {bwd_dense:.2} | {fwd_quant:.2} | {bwd_quant:.2} | {:.2} | {:.2} | {:.1e} |",
            dense_bytes as f64 / 1e6,
            q_bytes as f64 / 1e6,
            diff / largest
        );
        for (sum, ms) in total
            .iter_mut()
            .zip([fwd_dense, bwd_dense, fwd_quant, bwd_quant])
        {
            *sum += ms * per_block as f64;
        }
        bytes[0] += dense_bytes * per_block;
        bytes[1] += q_bytes * per_block;
    }
    println!(
        "| a block's seven | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | |",
        total[0],
        total[1],
        total[2],
        total[3],
        bytes[0] as f64 / 1e6,
        bytes[1] as f64 / 1e6
    );
    println!(
        "\n{BLOCKS} blocks, one forward and one backward: dequantised {:.0} ms and {:.0} MB of weights, quantised {:.0} ms and {:.0} MB",
        BLOCKS as f64 * (total[0] + total[1]),
        (BLOCKS * bytes[0]) as f64 / 1e6,
        BLOCKS as f64 * (total[2] + total[3]),
        (BLOCKS * bytes[1]) as f64 / 1e6
    );
    Ok(())
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
