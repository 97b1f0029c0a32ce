"""A code generator for element-wise Triton kernels, in the spirit of FlagGems's ``pointwise_dynamic``.

Describe the math once, as a ``@triton.jit`` function over values (already loaded and converted to the
computation dtype), and get a callable that handles the rest::

    @pointwise(num_inputs=2)
    @triton.jit
    def _swiglu(a, b):
        return a * tl.sigmoid(a) * b

    y = _swiglu(gate, up)            # tensors of any shapes that broadcast, any strides, or Python scalars

The callable:

- **broadcasts** its tensor operands (``torch.broadcast_shapes``) and reads broadcast dimensions with
  stride 0, never materialising them;
- takes **any strides** (transposed, sliced, expanded inputs) and coalesces dimensions that every operand
  walks contiguously (`anyaccel.ops.triton.broadcast.coalesce`), so a contiguous call indexes one
  flat dimension and vectorises;
- passes **Python scalars** (``int``, ``float``, ``bool``) as kernel arguments (not tensors);
- applies **torch's type promotion** (`anyaccel._compat.prims.elementwise_dtypes`, the rules
  ``torch.result_type`` follows for any number of operands, 0-dim tensors and scalars included): inputs
  are converted to the computation dtype (fp32 for 16-bit floats, as torch's opmath), outputs written in
  the result dtype (or the dtypes given per call);
- allocates outputs with `anyaccel.ops.triton.broadcast.empty_output`'s layout rule, or writes into
  given ``out`` tensors;
- launches through ``torch.library.wrap_triton``, so inside a ``triton_op`` ``torch.compile`` sees the
  kernel.

Kernels are generated per signature (which operands are tensors, the coalesced rank, the number of
outputs), call the body by its own name, are compiled from source registered in ``linecache`` (so Triton,
its interpreter and Inductor can read it, with no file written), and are cached for the process. Importing
this module imports Triton.
"""

from __future__ import annotations

import dataclasses
import hashlib
import linecache
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton.language as tl

from anyaccel._compat import dispatcher, prims
from anyaccel.ops.triton.broadcast import broadcast_shape, coalesce, empty_output
from anyaccel.ops.triton.launch import device_of, wrap

#: Elements per program, and warps per program.
BLOCK = 1024
NUM_WARPS = 4

#: Promotion rule names (torch's elementwise kinds, `anyaccel._compat.prims.RULES`).
PROMOTIONS: tuple[str, ...] = tuple(prims.RULES)

_TL_DTYPES: dict[torch.dtype, Any] = {
    torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float64: tl.float64,
    torch.int8: tl.int8, torch.int16: tl.int16, torch.int32: tl.int32, torch.int64: tl.int64, torch.uint8: tl.uint8,
    torch.bool: tl.int1,
}

Scalar = int | float | bool


class PointwiseError(TypeError):
    """A call the generated op cannot take (operand kinds, devices, out tensors); the message says why."""


class Pointwise:
    """An element-wise op generated from a ``@triton.jit`` body (see the module docstring).

    Args:
        body: ``@triton.jit`` function of ``num_inputs`` values returning one value or a tuple of
            ``num_outputs`` values.
        num_inputs: operands per call (tensors or Python scalars).
        num_outputs: values the body returns.
        promotion: a key of `PROMOTIONS` (``"default"``: ``torch.add``'s rules; ``"int_to_float"``:
            ``torch.sigmoid``'s; ``"always_bool"``: comparisons).
        name: for the generated source and messages (defaults to the body's name).
    """

    def __init__(self, body: Any, num_inputs: int, num_outputs: int = 1, promotion: str = "default",
                 name: str | None = None) -> None:
        if promotion not in PROMOTIONS:
            raise ValueError(f"pointwise: promotion={promotion!r} is not one of {sorted(PROMOTIONS)}")
        self.body = body
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        self.promotion = promotion
        self.name: str = name or str(getattr(getattr(body, "fn", body), "__name__", "body"))
        self._kernels: dict[tuple[tuple[bool, ...], int], Any] = {}
        self._plans: dict[tuple[Any, ...], tuple[list[int], list[int], Any]] = {}
        self._dtypes: dict[tuple[Any, ...], tuple[torch.dtype, torch.dtype]] = {}
        #: eager calls by operand metadata -> everything a launch needs besides the operands (`_cached`)
        self._calls: dict[tuple[Any, ...], _CallPlan] = {}
        self._lock = threading.Lock()

    def dtypes(self, *args: torch.Tensor | Scalar) -> tuple[torch.dtype, torch.dtype]:
        """``(computation dtype, result dtype)`` of a call with ``args`` under this op's promotion rule."""
        # torch's promotion depends on each operand's dtype and whether it is 0-dim, or a scalar's Python type:
        # cached by those (elementwise_dtypes costs tens of microseconds per call)
        key = tuple((a.dtype, a.dim() == 0) if isinstance(a, torch.Tensor) else type(a) for a in args)
        cached = self._dtypes.get(key)
        if cached is None:
            cached = prims.elementwise_dtypes(*args, rule=self.promotion)
            self._dtypes[key] = cached
        return cached

    def __call__(self, *args: torch.Tensor | Scalar, out: Sequence[torch.Tensor] | None = None,
                 out_dtypes: Sequence[torch.dtype] | None = None) -> Any:
        """Apply the op.

        Args:
            args: ``num_inputs`` operands: tensors on one device (0-dim CPU tensors may join device tensors,
                as in torch) or Python scalars; at least one tensor.
            out: tensors to write the results into (the broadcast shape; any strides, no overlap).
            out_dtypes: per output, the dtype to allocate instead of the result dtype.

        Returns:
            One tensor, or a tuple of ``num_outputs`` tensors.

        Raises:
            PointwiseError: wrong operand count or kinds, tensors on several devices, an ``out`` of another
                shape.
            RuntimeError: shapes that do not broadcast (torch's message).

        An eager call (no torch dispatch mode, not compiling, no ``out``) remembers its checked dtypes,
        allocation rule and launch plan under its operands' metadata (`_call_key`: shapes, strides,
        dtypes, devices, scalar types; at most 1025 entries per op, then the memory starts afresh); a later
        call with the same metadata goes straight to allocation and launch.
        """
        key = None
        if out is None and not dispatcher.dispatch_mode_active() and not torch.compiler.is_compiling():
            key = _call_key(args, out_dtypes)
            hit = self._calls.get(key) if key is not None else None
            if hit is not None:
                return self._cached(hit, args)
        if len(args) != self.num_inputs:
            raise PointwiseError(f"{self.name}: got {len(args)} operands; accepted: {self.num_inputs}")
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors:
            raise PointwiseError(f"{self.name}: no tensor operand; accepted: at least one tensor (the rest may be "
                                 "Python int/float/bool)")
        bad = [type(a).__name__ for a in args if not isinstance(a, (torch.Tensor, int, float, bool))]
        if bad:
            raise PointwiseError(f"{self.name}: operand of type {bad[0]}; accepted: tensors and Python "
                                 "int/float/bool")
        device = next((t.device for t in tensors if t.dim() > 0 or t.device.type != "cpu"), tensors[0].device)
        for t in tensors:
            if t.device != device and not (t.dim() == 0 and t.device.type == "cpu"):
                raise PointwiseError(f"{self.name}: operands on {t.device} and {device}; accepted: one device "
                                     "(0-dim CPU tensors excepted)")
        compute, result = self.dtypes(*args)
        shape = broadcast_shape(tensors)
        if out is not None:
            outs = list(out)
            if len(outs) != self.num_outputs or any(tuple(o.shape) != tuple(shape) for o in outs):
                raise PointwiseError(f"{self.name}: out must be {self.num_outputs} tensor(s) of shape {list(shape)}")
        else:
            dts = list(out_dtypes) if out_dtypes is not None else [result] * self.num_outputs
            outs = [empty_output(tensors, shape, dt, device) for dt in dts]
        operands: list[torch.Tensor | Scalar] = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.device != device:
                operands.append(a.to(device))  # a 0-dim CPU tensor joining device tensors
            else:
                operands.append(a)
        n = 1
        for s in shape:
            n *= int(s)
        if n == 0:
            return outs[0] if self.num_outputs == 1 else tuple(outs)
        dev_tensors = [a for a in operands if isinstance(a, torch.Tensor)]
        kinds = tuple(isinstance(a, torch.Tensor) for a in operands)
        sizes, flat_strides, kernel = self._plan(shape, dev_tensors, outs, kinds)
        if key is not None and all(map(operator.is_, operands, args)):  # no 0-dim CPU operand moved to the device
            like_first = all(tuple(t.shape) == tuple(shape) for t in tensors)  # empty_output's rule
            plan = _CallPlan([o.dtype for o in outs], tuple(shape), like_first, device, n, sizes, flat_strides,
                             kernel, _TL_DTYPES[compute])
            with self._lock:
                if len(self._calls) > 1024:
                    self._calls.clear()
                self._calls[key] = plan
        with device_of(outs[0]):
            wrap(kernel)[(-(-n // BLOCK),)](
                *map(_scalar_arg, operands), *outs, n, *sizes, *flat_strides, COMPUTE=_TL_DTYPES[compute], BLOCK=BLOCK,
                num_warps=NUM_WARPS)
        return outs[0] if self.num_outputs == 1 else tuple(outs)

    def _cached(self, plan: _CallPlan, args: tuple[Any, ...]) -> Any:
        """An eager call whose operand metadata (`_call_key`) was planned before: allocate as the first
        call did (`anyaccel.ops.triton.broadcast.empty_output`'s rule, whose strides depend only on the
        operands' shapes and strides, which are in the key) and launch with its plan."""
        first = next(a for a in args if isinstance(a, torch.Tensor))
        if plan.like_first:
            outs = [torch.empty_like(first, dtype=dt) for dt in plan.out_dtypes]
        else:
            outs = [torch.empty(plan.shape, dtype=dt, device=plan.device) for dt in plan.out_dtypes]
        with device_of(outs[0]):
            wrap(plan.kernel)[(-(-plan.n // BLOCK),)](
                *map(_scalar_arg, args), *outs, plan.n, *plan.sizes, *plan.flat_strides, COMPUTE=plan.compute,
                BLOCK=BLOCK, num_warps=NUM_WARPS)
        return outs[0] if self.num_outputs == 1 else tuple(outs)

    def _plan(self, shape: torch.Size, tensors: list[torch.Tensor], outs: list[torch.Tensor],
              kinds: tuple[bool, ...]) -> tuple[list[int], list[int], Any]:
        """Coalesced sizes, flattened strides and the kernel of a launch; cached by the operands' shapes and
        strides for real tensors (fake or symbolic ones, while tracing, are planned afresh)."""
        key = None
        if not dispatcher.dispatch_mode_active():
            key = (kinds, tuple(shape), *((tuple(t.shape), t.stride()) for t in tensors),
                   *(o.stride() for o in outs))
            hit = self._plans.get(key)
            if hit is not None:
                return hit
        strides = [list(t.expand(shape).stride()) for t in tensors] + [list(o.stride()) for o in outs]
        sizes, co = coalesce(list(shape), strides)
        plan = (sizes, [s for st in co for s in st], self._kernel(kinds, len(sizes)))
        if key is not None:
            with self._lock:
                if len(self._plans) > 1024:
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    def _kernel(self, kinds: tuple[bool, ...], rank: int) -> Any:
        key = (kinds, rank)
        with self._lock:
            if key not in self._kernels:
                self._kernels[key] = _compile(self.name, self.body, kinds, rank, self.num_outputs)
            return self._kernels[key]


@dataclasses.dataclass(frozen=True)
class _CallPlan:
    """What an eager call of known operand metadata needs besides the operands: the outputs' dtypes, the
    broadcast shape, whether outputs are ``empty_like`` the first tensor operand (else contiguous), the
    device, the element count, and the launch's plan and compute dtype."""

    out_dtypes: list[torch.dtype]
    shape: tuple[int, ...]
    like_first: bool
    device: torch.device
    n: int
    sizes: list[int]
    flat_strides: list[int]
    kernel: Any
    compute: Any


def _call_key(args: tuple[Any, ...], out_dtypes: Sequence[torch.dtype] | None) -> tuple[Any, ...] | None:
    """The metadata an eager call's checks, promotion, allocation and plan depend on: per operand its shape,
    strides, dtype and device (a tensor) or its type (a scalar: its value is a kernel argument), and the
    requested output dtypes. None for operands of other kinds (the full path raises for them)."""
    key: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.shape, a.stride(), a.dtype, a.device))
        elif type(a) in (int, float, bool):
            key.append(type(a))
        else:
            return None
    key.append(tuple(out_dtypes) if out_dtypes is not None else None)
    return tuple(key)


def pointwise(num_inputs: int, num_outputs: int = 1, promotion: str = "default") -> Callable[[Any], Pointwise]:
    """Decorator form of `Pointwise`: ``@pointwise(num_inputs=2)`` over a ``@triton.jit`` body."""

    def decorate(body: Any) -> Pointwise:
        return Pointwise(body, num_inputs, num_outputs, promotion)

    return decorate


def _scalar_arg(a: Any) -> Any:
    """A kernel argument: a Python bool as the int it equals (the kernel adds a scalar to a ``COMPUTE`` zero,
    so the value is the same; Triton 3.6's interpreter refuses bool arguments), anything else as is."""
    return int(a) if type(a) is bool else a


def generate_source(name: str, kinds: Sequence[bool], rank: int, num_outputs: int,
                    body_name: str = "_body") -> str:
    """The Triton source of one kernel: operands ``in<i>`` (tensor pointers, or scalars when ``kinds[i]`` is
    False), outputs ``out<k>``, the element count, ``rank`` sizes, then per tensor operand and output its
    ``rank`` strides; ``COMPUTE`` and ``BLOCK`` are compile-time constants. The body is called by its own
    name, ``body_name``: Inductor copies a user kernel's ``@triton.jit`` dependencies into its generated code
    under their function names, so an alias would not resolve there."""
    ins = [f"in{i}" for i in range(len(kinds))]
    outs = [f"out{k}" for k in range(num_outputs)]
    sizes = [f"size{d}" for d in range(rank)]
    strided = [a for a, is_t in zip(ins, kinds, strict=True) if is_t] + outs
    strides = [f"{a}_s{d}" for a in strided for d in range(rank)]
    params = ", ".join([*ins, *outs, "n", *sizes, *strides, "COMPUTE: tl.constexpr", "BLOCK: tl.constexpr"])
    lines = [
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        f"def {name}_kernel({params}):",
        "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        "    mask = offs < n",
        "    rest = offs",
    ]
    for d in range(rank - 1, 0, -1):
        lines += [f"    i{d} = rest % size{d}", f"    rest = rest // size{d}"]
    lines.append("    i0 = rest")

    def offset(a: str) -> str:
        return " + ".join(f"i{d} * {a}_s{d}" for d in range(rank))

    values = []
    for i, (a, is_t) in enumerate(zip(ins, kinds, strict=True)):
        if is_t:
            lines.append(f"    v{i} = tl.load({a} + {offset(a)}, mask=mask).to(COMPUTE)")
        else:
            lines.append(f"    v{i} = ({a} + tl.zeros([BLOCK], COMPUTE)).to(COMPUTE)")
        values.append(f"v{i}")
    results = [f"r{k}" for k in range(num_outputs)]
    lhs = results[0] if num_outputs == 1 else ", ".join(results)
    lines.append(f"    {lhs} = {body_name}({', '.join(values)})")
    for k, o in enumerate(outs):
        lines.append(f"    tl.store({o} + {offset(o)}, r{k}.to({o}.dtype.element_ty), mask=mask)")
    return "\n".join(lines) + "\n"


def _compile(name: str, body: Any, kinds: tuple[bool, ...], rank: int, num_outputs: int) -> Any:
    """Generate, register in ``linecache`` and execute one kernel's source; returns the ``@triton.jit``
    kernel."""
    body_name = str(getattr(getattr(body, "fn", body), "__name__", "_body"))
    if not body_name.isidentifier() or body_name in ("triton", "tl") or body_name.startswith(("in", "out", "size")):
        raise PointwiseError(f"{name}: the body's name {body_name!r} would clash with the generated kernel's "
                             "names; rename it (e.g. with a leading underscore)")
    src = generate_source(name, kinds, rank, num_outputs, body_name)
    digest = hashlib.sha256(src.encode()).hexdigest()[:12]
    filename = f"<anyaccel-pointwise:{name}:{digest}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    scope: dict[str, Any] = {"__name__": f"anyaccel_pointwise_{name}_{digest}", body_name: body}
    exec(compile(src, filename, "exec"), scope)  # our generated source (generate_source)
    return scope[f"{name}_kernel"]
