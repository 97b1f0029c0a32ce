"""The hipify step of a ROCm build (anyaccel/op_builder/toolchains/cuda_hipify.py): torch's hipify on a copy in the
build directory. Pure Python (no hipcc): runs everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyaccel.op_builder.errors import OpBuilderError
from anyaccel.op_builder.toolchains.cuda_hipify import hipify_tree


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _sources(root: Path) -> None:
    (root / "csrc" / "includes" / "cuda").mkdir(parents=True)
    (root / "csrc" / "op").mkdir()
    (root / "csrc" / "includes" / "cuda" / "util.cuh").write_text(
        "#pragma once\n#include <cuda_runtime.h>\ninline cudaError_t sync(cudaStream_t s) "
        "{ return cudaStreamSynchronize(s); }\n")
    (root / "csrc" / "op" / "op_cuda.cu").write_text(
        '#include "cuda/util.cuh"\n__global__ void k(float* p) { p[0] = 1.f; }\n'
        "void launch(float* p, cudaStream_t s) { k<<<1, 1, 0, s>>>(p); sync(s); }\n")


def test_the_copy_is_translated_and_the_package_is_untouched(tmp_path):
    package = tmp_path / "pkg"
    _sources(package)
    before = _tree(package)
    tree = hipify_tree(package, ["csrc/op/op_cuda.cu"], ["csrc/includes"], tmp_path / "build" / "hip")
    assert _tree(package) == before  # nothing written next to the sources
    source = tree.sources["csrc/op/op_cuda.cu"]
    assert source.is_relative_to(tmp_path / "build" / "hip") and source.suffix == ".hip"
    text = source.read_text()
    assert '#include "hip/util.cuh"' in text and "hipStream_t" in text and "hipLaunchKernelGGL" in text
    assert "cudaStream_t" not in text
    assert tree.include_dirs == (tmp_path / "build" / "hip" / "csrc" / "includes",)
    header = (tree.include_dirs[0] / "hip" / "util.cuh").read_text()
    assert "hipStreamSynchronize" in header and "cudaStreamSynchronize" not in header


def test_a_source_outside_the_source_root_is_refused(tmp_path):
    package = tmp_path / "pkg"
    _sources(package)
    (tmp_path / "elsewhere.cu").write_text("\n")
    with pytest.raises(OpBuilderError, match=r"\.\./elsewhere\.cu is outside the source root"):
        hipify_tree(package, ["../elsewhere.cu"], ["csrc/includes"], tmp_path / "build" / "hip")
