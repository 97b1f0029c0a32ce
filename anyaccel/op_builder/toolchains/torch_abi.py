"""torch's stable ABI as the op builders use it: the target version, the headers and the library to link.

Every native source includes only ``torch/csrc/stable`` and ``torch/headeronly`` headers and is compiled
with ``TORCH_TARGET_VERSION`` set to `DEFAULT_TARGET`, so the binary calls only the stable C shim
(``aoti_torch_*``, ``torch_*``) that every torch from that version on provides
(https://docs.pytorch.org/docs/stable/notes/libtorch_stable_abi.html). The cache key and the prebuilt
manifest carry the target instead of the running torch's version: an artifact built under torch 2.13 loads
under 2.11 and 2.14 alike, and one whose target is newer than the running torch is refused.

Why 2.10: ``std::vector<Tensor>`` arguments (``Tensor[]`` in a schema: every optimizer op takes tensor
lists), ``torch_get_mutable_data_ptr``, ``torch_parallel_for`` and ``torch_get_num_threads`` (the host
kernels' threading) all arrive in the stable ABI with torch 2.10 (``torch/csrc/stable/c/shim.h``, the
``TORCH_VERSION_2_10_0`` block); nothing older can run these kernels.

Nothing here imports ``torch.utils.cpp_extension``: the include and library directories are those of the
``torch`` package itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.errors import OpBuilderError

#: The oldest torch the kernels support, as (major, minor).
DEFAULT_TARGET: tuple[int, int] = (2, 10)
#: Overrides the target (``"2.11"``), e.g. to use a newer stable-ABI feature in a custom op.
TARGET_ENV = settings.TORCH_TARGET.name

_VERSION = re.compile(r"^(\d+)\.(\d+)")


class TorchABIError(OpBuilderError, RuntimeError):
    """The stable-ABI target is malformed or newer than the running torch (the message names both)."""

    CODE = "torch_abi_target"


def parse_version(text: str) -> tuple[int, int]:
    """``"2.13.0+cpu"`` -> ``(2, 13)``.

    Raises:
        ValueError: the text does not start with ``major.minor``.
    """
    m = _VERSION.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a torch version (major.minor...)")
    return int(m[1]), int(m[2])


def running_torch() -> tuple[int, int]:
    """The running torch's ``(major, minor)``. Side effects: imports torch."""
    import torch

    return parse_version(torch.__version__)


def target(env: dict[str, str] | None = None) -> tuple[int, int]:
    """The stable-ABI target of new builds: ``ANYACCEL_TORCH_TARGET`` or `DEFAULT_TARGET`.

    Raises:
        TorchABIError: the variable is malformed, older than `DEFAULT_TARGET` (the kernels need
            2.10's ABI) or newer than the running torch (whose headers could not provide it).
    """
    raw = settings.TORCH_TARGET.get(env)
    if raw is None:
        wanted = DEFAULT_TARGET
    else:
        try:
            wanted = parse_version(raw)
        except ValueError:
            raise TorchABIError(f"{TARGET_ENV}={raw!r} is not a torch version; set it to e.g. "
                                f"'{DEFAULT_TARGET[0]}.{DEFAULT_TARGET[1]}' or unset it") from None
        if wanted < DEFAULT_TARGET:
            raise TorchABIError(f"{TARGET_ENV}={raw!r} is older than {format_version(DEFAULT_TARGET)}, the oldest "
                                "stable ABI anyaccel's kernels compile against; unset it")
    running = running_torch()
    if wanted > running:
        raise TorchABIError(f"the stable-ABI target {format_version(wanted)} is newer than the running torch "
                            f"{format_version(running)}; install torch >= {format_version(wanted)} or lower "
                            f"{TARGET_ENV}")
    return wanted


def format_version(v: tuple[int, int]) -> str:
    """``(2, 10)`` -> ``"2.10"``."""
    return f"{v[0]}.{v[1]}"


def target_macro(v: tuple[int, int]) -> str:
    """The compiler flag selecting target ``v``: ``-DTORCH_TARGET_VERSION=0x020a000000000000`` for 2.10
    (major in the top byte, minor in the next; ``torch/csrc/stable/version.h``)."""
    return f"-DTORCH_TARGET_VERSION=0x{v[0]:02x}{v[1]:02x}000000000000"


def loadable(artifact_target: str, running: tuple[int, int] | None = None) -> bool:
    """Whether an artifact built for stable-ABI target ``artifact_target`` (``"2.10"``) runs on this torch."""
    try:
        wanted = parse_version(artifact_target)
    except (ValueError, AttributeError):
        return False
    return wanted <= (running_torch() if running is None else running)


def torch_dir() -> Path:
    """The installed ``torch`` package directory (without importing torch)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise TorchABIError("torch is not installed; install torch (e.g. pip install torch) before building ops")
    return Path(spec.origin).parent


def include_dir() -> Path:
    """``<torch>/include``: the stable and header-only headers live under it."""
    return torch_dir() / "include"


def library_dir() -> Path:
    """``<torch>/lib``: ``libtorch_cpu.so``, the home of the stable C shim, lives there."""
    return torch_dir() / "lib"
