"""Python-level implementations (Triton kernels, torch_npu delegation) as torch ops with the spec's schema.

A native build registers its functions with ``STABLE_TORCH_LIBRARY`` in its own namespace; a Python-level
implementation of the same family does the same through ``torch.library.custom_op``, with the schema and
the validating fake of the op spec, so every implementation is a torch op of the same signature that
``torch.compile`` treats as one opaque call (no graph break) and ``torch.library.opcheck`` can test.

Why ``custom_op`` and not ``triton_op`` for the multi-tensor optimizers: their Triton kernels read a
pointer table built from the tensors' addresses (one launch for every tensor of a step), which a
FakeTensor trace cannot build; ``triton_op`` would make ``torch.compile`` trace into the function. The
element-wise model ops, whose kernels take tensors directly, use ``triton_op``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.spec import OpSpec


def define_custom_ops(spec: OpSpec, namespace: str, impls: dict[str, Callable[..., Any]],
                      device_types: Sequence[str], fake_device_type: str | Sequence[str]) -> SimpleNamespace:
    """Register ``impls`` (function name -> Python implementation) as ``<namespace>::<name>`` torch ops.

    Each op gets the spec function's schema, ``mutates_args`` from its ``(a!)`` annotations, a kernel for
    ``device_types`` and the spec's fake with ``fake_device_type`` bound. The result is held in the process's
    table of loaded ops under ``namespace``
    ([`LOADED_OPS`][anyaccel.op_builder.core.loaded_ops.LOADED_OPS]): defining the same namespace again returns
    the first definition, after a reset of the table too (a process registers each namespace with torch once).

    Args:
        spec: the op family's spec.
        namespace: the torch namespace (``"anyaccel_triton_adam"``).
        impls: function name -> implementation with the schema's parameters.
        device_types: torch device types the kernel is registered for (``("cuda", "xpu")``).
        fake_device_type: the device type(s) the fake requires of the tensors.

    Returns:
        An object whose attributes are the torch ops (``ns.adam_step``), plus ``namespace``.

    Raises:
        SpecError: a name is not a function of the spec.

    Side effects: registers the ops with the torch dispatcher (once per process and namespace).
    """
    import torch

    def define() -> SimpleNamespace:
        ops: dict[str, Any] = {"namespace": namespace}
        for name, impl in impls.items():
            fn = spec.function(name)
            op = torch.library.custom_op(f"{namespace}::{name}", impl, mutates_args=fn.mutated,
                                         device_types=list(device_types), schema=fn.schema)
            fake = fn.load_fake()
            if fake is not None:
                op.register_fake(functools.partial(fake, fake_device_type))
            ops[name] = getattr(getattr(torch.ops, namespace), name)
        return SimpleNamespace(**ops)

    result: SimpleNamespace = LOADED_OPS.load_definitions(namespace, define)
    return result
