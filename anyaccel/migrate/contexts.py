"""Which expressions stand where a device or a communication backend is expected: the codemod's proofs.

One read-only pass over the whole module, run before any rewrite, marks the expressions in a *device*
position (a ``device=`` keyword, the first argument of ``torch.device``/``.to``, an assignment to
``device``, a ``"cuda" if ... else "cpu"`` pair, a comparison with ``.type``) or a *backend* position (the
backend of ``init_process_group``/``new_group``/``deepspeed.init_distributed``, an assignment to
``backend``, a ``"nccl" if ... else "gloo"`` pair). The rules are the tables of `anyaccel.migrate.rules`.

Because the pass sees the whole module first, a later use can prove an earlier literal: the default of
``parser.add_argument("--backend", default="nccl")`` is provably the backend when ``args.backend`` is
passed to ``init_process_group`` further down. Such uses are recorded as attribute names (``backend``)
in `ContextMarker.device_attributes` / `ContextMarker.backend_attributes`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import libcst as cst
from typing_extensions import override

from anyaccel.migrate import rules
from anyaccel.migrate.cst_values import last_name, string_value
from anyaccel.migrate.options import read_option

__all__ = ["ContextMarker"]


def _has_suffix(name: str | None, suffixes: Sequence[str]) -> bool:
    """True when ``name`` equals one of ``suffixes`` or ends with ``_<suffix>``."""
    if not name:
        return False
    lowered = name.lower()
    return any(lowered == s or lowered.endswith("_" + s) for s in suffixes)


def _is_device_operand(node: cst.BaseExpression) -> bool:
    """True for what a device check compares with ``"cuda"``: ``x.type``, a variable named ``*device``,
    ``x.device``, ``str(x.device)``."""
    if isinstance(node, cst.Attribute) and node.attr.value in ("type", "device"):
        return True
    if isinstance(node, (cst.Name, cst.Attribute)) and _has_suffix(last_name(node), rules.DEVICE_NAME_SUFFIXES):
        return True
    if isinstance(node, cst.Call) and last_name(node.func) == "str" and len(node.args) == 1:
        return _is_device_operand(node.args[0].value)
    return False


def _is_int_annotation(annotation: cst.Annotation | None) -> bool:
    return annotation is not None and last_name(annotation.annotation) == "int"


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
        device_checks: ``id()`` of every comparison that is a device check (``device.type == "cuda"``).
        check_strings: ``id()`` of the ``"cuda"`` literal of each such check.
        int_names: ``(scope, name)`` of the names proven to hold an int (see `is_int`); the scope is the
            ``id()`` of the function or lambda binding the name, None at module level.
        int_attributes: ``x`` of the ``<name>.x`` attributes proven to hold an int.
        field_names: attribute names that are data fields somewhere: argparse destinations, class fields,
            ``cuda=``/``is_cuda=`` keywords (``Config(cuda=True)``).
        data_pairs: ``(name, attribute)`` of every assignment ``<name>.<attribute> = ...``.
        namespaces: names assigned parsed command-line options (``args = parser.parse_args()``).
    """

    def __init__(self, qualified_names: Callable[[cst.CSTNode], Collection[str]]) -> None:
        super().__init__()
        self._qualified_names = qualified_names
        self.device_nodes: set[int] = set()
        self.backend_nodes: set[int] = set()
        self.device_attributes: set[str] = set()
        self.backend_attributes: set[str] = set()
        self.device_checks: set[int] = set()
        self.check_strings: set[int] = set()
        self.int_names: set[tuple[int | None, str]] = set()
        self.int_attributes: set[str] = set()
        self.field_names: set[str] = set()
        self.data_pairs: set[tuple[str, str]] = set()
        self.namespaces: set[str] = set()
        self._int_candidates: list[tuple[int | None, cst.BaseExpression, cst.BaseExpression]] = []
        self._scope_stack: list[int] = []
        self._scopes_of: dict[int, tuple[int | None, ...]] = {}
        self._functions: dict[str, cst.FunctionDef] = {}
        self._spawned: set[str] = set()

    # ------------------------------------------------------------------ integer device indices

    def is_int(self, node: cst.BaseExpression) -> bool:
        """True when ``node`` provably holds an int (so, in a device position, a device index).

        Proofs: an integer literal; ``int(...)``, ``*.device_count()`` and the like; a name or ``<name>.attr``
        that is annotated ``int``, assigned a proven int, the loop variable of ``range()``, passed as
        ``rank=``, to ``torch.cuda.set_device``/``torch.cuda.device`` or in ``device_ids=[...]``, the first
        parameter of a function started by ``mp.spawn``, or an argparse option with ``type=int``; arithmetic
        of proven ints. A name of a device variable (``*device``) is never an index.
        """
        if isinstance(node, cst.Integer):
            return True
        if isinstance(node, cst.Call):
            return last_name(node.func) in rules.INT_CALLS
        if isinstance(node, cst.BinaryOperation):
            return self.is_int(node.left) and self.is_int(node.right)
        if _has_suffix(last_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None,
                       rules.DEVICE_NAME_SUFFIXES):
            return False
        if isinstance(node, cst.Name):
            scopes = self._scopes_of.get(id(node), (None,))
            return any((scope, node.value) in self.int_names for scope in scopes)
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
            return node.attr.value in self.int_attributes
        return False

    @property
    def _scope(self) -> int | None:
        """The function or lambda being visited (its ``id()``), None at module level."""
        return self._scope_stack[-1] if self._scope_stack else None

    def _prove_int(self, node: cst.BaseExpression | None) -> None:
        """Record that ``node`` (a name, or ``<name>.x``) holds an int, in the scope being visited."""
        self._prove_int_in(self._scope, node)

    def _prove_int_in(self, scope: int | None, node: cst.BaseExpression | None) -> None:
        """Record that ``node`` (a name bound in ``scope``, or ``<name>.x``) holds an int."""
        if isinstance(node, cst.Name):
            self.int_names.add((scope, node.value))
        elif isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
            self.int_attributes.add(node.attr.value)

    def finish(self) -> None:
        """Close the proofs over assignments (``self.gpu_id = gpu_id``); call once after visiting the module."""
        for name in self._spawned:
            function = self._functions.get(name)
            if function is not None and function.params.params:
                self.int_names.add((id(function), function.params.params[0].name.value))
        changed = True
        while changed:
            changed = False
            for scope, target, value in self._int_candidates:
                if not self.is_int(target) and self.is_int(value):
                    self._prove_int_in(scope, target)
                    changed = changed or self.is_int(target)

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

    @override
    def visit_Call(self, node: cst.Call) -> None:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for arg in node.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in rules.DEVICE_KEYWORDS:
                self.mark_device(arg.value)
            if keyword in rules.INDEX_KEYWORDS:
                self._prove_int(arg.value)
            if keyword == "device_ids" and isinstance(arg.value, (cst.List, cst.Tuple)):
                for element in arg.value.elements:
                    self._prove_int(element.value)
            if keyword in rules.CUDA_ATTRIBUTES:
                self.field_names.add(keyword)
        names = set(self._qualified_names(node.func))
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        if positional and (names & rules.DEVICE_FIRST_ARG_CALLEES or method in rules.DEVICE_FIRST_ARG_METHODS):
            self.mark_device(positional[0].value)
        if method == rules.CUDA_METHOD:  # x.cuda("cuda:1"), x.cuda(device=...): the argument is a device
            for arg in node.args:
                if arg.keyword is None or arg.keyword.value == "device":
                    self.mark_device(arg.value)
                    break
        if positional and names & rules.INDEX_FIRST_ARG_CALLEES:
            self._prove_int(positional[0].value)
        if positional and names & rules.SPAWN_CALLEES and isinstance(positional[0].value, cst.Name):
            self._spawned.add(positional[0].value.value)
        if method == rules.OPTION_METHOD:
            self._read_option_types(node)
        backend = rules.BACKEND_ARGUMENTS.get(last_name(node.func) or "")
        if backend is not None:
            keyword, index = backend
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == keyword:
                    self.mark_backend(arg.value)
            if index is not None and len(positional) > index:
                self.mark_backend(positional[index].value)

    @override
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

    def _read_option_types(self, node: cst.Call) -> None:
        """An argparse option with ``type=int`` holds an int; any option's destination is data, not a method."""
        dest = read_option(node).dest
        if dest is None:
            return
        self.field_names.add(dest)
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "type" and last_name(arg.value) == "int":
                self.int_attributes.add(dest)

    def _record_target(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
            self.data_pairs.add((target.value.value, target.attr.value))
        if value is not None:
            self._int_candidates.append((self._scope, target, value))
        if (isinstance(target, cst.Name) and isinstance(value, cst.Call)
                and last_name(value.func) in rules.PARSE_METHODS):
            self.namespaces.add(target.value)

    @override
    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._mark_by_name(last_name(target.target), node.value)
            self._record_target(target.target, node.value)
            if isinstance(target.target, cst.Tuple) and isinstance(node.value, cst.Call):
                # args, rest = parser.parse_known_args()
                first = target.target.elements[0].value if target.target.elements else None
                if isinstance(first, cst.Name) and last_name(node.value.func) in rules.PARSE_METHODS:
                    self.namespaces.add(first.value)

    @override
    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._mark_by_name(last_name(node.target), node.value)
        self._record_target(node.target, node.value)
        if _is_int_annotation(node.annotation):
            self._prove_int(node.target)
        if isinstance(node.target, cst.Name) and node.target.value in rules.CUDA_ATTRIBUTES:
            self.field_names.add(node.target.value)  # a dataclass or config field named cuda / is_cuda

    @override
    def visit_Param(self, node: cst.Param) -> None:
        self._mark_by_name(node.name.value, node.default)
        if _is_int_annotation(node.annotation) or isinstance(node.default, cst.Integer):
            self.int_names.add((self._scope, node.name.value))

    @override
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions[node.name.value] = node
        self._scope_stack.append(id(node))

    @override
    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scope_stack.pop()

    @override
    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._scope_stack.append(id(node))

    @override
    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._scope_stack.pop()

    @override
    def visit_Name(self, node: cst.Name) -> None:
        # the scopes a use of this name can see, innermost first: its functions, then the module
        self._scopes_of[id(node)] = (*reversed(self._scope_stack), None)

    @override
    def visit_For(self, node: cst.For) -> None:
        if isinstance(node.iter, cst.Call) and last_name(node.iter.func) == "range":
            self._prove_int(node.target)

    @override
    def visit_Comparison(self, node: cst.Comparison) -> None:
        # ``device.type == "cuda"``, ``"cuda" in device``: a device check, rewritten as a whole
        if len(node.comparisons) != 1:
            return
        left, operator, right = node.left, node.comparisons[0].operator, node.comparisons[0].comparator
        if isinstance(operator, (cst.In, cst.NotIn)):
            pairs = [(left, right)]
        elif isinstance(operator, (cst.Equal, cst.NotEqual)):
            pairs = [(left, right), (right, left)]
        else:
            return
        for string, operand in pairs:
            # == compares whole strings: only a device *type* equals "cuda" exactly when on_accelerator says so
            exact = (isinstance(operand, cst.Attribute) and operand.attr.value == "type") or (
                isinstance(operand, (cst.Name, cst.Attribute)) and _has_suffix(last_name(operand), ("device_type",))
            )
            if string_value(string) == rules.CUDA_TYPE and (exact if len(pairs) == 2 else _is_device_operand(operand)):
                self.device_checks.add(id(node))
                self.check_strings.add(id(string))
                return
