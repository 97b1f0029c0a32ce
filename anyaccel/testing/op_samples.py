"""Sample arguments for an op spec's functions, derived from the spec (for tests, ``opcheck`` and plug-ins).

The tests' parametrisation comes from the specs: every function, every accepted dtype combination, every
implementation. `sample_args` builds one valid call of a spec function from its schema: ``Tensor[]``
arguments become lists of random tensors of odd sizes whose dtypes follow the spec's dtype combination
(the lists in schema order are params, grads, the state lists, and ``model_copies``), a single ``Tensor``
argument is a per-parameter float32 output (one entry per tensor of the lists), and ranged scalars get a
value inside their interval (`in_range`).
"""

from __future__ import annotations

import math
from typing import Any

from anyaccel.spec import DtypeCombo, Function
from anyaccel.spec.intervals import Interval

#: Element counts of the sample tensors: odd sizes, a SIMD-width tail and one empty tensor.
SIZES: tuple[int, ...] = (37, 1, 0, 1029)

#: Typical values for the ranged scalars of the optimizer families (inside every range the specs use).
TYPICAL: dict[str, float] = {"step": 3, "lr": 1e-2, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.01,
                             "grad_scale": 1.0, "max_coeff": 10.0, "min_coeff": 0.01}


def in_range(name: str, interval: str) -> float:
    """A value of ``name`` inside ``interval``: `TYPICAL`'s when it fits, else a point inside.

    Raises:
        ValueError: the interval is empty or malformed.
    """
    iv = Interval.parse(interval)
    typical = TYPICAL.get(name)
    if typical is not None and iv.contains(typical):
        return typical
    low = iv.low if math.isfinite(iv.low) else min(iv.high, 0.0) - 1.0
    high = iv.high if math.isfinite(iv.high) else low + 2.0
    value = (low + high) / 2
    if not iv.contains(value):
        raise ValueError(f"no sample value for {name} in {interval}")
    return value


def sample_args(fn: Function, combo: DtypeCombo, device: str = "cpu", sizes: tuple[int, ...] = SIZES,
                seed: int = 0) -> list[Any]:
    """One valid positional argument list for ``fn`` with tensors of ``combo``'s dtypes on ``device``.

    Args:
        fn: the spec function.
        combo: the dtype combination (``model_copies`` is empty when ``combo.copy`` is ``"none"``).
        device: where the tensors live.
        sizes: the element count of each tensor of a list.
        seed: the random seed.

    Returns:
        The arguments, in schema order (fresh tensors on every call).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    tensor_lists = [a for a in fn.arguments if a.type == "Tensor[]"]
    roles = {a.name: role for a, role in zip(tensor_lists, _roles(len(tensor_lists)), strict=True)}
    dtypes = {"param": combo.param, "grad": combo.grad, "state": combo.state, "copy": combo.copy}
    ranges = dict(fn.ranges)
    args: list[Any] = []
    for a in fn.arguments:
        if a.type == "Tensor[]":
            role = roles[a.name]
            if dtypes[role] == "none":
                args.append([])
                continue
            dtype = getattr(torch, dtypes[role])
            scale = 0.1 if role == "state" else 1.0
            tensors = [(torch.randn(n, generator=gen) * scale).to(dtype) for n in sizes]
            if role == "state" and a.name.endswith("sqs"):
                tensors = [t.abs() for t in tensors]
            args.append([t.to(device) for t in tensors])
        elif a.type == "Tensor":  # a per-parameter output (LAMB's trust ratios): float32, one entry each
            args.append(torch.zeros(len(sizes), dtype=torch.float32, device=device))
        elif a.name in ranges:
            value = in_range(a.name, ranges[a.name])
            args.append(int(value) if a.type == "int" else float(value))
        elif a.type == "bool":
            args.append(True)
        elif a.type in ("int", "float"):
            args.append(1 if a.type == "int" else 1.0)
        else:
            raise ValueError(f"no sample for argument {a.name} of type {a.type} in {fn.name}")
    return args


def _roles(n: int) -> list[str]:
    """Roles of the ``Tensor[]`` arguments of an element-wise optimizer function, in schema order."""
    if n < 3:
        raise ValueError("an optimizer function has params, grads, at least one state list and model_copies")
    return ["param", "grad", *(["state"] * (n - 3)), "copy"]
