"""Which expressions stand where a device or a communication backend is expected: the codemod's proofs.

One read-only pass over the whole module, run before any rewrite, marks the expressions in a *device*
position (a ``device=`` keyword, the first argument of ``torch.device``/``.to``, an assignment to
``device``, a ``"cuda" if ... else "cpu"`` pair, a comparison with ``.type``) or a *backend* position (the
backend of ``init_process_group``/``new_group``/``deepspeed.init_distributed``, an assignment to
``backend``, a ``"nccl" if ... else "gloo"`` pair). The rules are the tables of :mod:`anyaccel.migrate.rules`.

Because the pass sees the whole module first, a later use can prove an earlier literal: the default of
``parser.add_argument("--backend", default="nccl")`` is provably the backend when ``args.backend`` is
passed to ``init_process_group`` further down. Such uses are recorded as attribute names (``backend``)
in :attr:`ContextMarker.device_attributes` / :attr:`ContextMarker.backend_attributes`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import libcst as cst

from anyaccel.migrate import rules

__all__ = ["ContextMarker", "last_name", "string_value"]


def last_name(expr: cst.BaseExpression) -> str | None:
    """Return the last identifier of a dotted expression (``dist.init_process_group`` -> the latter)."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def string_value(node: cst.CSTNode) -> str | None:
    """The value of a plain (non-bytes) string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _has_suffix(name: str | None, suffixes: Sequence[str]) -> bool:
    """True when ``name`` equals one of ``suffixes`` or ends with ``_<suffix>``."""
    if not name:
        return False
    lowered = name.lower()
    return any(lowered == s or lowered.endswith("_" + s) for s in suffixes)


class ContextMarker(cst.CSTVisitor):
    """Mark device and backend positions in a module; visit the module once, top-down, before rewriting.

    Args:
        qualified_names: returns the qualified names (``"torch.device"``) an expression resolves to; the
            transformer passes its ``QualifiedNameProvider`` lookup.

    Attributes:
        device_nodes: ``id()`` of every expression in a device position.
        backend_nodes: ``id()`` of every expression in a backend position.
        device_attributes: ``x`` of every ``<name>.x`` in a device position (``args.device`` -> ``device``).
        backend_attributes: ``x`` of every ``<name>.x`` in a backend position.
    """

    def __init__(self, qualified_names: Callable[[cst.CSTNode], Collection[str]]) -> None:
        super().__init__()
        self._qualified_names = qualified_names
        self.device_nodes: set[int] = set()
        self.backend_nodes: set[int] = set()
        self.device_attributes: set[str] = set()
        self.backend_attributes: set[str] = set()

    @staticmethod
    def _attribute_of_name(node: cst.CSTNode) -> str | None:
        """``"backend"`` for ``args.backend`` (an attribute of a plain name), else None."""
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
            return node.attr.value
        return None

    def mark_device(self, node: cst.CSTNode | None) -> None:
        """Record ``node`` as standing where a device is expected."""
        if node is not None:
            self.device_nodes.add(id(node))
            attribute = self._attribute_of_name(node)
            if attribute is not None:
                self.device_attributes.add(attribute)

    def mark_backend(self, node: cst.CSTNode | None) -> None:
        """Record ``node`` as standing where a communication backend is expected."""
        if node is not None:
            self.backend_nodes.add(id(node))
            attribute = self._attribute_of_name(node)
            if attribute is not None:
                self.backend_attributes.add(attribute)

    def visit_Call(self, node: cst.Call) -> None:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in rules.DEVICE_KEYWORDS:
                self.mark_device(arg.value)
        names = set(self._qualified_names(node.func))
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        if positional and (names & rules.DEVICE_FIRST_ARG_CALLEES or method in rules.DEVICE_FIRST_ARG_METHODS):
            self.mark_device(positional[0].value)
        backend = rules.BACKEND_ARGUMENTS.get(last_name(node.func) or "")
        if backend is not None:
            keyword, index = backend
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == keyword:
                    self.mark_backend(arg.value)
            if index is not None and len(positional) > index:
                self.mark_backend(positional[index].value)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        body, orelse = string_value(node.body), string_value(node.orelse)
        pair = {body, orelse}
        is_device_pair = rules.HOST_DEVICE in pair and any(
            v is not None and rules.CUDA_DEVICE_STRING.match(v) for v in pair
        )
        if id(node) in self.device_nodes or is_device_pair:
            self.mark_device(node.body)
            self.mark_device(node.orelse)
        if id(node) in self.backend_nodes or pair == {rules.CUDA_BACKEND, rules.HOST_BACKEND}:
            self.mark_backend(node.body)
            self.mark_backend(node.orelse)

    def _mark_by_name(self, name: str | None, value: cst.BaseExpression | None) -> None:
        if _has_suffix(name, rules.DEVICE_NAME_SUFFIXES):
            self.mark_device(value)
        if _has_suffix(name, rules.BACKEND_NAME_SUFFIXES):
            self.mark_backend(value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._mark_by_name(last_name(target.target), node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._mark_by_name(last_name(node.target), node.value)

    def visit_Param(self, node: cst.Param) -> None:
        self._mark_by_name(node.name.value, node.default)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        # ``x.device.type == "cuda"``: a string compared with a ``.type`` attribute is a device type.
        operands = [node.left] + [t.comparator for t in node.comparisons]
        if any(isinstance(o, cst.Attribute) and o.attr.value == "type" for o in operands):
            for operand in operands:
                self.mark_device(operand)
