#!/usr/bin/env bash
# Install the compilers and files the toolchain tests need (pytest markers rocm_toolchain and device_api), so that
# in CI none of them skips. Idempotent: what is already there is not fetched again, so a second run takes seconds.
#
# What it installs, and why:
# - HIP compile tools from Debian 12 (ROCm 5.2): hipcc, the HIP headers and runtime (libamdhip64-dev) and the
#   AMD GPU bitcode libraries (rocm-device-libs). tests/csrc/test_hip_compile.py hipifies the CUDA sources with
#   torch's hipify and compiles them with hipcc to object code, with no AMD GPU. apt puts hipcc on PATH
#   (/usr/bin/hipcc), so the builders and tests find it with no variable set. Debian has no rocThrust, which a
#   ROCm install has and torch's headers include under hipcc (torch/headeronly/util/complex.h includes
#   <thrust/complex.h>): NVIDIA's Thrust headers (libthrust-dev, header-only) stand in for that one header.
# - No linker for Triton: Triton's AMD backend (3.9) assembles and links the kernel (hsaco) inside its own
#   libtriton_amd_codegen.so, so tests/ops/triton/test_amd_compile.py needs nothing from here.
# - The torch_npu 2.14.0 wheel (no dependencies, a manylinux x86-64 build) into $ROOT/wheels/: the device_api
#   tests read its Python sources from the wheel, without importing its extension. That path is their contract.
# - No SYCL compiler: neither Intel's icpx (oneAPI) nor a packaged AdaptiveCpp is on the registries CI reaches
#   (Debian's and PyPI), so this script installs none.
#
# Usage: bash scripts/install_toolchains.sh
# Environment:
#   ANYACCEL_TOOLCHAINS_DIR  cache root outside the clone (default: ~/.cache/anyaccel-toolchains)
#   PYTHON                   the Python whose pip downloads the wheel (default: python3)
# Needs root or sudo for apt-get (as .ci/run does). Waits at most 10 minutes for another apt/dpkg to finish.
set -euo pipefail

ROOT="${ANYACCEL_TOOLCHAINS_DIR:-$HOME/.cache/anyaccel-toolchains}"
PYTHON="${PYTHON:-python3}"
APT_PACKAGES=(hipcc libamdhip64-dev rocm-device-libs libthrust-dev)
NPU_WHEEL_SPEC="torch_npu==2.14.0"
NPU_WHEEL_GLOB="torch_npu-2.14.0-*-manylinux*x86_64*.whl"

mkdir -p "$ROOT/wheels"

# --- Debian packages: only the missing ones, so a machine that has them runs no apt-get at all
missing=()
for package in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo_=""
    [ "$(id -u)" = 0 ] || sudo_=sudo
    echo "install_toolchains: apt-get install ${missing[*]}"
    $sudo_ apt-get -o DPkg::Lock::Timeout=600 update -q
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --no-install-recommends "${missing[@]}"
else
    echo "install_toolchains: ${APT_PACKAGES[*]} already installed"
fi
hipcc --version >/dev/null

# --- the torch_npu wheel, downloaded once into the cache
shopt -s nullglob
wheels=("$ROOT"/wheels/$NPU_WHEEL_GLOB)
if [ ${#wheels[@]} -eq 0 ]; then
    echo "install_toolchains: downloading $NPU_WHEEL_SPEC into $ROOT/wheels"
    # into a private directory first, then moved: a killed download leaves no partial wheel the glob would trust
    tmp=$(mktemp -d "$ROOT/wheels/.download.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --dest "$tmp" "$NPU_WHEEL_SPEC"
    mv "$tmp"/*.whl "$ROOT/wheels/"
    wheels=("$ROOT"/wheels/$NPU_WHEEL_GLOB)
else
    echo "install_toolchains: ${wheels[0]} already downloaded"
fi
[ ${#wheels[@]} -gt 0 ] || { echo "install_toolchains: no $NPU_WHEEL_GLOB after the download" >&2; exit 1; }
echo "install_toolchains: done (cache: $ROOT)"
