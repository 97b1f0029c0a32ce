"""Register one implementation of a model-op family as torch ops with the spec's schemas.

Two kinds, one contract (the op spec's function names and schemas, :mod:`anyaccel.ops.spec`):

- **portable** implementations (torch ops only) become ``torch.library.custom_op`` s with the spec's schema
  and validating fake, registered for every device type. ``torch.compile`` treats each as one opaque call,
  so the memory behaviour of the backward (what is saved, what is recomputed) is the op's own, the same
  as the Triton implementation's, and ``opcheck`` tests them like any torch op.
- **Triton** implementations become ``torch.library.triton_op`` s: their function (torch ops plus
  ``wrap_triton`` kernel launches) is the fake, and under ``torch.compile`` AOTAutograd decomposes the op
  into its kernels, which Inductor then schedules with the rest of the graph. ``triton_op`` infers the
  schema from the function's annotations; :func:`define` checks it equals the spec's, so the schema is
  still written once.

Autograd is attached per family (``<family>/autograd.py``) with ``register_autograd`` on the forward ops,
calling the same implementation's backward ops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from anyaccel.ops.spec import OpSpec, SpecError

_LOCK = threading.Lock()
_DEFINED: dict[str, SimpleNamespace] = {}


def define(spec: OpSpec, namespace: str, impls: dict[str, Callable[..., Any]], *, triton: bool,
           autograd: Callable[[SimpleNamespace], None] | None = None) -> SimpleNamespace:
    """Register ``impls`` (function name -> implementation) as ``<namespace>::<name>`` torch ops, once.

    Args:
        spec: the family's op spec.
        namespace: the torch namespace (``"anyaccel_triton_rms_norm"``).
        impls: spec function name -> Python implementation with the schema's parameters and annotations.
        triton: register with ``triton_op`` (Triton kernels) instead of ``custom_op`` (portable torch).
        autograd: called once with the result to register the backward formulas.

    Returns:
        An object whose attributes are the ops (``ns.rms_norm``, torch op packets), ``namespace`` and
        ``defs`` (name -> ``CustomOpDef``).

    Raises:
        SpecError: a name is not a function of the spec, or a Triton function's annotations give another
            schema than the spec's.

    Side effects: registers the ops with the torch dispatcher (once per process and namespace).
    """
    import torch

    with _LOCK:
        if namespace in _DEFINED:
            return _DEFINED[namespace]
        defs: dict[str, Any] = {}
        ops: dict[str, Any] = {}
        for name, impl in impls.items():
            fn = spec.function(name)
            qualname = f"{namespace}::{name}"
            if triton:
                op: Any = torch.library.triton_op(qualname, impl, mutates_args=fn.mutated)
                _check_schema(qualname, str(op._opoverload._schema), fn.schema)
            else:
                op = torch.library.custom_op(qualname, impl, mutates_args=fn.mutated, schema=fn.schema)
                fake = fn.load_fake()
                if fake is not None:
                    op.register_fake(fake)
            defs[name] = op
            ops[name] = getattr(getattr(torch.ops, namespace), name)
        result = SimpleNamespace(namespace=namespace, defs=defs, **ops)
        if autograd is not None:
            autograd(result)
        _DEFINED[namespace] = result
        return result


def _check_schema(qualname: str, registered: str, declared: str) -> None:
    """Raise unless the schema torch inferred for ``qualname`` is the declared one (argument names and types,
    returns)."""
    import torch

    want = str(torch._C.parse_schema(f"{qualname}{declared}"))
    if registered.replace("SymInt", "int") != want:  # annotations' ``int`` is inferred as SymInt
        raise SpecError(f"{qualname}: the implementation's annotations give the schema {registered!r} but the op "
                        f"spec declares {want!r}; make the annotations match the spec")
