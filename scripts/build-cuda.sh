#!/usr/bin/env bash
# Builds `credit-train` with the `cuda` feature on a machine without a GPU or a CUDA toolkit, from
# PyPI's CUDA wheels alone, and leaves a binary to carry to a machine that has the NVIDIA driver and
# the CUDA 13 runtime libraries (see docs/training.md, "Two commands").
#
#   scripts/build-cuda.sh            # → <cargo target dir>/cuda/credit-train
#   scripts/build-cuda.sh --check    # CI: the same build unoptimised, to see it compile, link, load
#
# Environment (all optional):
#   CUDA_COMPUTE_CAP   compute capability to build for [90: H100/H200]; one value per build
#   CREDIT_CUDA_HOME   where the wheels are installed [<cargo target dir>/cuda-wheels]; reused
#                      by later runs, safe to delete
#   CARGO_TARGET_DIR   as for cargo
#
# Why each step:
# - CUDA 13.0 (nvcc 13.0.88): candle 0.11 ships its kernels as PTX that the driver compiles when it
#   loads them, and a driver only reads PTX from a toolkit no newer than itself. The GPU machines of
#   this project run driver 580 (CUDA 13.0); cudarc 0.19 (candle's) knows 13.0–13.4. A newer
#   driver reads 13.0's PTX too.
# - The wheels install nvcc, its front end (crt, nvvm), the C++ headers (cccl) and the libraries
#   the link names (`-lcudart -lcublas -lcublasLt -lcurand -lnvrtc`) into one `nvidia/cu13` tree,
#   which serves as CUDA_HOME. They ship only versioned names (`libcublas.so.13`), so unversioned
#   links are made beside them for the linker; the binary still records the versioned sonames.
# - `-lcuda` is the driver, which no wheel ships: the link uses a stub `libcuda.so` (soname
#   `libcuda.so.1`, every `cu*` entry point of `cuda.h` as an empty function) and the real driver
#   is found at run time. candle asks cudarc for `dynamic-linking`, which excludes cudarc's
#   `dynamic-loading`, so the libraries cannot instead be opened at run time.
# - CUDA_COMPUTE_CAP: candle's build would ask `nvidia-smi`, which a machine without a GPU lacks.
# - --check builds the same sources, features and libraries with neither host nor device code
#   optimised (the `cuda-check` profile, and nvcc's NVVM at -O0: half of each kernel's compile):
#   what can break a GPU build (an API, a link, a missing library) breaks it too, in about half
#   the time, and the binary is thrown away.
set -euo pipefail

profile=release
if [[ "${1:-}" == "--check" ]]; then
    profile=cuda-check
    export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:+$NVCC_APPEND_FLAGS }-Xcicc -O0"
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/build-cuda.sh [--check]" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
# The target directory may be set outside the clone (CARGO_TARGET_DIR or a cargo config): ask cargo.
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
prefix="${CREDIT_CUDA_HOME:-$target/cuda-wheels}"

# One CUDA release (13.0 update 2) throughout; cuBLAS and cuRAND version on their own.
wheels=(
    nvidia-cuda-nvcc==13.0.88
    nvidia-cuda-crt==13.0.88
    nvidia-nvvm==13.0.88
    nvidia-cuda-cccl==13.0.85
    nvidia-cuda-runtime==13.0.96
    nvidia-cuda-nvrtc==13.0.88
    nvidia-cublas==13.1.0.3
    nvidia-curand==10.4.0.35
)

started=$SECONDS
if [[ ! -x "$prefix/venv/bin/python" ]]; then
    python3 -m venv "$prefix/venv"
fi
# --no-deps: the pins above are the whole set; a dependency resolved by pip could pull a newer
# CUDA release whose PTX the driver refuses.
"$prefix/venv/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check --no-deps "${wheels[@]}"
site="$("$prefix/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cuda="$site/nvidia/cu13"
[[ -x "$cuda/bin/nvcc" ]] || { echo "error: no nvcc in $cuda/bin after installing the wheels" >&2; exit 1; }

# Unversioned names for the linker: libfoo.so → libfoo.so.N.
for lib in cudart cublas cublasLt curand nvrtc; do
    versioned="$(cd "$cuda/lib" && ls "lib$lib.so."* 2>/dev/null | sort | head -n1 || true)"
    [[ -n "$versioned" ]] || { echo "error: lib$lib.so.* missing from $cuda/lib" >&2; exit 1; }
    ln -sfn "$versioned" "$cuda/lib/lib$lib.so"
done

# The driver stub: every driver-API name (cuXxx, with its _v2/_ptsz variants) that cuda.h mentions.
mkdir -p "$cuda/lib/stubs"
grep -oE '\bcu[A-Z][A-Za-z0-9_]*' "$cuda/include/cuda.h" | sort -u |
    sed 's/.*/void &(void) {}/' >"$cuda/lib/stubs/libcuda.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cuda/lib/stubs/libcuda.so" "$cuda/lib/stubs/libcuda.c"

export CUDA_HOME="$cuda"
export PATH="$cuda/bin:$PATH"
export NVCC="$cuda/bin/nvcc"
echo "CUDA $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') from wheels in $cuda; compute capability $CUDA_COMPUTE_CAP" >&2
wheels_done=$SECONDS

cargo build --profile "$profile" -p credit-train --features cuda --bin credit-train

bin="$target/$profile/credit-train"
if [[ "$profile" == release ]]; then
    mkdir -p "$target/cuda"
    cp "$bin" "$target/cuda/credit-train"
    bin="$target/cuda/credit-train"
fi

# The binary must load: every library it names resolves to the wheels' (the stub standing in for
# the driver under its soname, in a folder of its own so it never shadows a real driver).
mkdir -p "$prefix/smoke"
ln -sfn "$cuda/lib/stubs/libcuda.so" "$prefix/smoke/libcuda.so.1"
LD_LIBRARY_PATH="$cuda/lib:$prefix/smoke" "$bin" --help >/dev/null
needed="$(readelf -d "$bin" | sed -n 's/.*NEEDED.*\[\(lib\(cuda\|cudart\|cublas\|cublasLt\|curand\|nvrtc\)\.so[^]]*\)\].*/\1/p' | tr '\n' ' ')"
echo "built $bin ($(du -h "$bin" | cut -f1)) in $((SECONDS - started)) s (wheels $((wheels_done - started)) s); it loads, and needs at run time: $needed" >&2
echo "$bin"
