"""Register one implementation of a model-op family as torch ops with the spec's schemas.

Two kinds, one contract (the op spec's function names and schemas, [`anyaccel.spec`][anyaccel.spec]):

- **portable** implementations (torch ops only) become ``torch.library.custom_op`` s with the spec's schema
  and validating fake, registered for every device type. ``torch.compile`` treats each as one opaque call,
  so the memory behaviour of the backward (what is saved, what is recomputed) is the op's own, the same
  as the Triton implementation's, and ``opcheck`` tests them like any torch op.
- **Triton** implementations become ``torch.library.triton_op`` s: their function (torch ops plus
  ``wrap_triton`` kernel launches) is the fake, and under ``torch.compile`` AOTAutograd decomposes the op
  into its kernels, which Inductor then schedules with the rest of the graph. ``triton_op`` infers the
  schema from the function's annotations; `define` checks it equals the spec's, so the schema is
  still written once.

Autograd is described per family (``<family>/autograd.py``: ``formulas(ns)`` returns, per forward function,
a ``setup_context`` and a ``backward`` that calls ``ns``'s backward functions) and attached twice:

- with ``register_autograd`` on the torch ops (what ``torch.compile``, ``opcheck``, tensor subclasses and
  dispatch modes see);
- as ``torch.autograd.Function`` s over the plain Python implementations: the **eager fast path**
  (``result.eager``). A custom op's Python dispatch (autograd wrapper, backend wrapper, aliasing checks,
  ``wrap_triton``'s higher-order op outside of tracing) costs a hundred microseconds and more per call on
  the host, more than the kernel of a memory-bound op moves data in; the front ends use the fast path in
  eager mode when no dispatch mode is active, and the torch ops otherwise
  (`anyaccel.ops.nn.implementations.ops`). Both paths run the same implementation and formulas. Each
  eager forward is an `eager_function`: torch's ``Function.apply`` (public) on a Function in torch's
  combined form (``forward(ctx, ...)``), which torch passes on without the per-call signature bind it does
  for the ``setup_context`` form, and the ``setup_context`` form where a functorch transform needs it. An
  earlier shortcut past that bind, built on functorch and forward-AD internals and copying part of torch's
  ``apply``, was dropped; this one uses torch's ``apply`` as it is and one private query
  (`anyaccel._compat.functorch`).
  Triton implementations run with ``wrap_triton`` passing kernels through
  (`anyaccel._compat.library.untraced`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

from anyaccel._compat import dispatcher, library
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.spec import OpSpec, SpecError

#: ``(setup_context(ctx, inputs, output), backward(ctx, *grads))`` of one forward function.
Formula = tuple[Callable[..., None], Callable[..., Any]]



def define(spec: OpSpec, namespace: str, impls: dict[str, Callable[..., Any]], *, triton: bool,
           autograd: Callable[[Any], dict[str, Formula]] | None = None,
           eager_helpers: dict[str, Callable[..., Any]] | None = None) -> SimpleNamespace:
    """Register ``impls`` (function name -> implementation) as ``<namespace>::<name>`` torch ops, once.

    Args:
        spec: the family's op spec.
        namespace: the torch namespace (``"anyaccel_triton_rms_norm"``).
        impls: spec function name -> Python implementation with the schema's parameters and annotations.
        triton: register with ``triton_op`` (Triton kernels) instead of ``custom_op`` (portable torch).
        autograd: the family's ``formulas(ns)`` (see the module docstring).
        eager_helpers: name -> function: attributes of the ``eager`` and ``plain`` namespaces only, no torch op
            (for the family's formulas on the eager fast path, where they may do what an op's traced
            backward may not, such as writing into a saved tensor; a formula finds them with ``getattr`` and
            falls back without). Triton ones run with ``wrap_triton`` passing kernels through, as ``impls``.

    Returns:
        An object whose attributes are the ops (``ns.rms_norm``, torch op packets), ``namespace``, ``defs``
        (name -> ``CustomOpDef``), ``eager`` (the same functions as plain Python calls, forward functions
        wrapped in ``torch.autograd.Function`` s: the eager fast path) and ``plain`` (the Python functions
        without autograd: for callers below autograd, such as the aten-override kernels).

    Raises:
        SpecError: a name is not a function of the spec, a Triton function's annotations give another
            schema than the spec's, or an eager helper has a spec function's name.

    Side effects: registers the ops with the torch dispatcher (once per process and namespace: the result is
    held in the process's table of loaded ops under ``namespace``,
    [`LOADED_OPS`][anyaccel.op_builder.core.loaded_ops.LOADED_OPS], and its registration outlives a reset).
    """
    import torch

    def make() -> SimpleNamespace:
        clash = sorted(set(eager_helpers or ()) & set(impls))
        if clash:
            raise SpecError(f"{namespace}: eager helper(s) {clash} have the names of the spec's functions; "
                            "give them names of their own")
        defs: dict[str, Any] = {}
        ops: dict[str, Any] = {}
        for name, impl in impls.items():
            fn = spec.function(name)
            qualname = f"{namespace}::{name}"
            if triton:
                op: Any = torch.library.triton_op(qualname, impl, mutates_args=fn.mutated)
                registered = dispatcher.registered_schema(op)
                if registered is not None:
                    _check_schema(qualname, registered, fn.schema)
            else:
                op = torch.library.custom_op(qualname, impl, mutates_args=fn.mutated, schema=fn.schema)
                fake = fn.load_fake()
                if fake is not None:
                    op.register_fake(fake)
            defs[name] = op
            ops[name] = getattr(getattr(torch.ops, namespace), name)
        plain = {name: (library.untraced(fn) if triton else fn)
                 for name, fn in {**impls, **(eager_helpers or {})}.items()}
        eager = SimpleNamespace(**plain)
        result = SimpleNamespace(namespace=namespace, defs=defs, eager=eager, plain=SimpleNamespace(**plain), **ops)
        if autograd is not None:
            for name, (setup, backward) in autograd(result).items():
                defs[name].register_autograd(backward, setup_context=setup)
            for name, formula in autograd(eager).items():
                setattr(eager, name, eager_function(f"{namespace}_{name}_eager", plain[name], *formula))
        return result

    defined: SimpleNamespace = LOADED_OPS.load_definitions(namespace, make)
    return defined


def eager_function(name: str, forward: Callable[..., Any], setup_context: Callable[..., None],
                   backward: Callable[..., Any]) -> Callable[..., Any]:
    """``apply(*inputs)``: ``forward(*inputs)`` recorded for autograd with ``setup_context`` and ``backward``,
    as a ``torch.autograd.Function`` named ``name`` with these static methods would be.

    Two Functions back it, both public torch forms:

    - ``apply.combined``, whose ``forward(ctx, *inputs)`` runs ``forward`` then ``setup_context``: torch's
      ``Function.apply`` passes it on without binding the arguments to a signature. That bind (``inspect``,
      on every call of a Function with ``setup_context``, torch 2.10-2.14) was a fifth to a third of an eager
      model-op call's host time. It serves every call that passes each input positionally while no functorch
      transform is active (`anyaccel._compat.functorch`).
    - ``apply.full``, the ``setup_context`` form (made with `carry_signature`), which functorch transforms
      (``torch.func.grad``, ``vmap`` ...) require: it serves the other calls. Keyword arguments are bound to
      positions first, since torch 2.10 and 2.11's ``Function.apply`` binds them but then hands them on to
      the C ``apply``, which refuses keywords.

    Both run the same three functions, so they record the same graph and give the same results.

    Args:
        name: the Functions' class name (what profilers and ``grad_fn`` show).
        forward: ``forward(*inputs)``, the implementation.
        setup_context: ``setup_context(ctx, inputs, output)``.
        backward: ``backward(ctx, *grads)``.

    Returns:
        ``apply``, a function with the two classes as attributes ``combined`` and ``full``.

    Raises:
        At call time, what torch's ``Function.apply`` and ``forward`` raise.

    Side effects: sets ``forward.__signature__`` (`carry_signature`).
    """
    import torch

    from anyaccel._compat import functorch

    signature = inspect.signature(forward)
    arity = len(signature.parameters)
    full: Any = None

    def full_apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = tuple(bound.args), dict(bound.kwargs)
        return super(full, cls).apply(*args, **kwargs)  # torch's own apply

    full = carry_signature(type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "apply": classmethod(full_apply)}))

    def combined_forward(ctx: Any, *args: Any) -> Any:
        output = forward(*args)
        setup_context(ctx, args, output)
        return output

    combined: Any = type(name, (torch.autograd.Function,), {
        "forward": staticmethod(combined_forward), "backward": staticmethod(backward)})

    def apply(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != arity or functorch.transforms_active():
            return full.apply(*args, **kwargs)
        return combined.apply(*args)

    apply.combined = combined  # type: ignore[attr-defined]
    apply.full = full  # type: ignore[attr-defined]
    apply.__name__ = apply.__qualname__ = name
    return apply


_F = TypeVar("_F")


def carry_signature(function_class: _F) -> _F:
    """Set the ``forward`` of a ``torch.autograd.Function`` subclass to carry its own signature
    (``forward.__signature__``, Python's documented override, PEP 362); returns the class (a class decorator).

    torch's ``Function.apply`` calls ``inspect.signature(forward)`` on every call of a Function that defines
    ``setup_context`` (to bind default arguments), and ``inspect`` rebuilds the signature from the code object
    each time unless the function carries one. Every eager Function of anyaccel's model ops is made with it.

    Raises:
        AttributeError: ``function_class`` has no ``forward``.
    """
    forward = function_class.forward  # type: ignore[attr-defined]
    forward.__signature__ = inspect.signature(forward)
    return function_class


def _check_schema(qualname: str, registered: str, declared: str) -> None:
    """Raise unless the schema torch inferred for ``qualname`` is the declared one (argument names and types,
    returns)."""
    want = dispatcher.canonical_schema(f"{qualname}{declared}")
    # annotations' ``int`` is inferred as SymInt
    if dispatcher.canonical_schema(registered.replace("SymInt", "int")) != want:
        raise SpecError(f"{qualname}: the implementation's annotations give the schema {registered!r} but the op "
                        f"spec declares {want!r}; make the annotations match the spec")
