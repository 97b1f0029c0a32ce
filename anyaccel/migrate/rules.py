"""The conversion tables of ``anyaccel migrate``: what maps to what, as data.

Every rewrite the codemod performs is driven by one of the tables below; the transformer holds no
per-name logic. The conversions follow DeepSpeed's accelerator proposal
(``docs/_tutorials/accelerator-abstraction-interface.md`` in the DeepSpeed repository) and the member list
of ``DeepSpeedAccelerator`` (``accelerator/abstract_accelerator.py``), see
``/work/shared/reference/deepspeed-accelerator-interface.md``.

This module imports nothing heavy: no libcst, no torch.
"""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, Mapping, Optional, Tuple

#: Import used by rewritten code, as ``from <module> import <name>``.
ACCELERATOR_MODULE = "anyaccel"
ACCELERATOR_FACTORY = "get_accelerator"

#: Inline comment that opts a line out of rewriting and of ``--check`` (like ``# noqa``).
OPT_OUT_PATTERN = re.compile(r"#\s*anyaccel\s*:\s*ignore\b")

#: ``torch.cuda.<key>`` -> ``get_accelerator().<value>``. The accelerator member takes the same
#: arguments in the same order (checked against torch.cuda's signatures and DeepSpeed's interface), so
#: only the callee is replaced and the call's arguments, comments and formatting are kept.
RUNTIME_MEMBERS: Mapping[str, str] = {
    # device
    "device": "device",
    "set_device": "set_device",
    "current_device": "current_device",
    "device_count": "device_count",
    "synchronize": "synchronize",
    "is_available": "is_available",
    # RNG
    "get_rng_state": "get_rng_state",
    "set_rng_state": "set_rng_state",
    "manual_seed": "manual_seed",
    "manual_seed_all": "manual_seed_all",
    "initial_seed": "initial_seed",
    # streams and events (``Stream``/``Event`` are properties returning the class)
    "Stream": "Stream",
    "Event": "Event",
    "stream": "stream",
    "current_stream": "current_stream",
    "default_stream": "default_stream",
    # memory
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "reset_max_memory_allocated": "reset_max_memory_allocated",
    "memory_cached": "memory_cached",
    "max_memory_cached": "max_memory_cached",
    "reset_max_memory_cached": "reset_max_memory_cached",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    # data types
    "is_bf16_supported": "is_bf16_supported",
    # profiler ranges
    "nvtx.range_push": "range_push",
    "nvtx.range_pop": "range_pop",
    # graphs: torch.cuda.graph(g, pool=None, stream=None) matches capture_to_graph(graph, pool, stream)
    "graph": "capture_to_graph",
    # tensor types (properties returning a tensor factory)
    "BFloat16Tensor": "BFloat16Tensor",
    "ByteTensor": "ByteTensor",
    "DoubleTensor": "DoubleTensor",
    "FloatTensor": "FloatTensor",
    "HalfTensor": "HalfTensor",
    "IntTensor": "IntTensor",
    "LongTensor": "LongTensor",
}

#: ``torch.cuda.<key>(...)`` calls that map to an accelerator member with a different call shape:
#: key -> (member, number of positional arguments the member accepts). ``torch.cuda.CUDAGraph()``
#: becomes ``get_accelerator().create_graph()``.
RUNTIME_CALLS: Mapping[str, Tuple[str, int]] = {
    "CUDAGraph": ("create_graph", 0),
}

#: Where ``torch.cuda.current_device()`` stands for a device rather than an index, it becomes this member.
CURRENT_DEVICE_AS_DEVICE = "current_device_name"

#: ``torch.cuda.amp.<key>`` -> (replacement callable, positional parameter names of the original in order).
#: The replacement takes the device type as its first argument (``torch.autocast(device_type, ...)``,
#: ``torch.amp.GradScaler(device, ...)``); the original's positional arguments are passed on by keyword
#: because the parameter orders differ (PyTorch docs: torch.autocast, torch.amp.GradScaler).
AMP_CALLS: Mapping[str, Tuple[str, Tuple[str, ...]]] = {
    "autocast": ("torch.autocast", ("enabled", "dtype", "cache_enabled")),
    "GradScaler": (
        "torch.amp.GradScaler",
        ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
    ),
}

#: ``torch.cuda.amp.<key>`` decorators -> ``torch.amp.<value>(device_type=...)`` (PyTorch >= 2.4).
AMP_DECORATORS: Mapping[str, str] = {
    "custom_fwd": "torch.amp.custom_fwd",
    "custom_bwd": "torch.amp.custom_bwd",
}

#: Keyword arguments whose value is a device (any callee): ``torch.zeros(..., device="cuda")``,
#: ``torch.load(..., map_location="cuda")``, ``torch.autocast(device_type="cuda")``.
DEVICE_KEYWORDS: FrozenSet[str] = frozenset({"device", "map_location", "device_type"})

#: Callees whose first positional argument is a device.
DEVICE_FIRST_ARG_CALLEES: FrozenSet[str] = frozenset(
    {"torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.Generator"}
)

#: Methods whose first positional argument is a device when it is a device string: ``x.to("cuda")``.
DEVICE_FIRST_ARG_METHODS: FrozenSet[str] = frozenset({"to"})

#: Assignment targets whose value is a device: a name equal to or ending with one of these.
DEVICE_NAME_SUFFIXES: Tuple[str, ...] = ("device", "device_type")

#: Distributed calls whose argument is a communication backend: qualified-name suffix ->
#: (keyword name, positional index or None).
BACKEND_ARGUMENTS: Mapping[str, Tuple[str, Optional[int]]] = {
    "init_process_group": ("backend", 0),
    "new_group": ("backend", None),
    "init_distributed": ("dist_backend", 0),
}

#: Assignment targets whose value is a communication backend.
BACKEND_NAME_SUFFIXES: Tuple[str, ...] = ("backend",)

#: The CUDA communication backend string and its accelerator replacement.
CUDA_BACKEND = "nccl"
BACKEND_MEMBER = "communication_backend_name"

#: The host-side alternative that, paired with a CUDA literal in ``a if cond else b``, proves the pair.
HOST_DEVICE = "cpu"
HOST_BACKEND = "gloo"

#: A CUDA device string: ``"cuda"`` or ``"cuda:<index>"``.
CUDA_DEVICE_STRING = re.compile(r"^cuda(?::(\d+))?$")

#: Tensor methods with no argument that become accelerator calls taking the tensor:
#: ``x.pin_memory()`` -> ``get_accelerator().pin_memory(x)``.
TENSOR_METHODS: Mapping[str, str] = {
    "pin_memory": "pin_memory",
    "is_pinned": "is_pinned",
}

#: Tensor properties that become accelerator calls: ``x.is_cuda`` -> ``get_accelerator().on_accelerator(x)``.
TENSOR_PROPERTIES: Mapping[str, str] = {"is_cuda": "on_accelerator"}

#: Keywords of ``Tensor.cuda``/``Module.cuda`` that ``.to(...)`` accepts unchanged.
CUDA_METHOD_PASSTHROUGH: FrozenSet[str] = frozenset({"non_blocking", "memory_format"})

#: Reasons given for code left alone, by kind (the kind is printed with each finding).
REASONS: Dict[str, str] = {
    "no-equivalent": "{name} has no equivalent in the accelerator interface; port it by hand",
    "module-object": "the torch.cuda module is used as an object; port it by hand",
    "cuda-string": "string {value!r} is not provably a device here; pass get_accelerator().device_name() "
    "if it is one",
    "nccl-string": "string {value!r} is not provably a communication backend here; use "
    "get_accelerator().communication_backend_name() if it is one",
    "cuda-call-args": ".cuda(...) with {detail}; rewrite as .to(get_accelerator().device_name(index)) by hand",
    "cuda-method-ref": ".cuda is referenced without a call; port it by hand",
    "tensor-method-args": ".{name}(...) with arguments has no accelerator equivalent; port it by hand",
    "amp-call-args": "{name}(...) with {detail}; port it by hand",
}
