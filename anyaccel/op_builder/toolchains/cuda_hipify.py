"""The hipify step of a ROCm build: CUDA sources translated to HIP by torch's own hipify, out of the package tree.

A ROCm build of torch compiles a ``CUDAExtension`` by running ``torch.utils.hipify.hipify_python.hipify`` over
its sources and the headers they include (``.cu`` becomes ``*_hip.hip``, ``includes/cuda/x.cuh`` becomes
``includes/hip/x.cuh``, ``cudaStream_t`` becomes ``hipStream_t``, ``<<<...>>>`` becomes
``hipLaunchKernelGGL``), then hands the translated files to hipcc. We do the same, with one difference that keeps
the installed package read-only: the sources and their include directories are copied into the build's private
directory first and translated there, so a failed or killed build leaves nothing in the package and nothing
the next build would trust.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from anyaccel.op_builder.errors import OpBuilderError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HipifiedTree:
    """The translated copy of an op's sources.

    Attributes:
        root: the copy's root; it mirrors the source root's layout (``<root>/csrc/...``).
        sources: each source (as given, relative to the source root) -> its translated file (absolute).
        include_dirs: the include directories of the copy (absolute), in the order given.
    """

    root: Path
    sources: dict[str, Path]
    include_dirs: tuple[Path, ...]


def hipify_tree(source_root: Path, sources: Sequence[str], include_paths: Sequence[str], dest: Path) -> HipifiedTree:
    """Copy ``sources`` and ``include_paths`` under ``dest`` and translate them with torch's hipify.

    Args:
        source_root: the directory ``sources`` and relative ``include_paths`` are relative to.
        sources: source files relative to ``source_root`` (``csrc/adam/fused_adam_cuda.cu``).
        include_paths: include directories, relative to ``source_root`` or absolute inside it.
        dest: an empty or missing directory inside the build directory; the copy goes there.

    Returns:
        The translated tree. A source hipify leaves unchanged keeps its copied path.

    Raises:
        OpBuilderError: an include directory or a source lies outside ``source_root`` (its copy would have no
            place in the mirrored tree); the message names it.

    Side effects: writes under ``dest``; hipify's own console report is captured and logged at DEBUG level.
    """
    from torch.utils.hipify import hipify_python

    root = source_root.resolve()
    dest.mkdir(parents=True, exist_ok=True)

    def mirrored(path: Path) -> Path:
        absolute = (root / path).resolve()
        if not absolute.is_relative_to(root):
            raise OpBuilderError(f"hipify: {path} is outside the source root {root}; a ROCm build translates only "
                                 "files under it (move the file, or the source root)")
        return dest / absolute.relative_to(root)

    include_dirs = tuple(mirrored(Path(p)) for p in include_paths)
    for given, copy in zip(include_paths, include_dirs, strict=True):
        shutil.copytree(root / given, copy, dirs_exist_ok=True)
    copies = {src: mirrored(Path(src)) for src in sources}
    for src, copy in copies.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / src, copy)
    report = io.StringIO()
    with contextlib.redirect_stdout(report), contextlib.redirect_stderr(report):
        result = hipify_python.hipify(
            project_directory=str(dest), output_directory=str(dest),
            header_include_dirs=[str(d) for d in include_dirs], includes=[str(dest / "*")],
            extra_files=[str(c) for c in copies.values()], is_pytorch_extension=True,
            hipify_extra_files_only=True, show_detailed=False, show_progress=False)
    logger.debug("hipify under %s: %s", dest, report.getvalue().strip())
    translated = {}
    for src, copy in copies.items():
        entry = result.get(str(copy))
        translated[src] = Path(entry.hipified_path) if entry is not None and entry.hipified_path else copy
    return HipifiedTree(dest, translated, include_dirs)
