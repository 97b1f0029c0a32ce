"""What a ``torch.distributed`` backend can do, read from torch's own tables rather than written as cases.

``torch.distributed.Backend.backend_capability`` maps each backend to the device types its collectives
accept (``gloo``: cpu and cuda; ``nccl``: cuda; ``xccl``: xpu; a plug-in backend registers its own with
``Backend.register_backend(..., devices=...)``), and ``torch.distributed.is_backend_available`` says whether
this build has it. So "can collectives run on MPS tensors?" is a lookup (gloo lists no ``mps``: no), not a
special case. Imports ``torch.distributed`` (part of ``import torch`` on every build that has it).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping

import torch
import torch.distributed as dist

from anyaccel.engine.errors import DistributedUnavailableError

logger = logging.getLogger(__name__)

__all__ = [
    "BACKEND_PROVIDERS",
    "EAGER_INIT_BACKENDS",
    "backend_device_types",
    "ensure_backend",
    "supports_collectives",
]

#: Backends registered with torch.distributed by importing a vendor package (DeepSpeed's ``ccl`` comm
#: backend and ``torch_npu`` do the same imports).
BACKEND_PROVIDERS: Mapping[str, str] = {"ccl": "oneccl_bindings_for_pytorch", "hccl": "torch_npu"}

#: Backends whose ``init_process_group(device_id=...)`` binds the group to the device and connects eagerly
#: (torch documents the effect for NCCL only); others get no ``device_id``.
EAGER_INIT_BACKENDS = frozenset({"nccl"})


def _require_distributed() -> None:
    if not dist.is_available():
        raise DistributedUnavailableError(torch.__version__)


def backend_device_types(backend: str) -> frozenset[str]:
    """Device types whose tensors ``backend``'s collectives accept; empty when torch does not know it.

    Args:
        backend: a backend name (``"gloo"``, ``"nccl"``...), any case.
    """
    capability: Mapping[str, list[str]] = getattr(dist.Backend, "backend_capability", {})
    return frozenset(capability.get(backend.lower(), ()))


def _available(backend: str) -> bool:
    check = getattr(dist, "is_backend_available", None)  # torch >= 2.3
    return bool(check(backend)) if check is not None else bool(backend_device_types(backend))


def supports_collectives(backend: str, device_type: str) -> bool:
    """True when this torch build has ``backend`` and its collectives take ``device_type`` tensors.

    Side effects: none (a backend whose provider package is not imported yet counts as unknown).
    """
    return dist.is_available() and _available(backend) and device_type in backend_device_types(backend)


def ensure_backend(backend: str) -> None:
    """Make ``backend`` known to torch.distributed, importing its provider package if it has one.

    Args:
        backend: the backend about to be passed to ``init_process_group``.

    Raises:
        DistributedUnavailableError: torch has no ``torch.distributed``.
        ImportError: the backend's provider package (`BACKEND_PROVIDERS`) is not installed; the message
            names it.

    Side effects: may import the provider package (which registers the backend with torch).
    """
    _require_distributed()
    provider = BACKEND_PROVIDERS.get(backend.lower())
    if provider is None or backend_device_types(backend):
        return
    try:
        importlib.import_module(provider)
    except ImportError as exc:
        raise ImportError(
            f"the {backend!r} communication backend is provided by the {provider!r} package, which does not "
            f"import ({exc}); install it, or pass backend='gloo' to init_distributed()"
        ) from exc
    logger.debug("imported %s to register the %r backend", provider, backend)
