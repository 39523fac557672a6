//! Where the model runs: the CPU, or a CUDA GPU in a build with the `cuda` feature.

use crate::error::{Error, Result};
use candle_core::{DType, Device};

/// Where the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    /// The first CUDA GPU; needs a build with `--features cuda`.
    Cuda,
}

impl DeviceKind {
    /// The candle device; a CUDA request in a build without the `cuda` feature says how to get one.
    pub fn device(self) -> Result<Device> {
        match self {
            DeviceKind::Cpu => Ok(Device::Cpu),
            DeviceKind::Cuda if !cfg!(feature = "cuda") => Err(Error::Params(
                "`--device cuda`: this build has no CUDA support; rebuild with `cargo build --release --features cuda` (needs the CUDA toolkit)".into(),
            )),
            DeviceKind::Cuda => Device::new_cuda(0).map_err(|e| Error::candle("opening CUDA device 0", e)),
        }
    }

    /// The dtype of the forward and backward passes: bf16 on a GPU (the master weights and the
    /// optimizer state stay f32), f32 on the CPU, where bf16 matmuls are slower, not faster.
    pub fn compute_dtype(self) -> DType {
        match self {
            DeviceKind::Cpu => DType::F32,
            DeviceKind::Cuda => DType::BF16,
        }
    }
}

impl std::str::FromStr for DeviceKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" | "gpu" => Ok(DeviceKind::Cuda),
            other => Err(Error::Params(format!(
                "`--device {other}`: expected `cpu` or `cuda`"
            ))),
        }
    }
}
