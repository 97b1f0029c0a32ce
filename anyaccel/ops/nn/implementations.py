"""Which implementation of a model-op family runs for a device type, resolved so ``torch.compile`` can
trace the front ends without a graph break.

The front ends ([`anyaccel.ops.nn.functional`][anyaccel.ops.nn.functional]) look up the op namespace of the chosen
implementation
([`anyaccel.ops.dispatch.load`][anyaccel.ops.dispatch.load]: forced name, ``ANYACCEL_IMPL_<FAMILY>``, else priority) and
call
``torch.ops.<namespace>.<function>``. The lookup is marked as ``torch.compiler.assume_constant_result``
marks functions: Dynamo runs it once while tracing (loading the implementation may register ops, which
Dynamo must not trace) and bakes the namespace into the graph as a constant. The mark is set without
importing Dynamo (and with it Triton), which importing the front ends must not
(`anyaccel._compat.dynamo.mark_constant_result`).

Consequence: a compiled function keeps the implementation chosen when it was traced; changing
``ANYACCEL_IMPL_<FAMILY>`` afterwards needs ``torch._dynamo.reset()``.

**One callable form per mode.** A caller that knows how its calls will run picks the form once (`MODES`):
``"eager"``, the implementation's eager ``autograd.Function`` s (no custom-op dispatch on the host), or
``"compile"``, the torch ops (what Dynamo, AOTAutograd and Inductor trace; a Triton implementation's
``triton_op`` is decomposed into its kernels there). [`anyaccel.ops.patch`][anyaccel.ops.nn.hf_patch.patch]
decides once per model, as Hugging Face kernels' ``kernelize(model, mode=...)`` does. Only a front end called
with ``mode=None`` (a direct call that did not say) still asks, per call, whether it is being traced.
"""

from __future__ import annotations

from typing import Any

import torch

from anyaccel._compat import dispatcher, dynamo


def namespace(family: str, device_type: str, impl: str | None = None) -> str:
    """The torch op namespace of the implementation of ``family`` chosen for ``device_type``.

    Args:
        family: the op family (``"rms_norm"``).
        device_type: the inputs' device type (``"cuda"``, ``"cpu"``).
        impl: force this implementation by name (``"triton"``, ``"torch"``, ``"triton_interpreter"``).

    Raises:
        anyaccel.ops.dispatch.UnknownImplementationError: ``impl`` (or ``ANYACCEL_IMPL_<FAMILY>``) names no
            implementation.
        anyaccel.ops.dispatch.NoImplementationError: it is unavailable on ``device_type``, or none is.

    Side effects: the first call per (family, implementation) imports and registers the implementation
    (Triton: imports Triton).
    """
    from anyaccel.ops import dispatch

    return str(dispatch.load(family, device_type, impl).namespace)


dynamo.mark_constant_result(namespace)


def tracing() -> bool:
    """Whether calls are being traced rather than run eagerly: ``torch.compile`` compiling, or a torch dispatch
    mode active (fake tensors, functionalisation, ``make_fx``, ``opcheck``, user modes)."""
    return torch.compiler.is_compiling() or dispatcher.dispatch_mode_active()


#: The callable forms a caller can pick once (see the module docstring).
MODES = ("eager", "compile")


def check_mode(mode: str | None) -> None:
    """Raise unless ``mode`` is one of `MODES` or None.

    Raises:
        OpInputError: another value (the message lists `MODES`).
    """
    if mode is not None and mode not in MODES:
        from anyaccel.ops.nn.errors import OpInputError

        raise OpInputError(f"mode={mode!r} is not a model-op mode; accepted: {', '.join(map(repr, MODES))} or None "
                           "(detect); use 'compile' for a model run under torch.compile or CUDA graphs")


def ops(family: str, device_type: str, impl: str | None = None, mode: str | None = None) -> Any:
    """The chosen implementation's functions in the form of ``mode``.

    Args:
        family: the op family.
        device_type: the inputs' device type.
        impl: force this implementation by name.
        mode: ``"compile"``: ``torch.ops.<namespace>`` (the torch ops, for tracing); ``"eager"``: the
            implementation's eager fast path (``autograd.Function`` s over the Python functions, see
            `anyaccel.ops.nn.define`), which skips the custom-op dispatch overhead; None: the torch ops while
            ``torch.compile`` traces or a torch dispatch mode is active (fake tensors, functionalisation,
            ``opcheck``, user modes), else the eager fast path, asked on every call.

    Raises:
        anyaccel.ops.registry.ImplementationError: as `namespace` (``impl`` unknown or unavailable).
        OpInputError: ``mode`` not in `MODES` (nor None).
    """
    if mode is None:
        return _functions(family, device_type, impl, "eager")
    if mode == "compile":
        return getattr(torch.ops, namespace(family, device_type, impl))
    check_mode(mode)
    from anyaccel.ops import dispatch

    return dispatch.load(family, device_type, impl).eager


def plain_ops(family: str, device_type: str, impl: str | None = None) -> Any:
    """Like `ops`, but in plain eager mode the implementation's functions without autograd (``.plain``): for
    callers that are themselves inside an ``autograd.Function``'s forward or backward, where an inner
    ``Function`` would record nothing (grad mode is off there) and cost its ``apply`` on the host.

    Raises:
        anyaccel.ops.registry.ImplementationError: as `namespace`.
    """
    return _functions(family, device_type, impl, "plain")


def _functions(family: str, device_type: str, impl: str | None, kind: str) -> Any:
    """The torch ops while tracing, else the loaded implementation's functions of ``kind`` (``"eager"`` or
    ``"plain"``)."""
    if tracing():
        return getattr(torch.ops, namespace(family, device_type, impl))
    from anyaccel.ops import dispatch

    return getattr(dispatch.load(family, device_type, impl), kind)
