"""``torch._C`` dispatcher queries: active dispatch modes, dispatch keys, registered kernels, schemas.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0):

* ``torch._C._len_torch_dispatch_stack``: how many torch dispatch modes are active;
* ``torch._C._dispatch_key_for_device``: the dispatch key name of a device type;
* ``torch._C._dispatch_has_kernel_for_dispatch_key``: whether an op has a kernel for a key;
* ``torch._C.parse_schema``: the canonical text of an operator schema;
* ``OpOverload._schema``: the schema an op was registered with.

Each function falls back to public behaviour when its name is missing or raises ``TypeError``: an active mode
is assumed (callers then take their always-correct traced path), the key comes from a table of torch's
built-in device types (``PrivateUse1`` otherwise), a kernel is looked up with ``torch.library.get_kernel``,
a schema is compared by its normalised token text, and an op whose registered schema cannot be read reports
None (callers then skip the comparison).
"""

from __future__ import annotations

import re
from typing import Any

import torch

__all__ = ["canonical_schema", "dispatch_key_for_device", "dispatch_mode_active", "has_kernel", "registered_schema"]

#: torch's dispatch keys of its built-in device types (``c10/core/DispatchKey.h``).
_KEYS = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "meta": "Meta", "hpu": "HPU", "mtia": "MTIA",
         "ipu": "IPU", "xla": "XLA", "lazy": "Lazy", "hip": "CUDA", "maia": "MAIA"}


def _private(name: str) -> Any:
    return getattr(torch._C, name, None)


def dispatch_mode_active() -> bool:
    """Whether a torch dispatch mode is active (fake tensors, functionalisation, ``make_fx``, user modes).

    Returns True where torch lacks the query: callers then take the path that is correct under any mode.
    """
    query = _private("_len_torch_dispatch_stack")
    if query is None:
        return True
    try:
        return bool(query() > 0)
    except TypeError:
        return True


def dispatch_key_for_device(device_type: str) -> str:
    """The dispatch key name of ``device_type`` (``"cuda"`` -> ``"CUDA"``; an out-of-tree backend registered
    as torch's private-use device -> ``"PrivateUse1"``)."""
    query = _private("_dispatch_key_for_device")
    if query is not None:
        try:
            return str(query(device_type))
        except (TypeError, RuntimeError):
            pass
    return _KEYS.get(device_type, "PrivateUse1")


def has_kernel(qualname: str, dispatch_key: str) -> bool:
    """Whether ``qualname`` (``"aten::mm"``) has a kernel registered for ``dispatch_key`` (``"CUDA"``)."""
    query = _private("_dispatch_has_kernel_for_dispatch_key")
    if query is not None:
        try:
            return bool(query(qualname, dispatch_key))
        except TypeError:
            pass
    try:
        torch.library.get_kernel(qualname, dispatch_key)
    except (RuntimeError, ValueError, AttributeError):
        return False
    return True


def canonical_schema(text: str) -> str:
    """The canonical text of an operator schema (``"ns::f(Tensor x) -> Tensor"``), for comparing schemas:
    pass both sides through it (a registered op's schema as ``str(schema)``).

    With torch's parser it is the text ``str()`` of a registered schema prints; the fallback gives a token
    string (numbers as Python floats, one space between tokens), equal for equal schemas.

    Raises:
        RuntimeError: ``text`` does not parse (torch's message), where torch's parser is available.
    """
    parse = _private("parse_schema")
    if parse is not None:
        return str(parse(text))
    return _normalise(text)


#: schema tokens: names (``ns::f``, ``Tensor``), numbers (``1e-06``), the arrow, single characters
_TOKEN = re.compile(r"->|[A-Za-z_][\w.:]*|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\S")


def _normalise(text: str) -> str:
    """A schema's tokens joined by one space, numbers as Python floats (the fallback of
    `canonical_schema`)."""
    tokens = []
    for token in _TOKEN.findall(text):
        try:
            token = repr(float(token)) if token[0].isdigit() or token[0] in "+-." and token != "->" else token
        except ValueError:
            pass
        tokens.append(token)
    return " ".join(tokens)


def registered_schema(op: Any) -> str | None:
    """The schema text ``op`` was registered with: ``op`` is an ``OpOverload`` (``torch.ops.ns.f.default``), an
    ``OpOverloadPacket`` (its ``default``) or a ``torch.library.custom_op``/``triton_op`` definition; None where
    torch does not expose it."""
    inner = getattr(op, "_opoverload", None)  # a custom_op / triton_op definition
    if inner is not None:
        op = inner
    elif callable(getattr(op, "overloads", None)):  # a packet: its default overload
        op = getattr(op, "default", op)
    try:
        schema = getattr(op, "_schema", None)
    except (AttributeError, RuntimeError):
        return None
    return None if schema is None else str(schema)
