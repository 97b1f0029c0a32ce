"""transformers' kernel-layer markers, read without the ``kernels`` package.

transformers marks the layers a kernel may replace with ``@use_kernel_forward_from_hub("RMSNorm")`` (classes,
and functions such as ``apply_rotary_pos_emb`` under ``"rotary_pos_emb"``) and attaches marked functions to
the modules calling them with ``@use_kernelized_func(apply_rotary_pos_emb)``. When transformers uses the
``kernels`` package (installed in a version it accepts) the decorators set ``kernel_layer_name`` on the
class (a marked function becomes a module instance whose class carries it) and a ``_kernel_funcs`` dict on the
instances; otherwise they are no-ops and leave no trace at run time. So a marker is read from the class first
and, failing that, from the decorator in the source of the module defining the class (parsed once per
module with `ast`; nothing is executed).
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from dataclasses import dataclass, field

import torch

#: the decorators naming a layer (the second is transformers' deprecated alias of the first)
_LAYER_DECORATORS = frozenset({"use_kernel_forward_from_hub", "use_kernel_func_from_hub"})
_FUNCS_DECORATOR = "use_kernelized_func"


@dataclass(frozen=True)
class SourceMarkers:
    """The markers written in one module's source.

    Attributes:
        layers: class or function name -> its layer name (``"RMSNorm"``, ``"rotary_pos_emb"``).
        kernelized: class name -> the names of the functions ``@use_kernelized_func`` attaches to it.
    """

    layers: dict[str, str] = field(default_factory=dict)
    kernelized: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _decorator_name(node: ast.expr) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


@functools.cache
def source_markers(module_name: str) -> SourceMarkers:
    """The markers in the source of the imported module ``module_name`` (empty when the module is not
    imported or has no readable source). Cached per module name."""
    module = sys.modules.get(module_name)
    try:
        tree = ast.parse(inspect.getsource(module)) if module is not None else None
    except (OSError, TypeError, SyntaxError):
        tree = None
    found = SourceMarkers()
    for node in tree.body if tree is not None else []:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        for dec in node.decorator_list:
            name = _decorator_name(dec)
            if not isinstance(dec, ast.Call) or not dec.args:
                continue
            arg = dec.args[0]
            if name in _LAYER_DECORATORS and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.layers[node.name] = arg.value
            elif name == _FUNCS_DECORATOR and isinstance(node, ast.ClassDef):
                items = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else dec.args
                found.kernelized[node.name] = tuple(a.id for a in items if isinstance(a, ast.Name))
    return found


def layer_name(cls: type) -> str | None:
    """The kernel-layer name of module class ``cls`` (or of a class it inherits from), or None."""
    for klass in cls.__mro__:
        if klass is torch.nn.Module or klass is object:
            break
        runtime = klass.__dict__.get("kernel_layer_name")
        if isinstance(runtime, str):
            return runtime
        if klass.__module__.split(".")[0] == "torch":  # torch's own classes are marked at run time if at all
            continue
        static = source_markers(klass.__module__).layers.get(klass.__qualname__)
        if static is not None:
            return static
    return None


@dataclass(frozen=True)
class KernelizedFunction:
    """A marked function an attention-like module calls by its module-global name.

    Attributes:
        module: the name of the module whose global the caller looks up (the marked class's module).
        name: the global's name (``"apply_rotary_pos_emb"``).
        layer: its layer name (``"rotary_pos_emb"``), or None when the function carries no marker.
    """

    module: str
    name: str
    layer: str | None


def kernelized_functions(module: torch.nn.Module) -> list[KernelizedFunction]:
    """The functions transformers attaches to ``module`` with ``@use_kernelized_func`` (read from the
    instance's ``_kernel_funcs`` when ``kernels`` is in use, else from the class's decorator in its source)."""
    found: list[KernelizedFunction] = []
    for klass in type(module).__mro__:
        if klass is torch.nn.Module or klass is object:
            break
        names = source_markers(klass.__module__).kernelized.get(klass.__qualname__, ())
        runtime = module.__dict__.get("_kernel_funcs")
        if not names and isinstance(runtime, dict) and klass is type(module):
            names = tuple(str(n) for n in runtime)
        for name in names:
            found.append(KernelizedFunction(klass.__module__, name, _function_layer(klass.__module__, name)))
        if found:
            break
    return found


def _function_layer(module_name: str, name: str) -> str | None:
    value = getattr(sys.modules.get(module_name), name, None)
    runtime = getattr(type(value), "kernel_layer_name", None) if isinstance(value, torch.nn.Module) else None
    if isinstance(runtime, str):
        return runtime
    return source_markers(module_name).layers.get(name)
