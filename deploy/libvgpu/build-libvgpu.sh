#!/usr/bin/env bash
# Build HAMi-core's libvgpu.so from its upstream source, on a machine with or
# without a GPU. Shared by the Dockerfile and tests/gpu/.
#
# The library only dlopens libcuda.so.1 and libnvidia-ml.so.1 at run time, so
# the link step is satisfied by two empty stub libraries with those sonames;
# nvml.h comes from the nvidia-nvml-dev wheel when CUDA_HOME lacks it.
#
#   HAMI_CORE_SRC=/path/to/HAMi-core  deploy/libvgpu/build-libvgpu.sh OUT_DIR
#   (without HAMI_CORE_SRC the pinned commit is cloned from HAMI_CORE_REPO)
set -euo pipefail

HAMI_CORE_REPO="${HAMI_CORE_REPO:-https://github.com/Project-HAMi/HAMi-core.git}"
# Shared-region format 1.2, the layout libvgpu/region_layout.py reads.
HAMI_CORE_COMMIT="${HAMI_CORE_COMMIT:-8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
PYTHON="$(realpath "$(command -v "${PYTHON:-python3}")")"

out_dir="${1:?usage: build-libvgpu.sh OUT_DIR}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [[ -n "${HAMI_CORE_SRC:-}" ]]; then
  cp -a "$HAMI_CORE_SRC" "$work/src"
else
  git init -q "$work/src"
  git -C "$work/src" fetch -q --depth 1 "$HAMI_CORE_REPO" "$HAMI_CORE_COMMIT"
  git -C "$work/src" checkout -q FETCH_HEAD
fi

if [[ ! -f "$CUDA_HOME/include/cuda.h" ]]; then
  echo "build-libvgpu: $CUDA_HOME/include/cuda.h not found: set CUDA_HOME to a CUDA toolkit" >&2
  exit 2
fi

include_dir="$work/include"
mkdir -p "$include_dir"
if [[ ! -f "$CUDA_HOME/include/nvml.h" ]]; then
  "$PYTHON" -m pip download -q --no-deps -d "$work/wheel" nvidia-nvml-dev
  (cd "$work/wheel" && "$PYTHON" -m zipfile -e ./*.whl extracted)
  nvml_header="$(find "$work/wheel/extracted" -name nvml.h | head -n 1)"
  [[ -n "$nvml_header" ]] || { echo "build-libvgpu: nvml.h not in the wheel" >&2; exit 2; }
  cp "$nvml_header" "$include_dir/nvml.h"
fi

stub_dir="$work/stubs"
mkdir -p "$stub_dir"
for soname in libcuda.so.1 libnvidia-ml.so.1; do
  echo "" > "$stub_dir/empty.c"
  cc -shared -fPIC -Wl,-soname,"$soname" -o "$stub_dir/$soname" "$stub_dir/empty.c"
  ln -sf "$soname" "$stub_dir/${soname%.1}"
done

build="$work/src/build"
mkdir -p "$build"
(
  cd "$build"
  export LIBRARY_PATH="$stub_dir${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export CPATH="$include_dir${CPATH:+:$CPATH}"
  export CUDA_HOME
  cmake .. -DCMAKE_BUILD_TYPE=Release \
    -DDLSYM_HOOK_ENABLE=1 -DMULTIPROCESS_LIMIT_ENABLE=1 \
    -DHOOK_MEMINFO_ENABLE=1 -DHOOK_NVML_ENABLE=1 >/dev/null
  make -j"$(nproc)" vgpu >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
)
strip -x "$build/libvgpu.so"
install -m 0755 "$build/libvgpu.so" "$out_dir/libvgpu.so"
echo "$out_dir/libvgpu.so"
