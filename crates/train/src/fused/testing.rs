//! The check every fused op passes: its values against the composed ops', its gradients against
//! candle's backward of the composition, and some of them against central finite differences of
//! the fused op itself.

use crate::rng::SplitMix64;
use candle_core::{Device, Result, Tensor, Var};

/// Uniform in [−scale, scale), seeded.
pub fn random(shape: &[usize], scale: f32, seed: u64) -> Tensor {
    let mut rng = SplitMix64(seed);
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.next_signed() * scale).collect();
    Tensor::from_vec(data, shape, &Device::Cpu).expect("a random tensor")
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let d = (a - b).expect("same shapes").abs().expect("abs");
    d.flatten_all()
        .and_then(|d| d.max(0))
        .and_then(|d| d.to_scalar::<f32>())
        .expect("a maximum")
}

/// Σ f(xs) ⊙ w, w fixed random weights of the output's shape.
fn loss(f: &dyn Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor], w: &Tensor) -> Tensor {
    (f(xs).expect("forward") * w)
        .and_then(|l| l.sum_all())
        .expect("loss")
}

/// Checks `fused` against `composed` at `inputs` (those listed in `trained` differentiated).
pub fn check(
    inputs: &[Tensor],
    trained: &[usize],
    fused: impl Fn(&[Tensor]) -> Result<Tensor>,
    composed: impl Fn(&[Tensor]) -> Result<Tensor>,
) {
    let yf = fused(inputs).expect("fused forward");
    let yc = composed(inputs).expect("composed forward");
    assert_eq!(yf.dims(), yc.dims());
    let diff = max_diff(&yf, &yc);
    assert!(diff < 1e-5, "values differ by {diff}");

    let w = random(yf.dims(), 1.0, 99);
    let on_graph = |xs: &[Tensor]| -> Vec<Tensor> {
        xs.iter()
            .enumerate()
            .map(|(i, x)| {
                if trained.contains(&i) {
                    Var::from_tensor(x).expect("var").as_tensor().clone()
                } else {
                    x.clone()
                }
            })
            .collect()
    };
    let xf = on_graph(inputs);
    let xc = on_graph(inputs);
    let gf = loss(&fused, &xf, &w).backward().expect("fused backward");
    let gc = loss(&composed, &xc, &w)
        .backward()
        .expect("composed backward");
    for &i in trained {
        let a = gf.get(&xf[i]).expect("fused gradient");
        let b = gc.get(&xc[i]).expect("composed gradient");
        let diff = max_diff(a, b);
        assert!(diff < 1e-4, "input {i}: gradients differ by {diff}");

        // Central differences at a few coordinates.
        let flat = inputs[i]
            .flatten_all()
            .expect("flat")
            .to_vec1::<f32>()
            .expect("values");
        let grad = a
            .flatten_all()
            .expect("flat")
            .to_vec1::<f32>()
            .expect("gradient");
        let eps = 1e-2;
        let mut rng = SplitMix64(i as u64);
        for _ in 0..6 {
            let at = rng.below(flat.len() as u64) as usize;
            let at_value = |delta: f32| -> f32 {
                let mut v = flat.clone();
                v[at] += delta;
                let mut xs = inputs.to_vec();
                xs[i] = Tensor::from_vec(v, inputs[i].dims(), &Device::Cpu).expect("input");
                loss(&fused, &xs, &w).to_scalar::<f32>().expect("loss")
            };
            let fd = (at_value(eps) - at_value(-eps)) / (2.0 * eps);
            assert!(
                (fd - grad[at]).abs() < 5e-3 * (1.0 + grad[at].abs()),
                "input {i} at {at}: finite difference {fd}, gradient {}",
                grad[at]
            );
        }
    }
}
