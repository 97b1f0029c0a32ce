"""The libcst transformer that rewrites torch.cuda code to ``get_accelerator()`` calls.

First a read-only pass (`ContextMarker`) marks the expressions that
stand in a *device* or *communication-backend* position (a ``device=`` keyword, the first argument of
``torch.device``/``.to``, an assignment to ``device``, a ``"cuda" if ... else "cpu"`` pair, the backend of
``init_process_group``); then, on the way up the tree (``leave_*``), the transformer rewrites what
``rules`` maps and records a ``Finding``, with the reason a person must look, for CUDA-specific code it
leaves alone. Names are resolved with libcst's
``QualifiedNameProvider``, so ``import torch.cuda as tc``, ``from torch import cuda`` and
``from torch.cuda import synchronize`` are recognised like ``torch.cuda.synchronize``.

Every rewrite yields code the same rules leave unchanged, which makes the migration idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import libcst as cst
from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider, QualifiedNameSource
from typing_extensions import override

from anyaccel.migrate import rules
from anyaccel.migrate.contexts import ContextMarker
from anyaccel.migrate.cst_values import last_name, string_value
from anyaccel.migrate.findings import Finding
from anyaccel.migrate.options import option_of_default, read_option
from anyaccel.migrate.torch_api import torch_accelerator_members

logger = logging.getLogger(__name__)

_CUDA_MODULE = "torch.cuda"
_CUDA_PREFIX = _CUDA_MODULE + "."


def _is_dotted(node: cst.CSTNode) -> bool:
    """True for a plain dotted name (``torch.cuda.synchronize``), False when a call or subscript is in the chain.

    ``torch.nn.DataParallel(model).cuda`` resolves, for libcst, to the qualified name
    ``torch.nn.DataParallel.cuda``; it is a method of a runtime object, not a module path, and must be
    treated as one (``.cuda()`` on a call's result is rewritten like any other).
    """
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


#: ``=`` of a keyword argument without spaces (``exclude_cpu=True``).
_TIGHT_EQUAL = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))


def _is_accelerator_call(node: cst.BaseExpression) -> bool:
    """True for ``get_accelerator().<member>(...)``: already the rewrite's target."""
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and _is_accelerator_member(node.func))


def _is_accelerator_member(node: cst.Attribute) -> bool:
    """True for ``get_accelerator().<member>``: the accelerator's own members are the rewrite's target."""
    receiver = node.value
    return isinstance(receiver, cst.Call) and last_name(receiver.func) == rules.ACCELERATOR_FACTORY


class CudaToAccelerator(VisitorBasedCodemodCommand):
    """Rewrite torch.cuda-specific code of one module to the accelerator API.

    Args:
        context: the libcst codemod context; the transformer schedules the ``get_accelerator`` import and the
            removal of torch.cuda imports left unused on it.
        path: the file name used in findings.
        opted_out: 1-based line numbers carrying ``# anyaccel: ignore``; code on them is neither rewritten nor
            reported.
        torch_accelerator: the ``torch.accelerator`` members a rewrite may target (see
            ``rules.TORCH_ACCELERATOR_CONTEXTS``); None detects them in the installed torch.

    Attributes:
        findings: CUDA-specific code left alone, filled during ``transform_module``.
        rewrites: the number of rewrites made.
    """

    DESCRIPTION = "Rewrite torch.cuda code to anyaccel's get_accelerator() API."
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ParentNodeProvider)

    def __init__(
        self, context: CodemodContext, path: str, opted_out: frozenset[int],
        torch_accelerator: frozenset[str] | None = None,
    ) -> None:
        super().__init__(context)
        self.path = path
        self.opted_out = opted_out
        self.findings: list[Finding] = []
        self.rewrites = 0
        self._contexts = ContextMarker(lambda node: {q.name for q in self._qualified(node)})
        self._needs_torch = False
        self._cuda_imports: list[tuple[str, str | None, str | None]] = []
        self._binds_get_accelerator = False
        self._torch_accelerator = torch_accelerator if torch_accelerator is not None else torch_accelerator_members()

    # ------------------------------------------------------------------ helpers

    def _qualified(self, node: cst.CSTNode) -> set[cst.metadata.QualifiedName]:
        return set(self.get_metadata(QualifiedNameProvider, node, set()) or set())

    def _cuda_suffix(self, node: cst.CSTNode) -> str | None:
        """``"synchronize"`` for a reference to ``torch.cuda.synchronize``, ``""`` for ``torch.cuda``, else None.

        Only plain dotted names count: ``torch.cuda.current_stream().synchronize`` is a method of the
        stream a call returned, not ``torch.cuda.current_stream.synchronize``.
        """
        if not _is_dotted(node):
            return None
        for qname in self._qualified(node):
            if qname.source != QualifiedNameSource.IMPORT:
                continue
            if qname.name == _CUDA_MODULE:
                return ""
            if qname.name.startswith(_CUDA_PREFIX):
                return qname.name[len(_CUDA_PREFIX):]
        return None

    def _is_module_path(self, node: cst.CSTNode) -> bool:
        """True when ``node`` resolves to an imported name (``torch.backends.cuda``), not a runtime object.

        A chain through a call (``torch.nn.DataParallel(model).cuda``) is a runtime object, whatever libcst's
        qualified name for it says.
        """
        return _is_dotted(node) and any(q.source == QualifiedNameSource.IMPORT for q in self._qualified(node))

    def _parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.get_metadata(ParentNodeProvider, node, None)

    def _is_called(self, node: cst.CSTNode) -> bool:
        parent = self._parent(node)
        return isinstance(parent, cst.Call) and parent.func is node

    def _is_outermost(self, node: cst.CSTNode) -> bool:
        """False when ``node`` is the ``value`` or ``attr`` of an enclosing attribute access."""
        parent = self._parent(node)
        return not (isinstance(parent, cst.Attribute) and (parent.value is node or parent.attr is node))

    def _lines(self, node: cst.CSTNode) -> tuple[int, int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return pos.start.line, pos.end.line, pos.start.column + 1

    def _opted_out(self, node: cst.CSTNode) -> bool:
        start, end, _ = self._lines(node)
        return any(line in self.opted_out for line in range(start, end + 1))

    def _report(self, node: cst.CSTNode, kind: str, **fields: str) -> None:
        """Record a finding of ``kind`` (a key of ``rules.REASONS``) at ``node``, unless its line opted out."""
        if self._opted_out(node):
            return
        line, _, column = self._lines(node)
        self.findings.append(Finding(self.path, line, column, kind, rules.REASONS[kind].format(**fields)))

    def _accel(self, member: str) -> cst.Attribute:
        """``get_accelerator().<member>``; records that the import is needed."""
        self.rewrites += 1
        return cst.Attribute(
            value=cst.Call(func=cst.Name(rules.ACCELERATOR_FACTORY)), attr=cst.Name(member)
        )

    def _accel_call(self, member: str, args: Sequence[cst.BaseExpression] = ()) -> cst.Call:
        return cst.Call(func=self._accel(member), args=[cst.Arg(value=a) for a in args])

    def _unless_cpu(self, value: cst.BaseExpression) -> cst.IfExp:
        """``None if get_accelerator().device_name() == "cpu" else <value>``: DDP's CPU form of a device list."""
        on_cpu = cst.Comparison(
            left=self._accel_call("device_name"),
            comparisons=[cst.ComparisonTarget(cst.Equal(), cst.SimpleString(f'"{rules.HOST_DEVICE}"'))],
        )
        return cst.IfExp(test=on_cpu, body=cst.Name("None"), orelse=value)

    def _device_check(self, operand: cst.BaseExpression) -> cst.Call:
        """``get_accelerator().on_accelerator(<operand>, exclude_cpu=True)``."""
        return cst.Call(
            func=self._accel(rules.DEVICE_CHECK_MEMBER),
            args=[cst.Arg(value=operand), cst.Arg(keyword=cst.Name(rules.DEVICE_CHECK_KEYWORD),
                                                  value=cst.Name("True"), equal=_TIGHT_EQUAL)],
        )

    def _is_index_hint(self, node: cst.BaseExpression) -> bool:
        """True for a name that looks like a device index (``rank``, ``self.gpu_id``)."""
        name = last_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        return name is not None and (name.lower() in rules.INDEX_NAME_HINTS
                                     or name.lower().endswith(("_rank", "_gpu", "_gpu_id")))

    def _index_as_device(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        """``get_accelerator().device_name(i)`` for a proven int ``i`` in a device position; else as it is.

        A name that only looks like an index is reported (``device-index``) and left as it is.
        """
        if _is_accelerator_call(updated) or self._opted_out(original):
            return updated
        if self._contexts.is_int(original):
            return self._accel_call("device_name", [updated])
        if self._is_index_hint(original):
            self._report(original, "device-index", value=cst.Module([]).code_for_node(original))
        return updated

    def _rewrite_device_arguments(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """Integer devices in a call's device positions, and DDP's device lists (None on the CPU accelerator).

        ``.to(i)``, ``torch.device(i)``, ``device=i``, ``map_location=i`` with a proven int ``i`` become
        ``get_accelerator().device_name(i)``; ``device_ids=[...]``/``output_device=...`` become
        ``None if get_accelerator().device_name() == "cpu" else ...``.
        """
        func = original.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        first_is_device = method in rules.DEVICE_FIRST_ARG_METHODS or "torch.device" in {
            q.name for q in self._qualified(func)
        }
        args: list[cst.Arg] = []
        seen_positional = False
        for orig_arg, arg in zip(original.args, updated.args, strict=True):
            keyword = orig_arg.keyword.value if orig_arg.keyword is not None else None
            if keyword in rules.DEVICE_LIST_KEYWORDS:
                value = orig_arg.value
                guarded = isinstance(value, cst.IfExp) or (isinstance(value, cst.Name) and value.value == "None")
                if not guarded and not self._opted_out(orig_arg):
                    arg = arg.with_changes(value=self._unless_cpu(arg.value))
            elif keyword in ("device", "map_location") or (
                keyword is None and not orig_arg.star and not seen_positional and first_is_device
            ):
                arg = arg.with_changes(value=self._index_as_device(orig_arg.value, arg.value))
            seen_positional = seen_positional or (keyword is None and not orig_arg.star)
            args.append(arg)
        return updated.with_changes(args=args)

    # ------------------------------------------------------------------ imports

    @override
    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            module = get_full_name_for_node(alias.name) or ""
            if (module == _CUDA_MODULE or module.startswith(_CUDA_PREFIX)) and alias.asname is not None:
                asname = get_full_name_for_node(alias.asname.name)
                self._cuda_imports.append((module, None, asname))
        return False

    @override
    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        module = get_full_name_for_node(node.module) if node.module is not None else None
        if module is None or node.relative or isinstance(node.names, cst.ImportStar):
            return False
        for alias in node.names:
            name = get_full_name_for_node(alias.name) or ""
            asname = get_full_name_for_node(alias.asname.name) if alias.asname else None
            if module == "torch" and name == "cuda" or module == _CUDA_MODULE or module.startswith(_CUDA_PREFIX):
                self._cuda_imports.append((module, name, asname))
            if (asname or name) == rules.ACCELERATOR_FACTORY:
                self._binds_get_accelerator = True
        return False

    @override
    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.rewrites:
            if not self._binds_get_accelerator:
                AddImportsVisitor.add_needed_import(
                    self.context, rules.ACCELERATOR_MODULE, rules.ACCELERATOR_FACTORY
                )
            if self._needs_torch:
                AddImportsVisitor.add_needed_import(self.context, "torch")
            for module, name, asname in self._cuda_imports:
                RemoveImportsVisitor.remove_unused_import(self.context, module, name, asname)
        return updated_node

    # ------------------------------------------------------------------ marking contexts (one pass first)

    @override
    def visit_Module(self, node: cst.Module) -> bool:
        """Mark every device and backend position of the module before anything is rewritten."""
        node.visit(self._contexts)
        self._contexts.finish()
        return True

    # ------------------------------------------------------------------ strings (bottom-up)

    def _device_string(self, value: str) -> cst.Call | None:
        match = rules.CUDA_DEVICE_STRING.match(value)
        if match is None:
            return None
        index = match.group(1)
        return self._accel_call("device_name", [cst.Integer(index)] if index is not None else [])

    @override
    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.BaseExpression:
        value = string_value(original_node)
        if value is None or id(original_node) in self._contexts.check_strings:
            return updated_node  # a device check's "cuda": leave_Comparison rewrites the whole check
        if rules.CUDA_ENV_NAME.match(value):
            self._report(original_node, "cuda-env", value=value)
            return updated_node
        is_device = rules.CUDA_DEVICE_STRING.match(value) is not None
        if not is_device and value != rules.CUDA_BACKEND:
            return updated_node
        proven = self._contexts.device_nodes if is_device else self._contexts.backend_nodes
        parent = self._parent(original_node)
        if id(original_node) not in proven:
            option = option_of_default(original_node, parent, self._parent(parent) if parent else None)
            if option is None or not self._option_default_proven(original_node, option, value, is_device):
                if option is None:
                    self._report(original_node, "cuda-string" if is_device else "nccl-string", value=value)
                return updated_node
        elif isinstance(parent, cst.ConcatenatedString):
            self._report(original_node, "cuda-string" if is_device else "nccl-string", value=value)
            return updated_node
        if self._opted_out(original_node):
            return updated_node
        if is_device:
            replacement = self._device_string(value)
            assert replacement is not None
            return replacement
        return self._accel_call(rules.BACKEND_MEMBER)

    def _option_default_proven(self, node: cst.SimpleString, option: cst.Call, value: str, is_device: bool) -> bool:
        """True when ``add_argument(..., default=<node>)`` is provably a device (backend) option.

        Proven when the option's destination is read as ``<name>.<dest>`` where a device (backend) is expected
        somewhere in the module, and the call has no ``choices=`` (which would have to accept the
        accelerator's names too). Otherwise records a ``cuda-option-default``/``nccl-option-default``
        finding saying which of these failed, and returns False.
        """
        read = read_option(option)
        role = "device" if is_device else "communication backend"
        uses = self._contexts.device_attributes if is_device else self._contexts.backend_attributes
        if read.dest is None:
            case = "no-dest"
        elif read.has_choices:
            case = "choices"
        elif read.dest not in uses:
            case = "unused"
        else:
            return True
        detail = rules.OPTION_DEFAULT_WHY[case].format(dest=read.dest or "?", role=role)
        kind = "cuda-option-default" if is_device else "nccl-option-default"
        self._report(node, kind, value=value, option=read.label, detail=detail)
        return False

    @override
    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.BaseExpression:
        parts = original_node.parts
        if not parts or not isinstance(parts[0], cst.FormattedStringText):
            return updated_node
        head = parts[0].value
        if not (head == "cuda" or head.startswith("cuda:")):
            return updated_node
        simple_index = (
            head == "cuda:"
            and len(parts) == 2
            and isinstance(parts[1], cst.FormattedStringExpression)
            and parts[1].conversion is None
            and parts[1].format_spec is None
        )
        if id(original_node) not in self._contexts.device_nodes or not simple_index:
            self._report(original_node, "cuda-string", value=cst.Module([]).code_for_node(original_node))
            return updated_node
        if self._opted_out(original_node):
            return updated_node
        expression = updated_node.parts[1]
        assert isinstance(expression, cst.FormattedStringExpression)
        return self._accel_call("device_name", [expression.expression])

    # ------------------------------------------------------------------ torch.cuda references

    def _rewrite_cuda_reference(
        self, original: cst.Name | cst.Attribute, updated: cst.BaseExpression, suffix: str
    ) -> cst.BaseExpression:
        """Rewrite the outermost reference to ``torch.cuda.<suffix>`` (an attribute chain or an imported name)."""
        parent = self._parent(original)
        called = self._is_called(original)
        amp_name = suffix[len("amp."):] if suffix.startswith("amp.") else None
        if (called and (suffix in rules.RUNTIME_CALLS or amp_name in rules.AMP_CALLS)) or (
            amp_name in rules.AMP_DECORATORS and (called or isinstance(parent, cst.Decorator))
        ) or (called and parent is not None and self._torch_context(suffix, parent) is not None):
            return updated  # rewritten by leave_Call / leave_Decorator, which see the arguments
        if suffix == "":
            self._report(original, "module-object")
            return updated
        member = rules.RUNTIME_MEMBERS.get(suffix)
        if member is None:
            self._report(original, "no-equivalent", name=_CUDA_PREFIX + suffix)
            return updated
        if self._opted_out(original):
            return updated
        if member == "current_device" and called and id(parent) in self._contexts.device_nodes:
            member = rules.CURRENT_DEVICE_AS_DEVICE
        return self._accel(member)

    def _torch_context(self, suffix: str, call: cst.CSTNode) -> str | None:
        """The ``torch.accelerator`` member replacing ``with torch.cuda.<suffix>(...):``, where torch has it."""
        member = rules.TORCH_ACCELERATOR_CONTEXTS.get(suffix)
        if member is None or member not in self._torch_accelerator:
            return None
        return member if isinstance(self._parent(call), cst.WithItem) else None

    @override
    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if not self._is_outermost(original_node):
            return updated_node
        suffix = self._cuda_suffix(original_node)
        if suffix is None:
            return updated_node
        return self._rewrite_cuda_reference(original_node, updated_node, suffix)

    @override
    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if not self._is_outermost(original_node):
            return updated_node
        suffix = self._cuda_suffix(original_node)
        if suffix is not None:
            return self._rewrite_cuda_reference(original_node, updated_node, suffix)
        if self._is_module_path(original_node):
            for qname in sorted(q.name for q in self._qualified(original_node)):
                if any(qname == p or qname.startswith(p + ".") for p in rules.CUDA_ONLY_PATHS):
                    self._report(original_node, "cuda-only-setting", name=qname)
                    break
            return updated_node
        attr = original_node.attr.value
        if attr in rules.TENSOR_PROPERTIES and not isinstance(self._parent(original_node), cst.AssignTarget):
            if self._opted_out(original_node) or self._is_proven_data(original_node):
                return updated_node
            receiver = original_node.value
            if (isinstance(receiver, cst.Name) and receiver.value in rules.NAMESPACE_NAME_HINTS) or (
                attr in self._contexts.field_names
            ):
                self._report(original_node, "cuda-field", value=cst.Module([]).code_for_node(original_node), name=attr)
                return updated_node
            return self._device_check(updated_node.value)
        if attr == rules.CUDA_METHOD and not self._is_called(original_node) and not self._is_data(original_node):
            self._report(original_node, "cuda-method-ref")
        return updated_node

    def _is_data(self, node: cst.Attribute) -> bool:
        """True when ``<x>.cuda`` (not called) is provably data, not the bound ``.cuda`` method.

        Proofs: ``x`` holds parsed options (``args = parser.parse_args()``) or this file assigns ``x.cuda``; an
        option's destination, a class field or a ``cuda=`` keyword is named ``cuda``; ``x`` has a name that holds
        options or configuration (``args``, ``opt``, ``cfg``...: not reporting is the safe side, nothing is
        rewritten); or it is read as a truth value (``if``, ``and``/``or``, ``not``, a comparison, an
        ``assert``), where a bound method, always true, makes no sense.
        """
        if self._is_proven_data(node) or node.attr.value in self._contexts.field_names:
            return True
        if isinstance(node.value, cst.Name) and node.value.value in rules.NAMESPACE_NAME_HINTS:
            return True
        parent = self._parent(node)
        if isinstance(parent, cst.UnaryOperation):
            return isinstance(parent.operator, cst.Not)
        if isinstance(parent, (cst.If, cst.While, cst.Assert)):
            return parent.test is node
        if isinstance(parent, cst.IfExp):
            return parent.test is node
        return isinstance(parent, (cst.BooleanOperation, cst.Comparison, cst.ComparisonTarget, cst.AssignTarget))

    def _is_proven_data(self, node: cst.Attribute) -> bool:
        """True for ``<name>.attr`` where ``name`` holds parsed options or this file assigns ``name.attr``."""
        receiver = node.value
        if not isinstance(receiver, cst.Name):
            return False
        return (receiver.value in self._contexts.namespaces
                or (receiver.value, node.attr.value) in self._contexts.data_pairs)

    # ------------------------------------------------------------------ device checks

    @override
    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        """``device.type == "cuda"`` / ``"cuda" in device`` -> ``on_accelerator(<device>, exclude_cpu=True)``."""
        if id(original_node) not in self._contexts.device_checks or self._opted_out(original_node):
            return updated_node
        target = updated_node.comparisons[0]
        left_is_string = id(original_node.left) in self._contexts.check_strings
        check = self._device_check(target.comparator if left_is_string else updated_node.left)
        if isinstance(target.operator, (cst.NotEqual, cst.NotIn)):
            negated = cst.UnaryOperation(operator=cst.Not(), expression=check)
            return negated.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return check.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)

    # ------------------------------------------------------------------ calls

    @override
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        suffix = self._cuda_suffix(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if suffix is not None:
            return self._rewrite_cuda_call(original_node, updated_node, suffix)
        if not (isinstance(func, cst.Attribute) and func.attr.value == rules.CUDA_METHOD):
            updated_node = self._rewrite_device_arguments(original_node, updated_node)
        amp_callee = self._cuda_amp_callee(original_node)
        if amp_callee is not None and not self._opted_out(original_node):
            names = ("device", *rules.AMP_DEVICE_CALLEES[amp_callee])
            keywordized = self._keywordize(original_node, updated_node, names, amp_callee, skip=1)
            if keywordized is not None:
                updated_node = updated_node.with_changes(args=self._off_on_cpu(keywordized))
        if not isinstance(func, cst.Attribute) or self._is_module_path(func) or _is_accelerator_member(func):
            return updated_node
        assert isinstance(updated_node.func, cst.Attribute)
        method = func.attr.value
        if method == "cuda":
            return self._rewrite_cuda_method(original_node, updated_node)
        if method in rules.TENSOR_METHODS:
            if original_node.args:
                self._report(original_node, "tensor-method-args", name=method)
            elif not self._opted_out(original_node):
                return self._accel_call(rules.TENSOR_METHODS[method], [updated_node.func.value])
        return updated_node

    def _cuda_amp_callee(self, call: cst.Call) -> str | None:
        """``"torch.autocast"`` for ``torch.autocast("cuda", ...)`` and the like (CUDA AMP), else None."""
        callees = sorted({q.name for q in self._qualified(call.func)} & set(rules.AMP_DEVICE_CALLEES))
        if not callees:
            return None
        for index, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in ("device_type", "device") or (keyword is None and index == 0 and not arg.star):
                return callees[0] if string_value(arg.value) == rules.CUDA_TYPE else None
        return None

    def _off_on_cpu(self, args: Sequence[cst.Arg]) -> Sequence[cst.Arg]:
        """CUDA AMP's arguments with ``enabled`` also false on the CPU accelerator, as CUDA AMP is without CUDA.

        ``enabled=E`` becomes ``enabled=E and get_accelerator().device_name() != "cpu"``; without ``enabled``,
        ``enabled=get_accelerator().device_name() != "cpu"`` is added. Arguments passed positionally after the
        device, or ``**kwargs``, may hold ``enabled``: then the arguments are returned as they are.
        """
        if any(arg.star or (arg.keyword is None and index > 0) for index, arg in enumerate(args)):
            return args
        not_cpu = cst.Comparison(
            left=self._accel_call("device_name"),
            comparisons=[cst.ComparisonTarget(cst.NotEqual(), cst.SimpleString(f'"{rules.HOST_DEVICE}"'))],
        )
        result = list(args)
        for index, arg in enumerate(result):
            if arg.keyword is not None and arg.keyword.value == "enabled":
                value = arg.value
                if isinstance(value, cst.Name) and value.value in ("True", "False"):
                    return result if value.value == "False" else [
                        *result[:index], arg.with_changes(value=not_cpu), *result[index + 1:]
                    ]
                if isinstance(value, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)) and not value.lpar:
                    value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                result[index] = arg.with_changes(value=cst.BooleanOperation(left=value, operator=cst.And(),
                                                                            right=not_cpu))
                return result
        if result:
            result[-1] = result[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return [*result, cst.Arg(keyword=cst.Name("enabled"), value=not_cpu, equal=_TIGHT_EQUAL)]

    def _rewrite_cuda_call(self, original: cst.Call, updated: cst.Call, suffix: str) -> cst.BaseExpression:
        """``torch.cuda.CUDAGraph()``, ``torch.cuda.amp.autocast(...)``, ``@torch.cuda.amp.custom_fwd(...)``."""
        amp_name = suffix[len("amp."):] if suffix.startswith("amp.") else ""
        context = self._torch_context(suffix, original)
        if context is not None:
            if self._opted_out(original):
                return updated
            if len(original.args) != 1 or original.args[0].star or (
                original.args[0].keyword is not None and original.args[0].keyword.value != "device"
            ):
                self._report(original, "amp-call-args", name=_CUDA_PREFIX + suffix,
                             detail="arguments other than one device index")
                return updated
            self.rewrites += 1
            self._needs_torch = True
            index = self._unless_cpu(updated.args[0].value)  # device=i is passed positionally
            return updated.with_changes(
                func=cst.parse_expression(f"torch.accelerator.{context}"), args=[cst.Arg(value=index)]
            )
        if suffix in rules.RUNTIME_CALLS:
            member, arity = rules.RUNTIME_CALLS[suffix]
            if len(original.args) > arity:
                self._report(original, "amp-call-args", name=_CUDA_PREFIX + suffix, detail="arguments")
                return updated
            if self._opted_out(original):
                return updated
            return updated.with_changes(func=self._accel(member))
        if amp_name in rules.AMP_CALLS:
            target, positional_names = rules.AMP_CALLS[amp_name]
            args = self._keywordize(original, updated, positional_names, _CUDA_PREFIX + suffix)
            if args is None or self._opted_out(original):
                return updated
            device = cst.Arg(value=self._accel_call("device_name"))
            self._needs_torch = True
            return updated.with_changes(func=cst.parse_expression(target), args=self._off_on_cpu([device, *args]))
        if amp_name in rules.AMP_DECORATORS:
            if self._opted_out(original):
                return updated
            device = cst.Arg(
                keyword=cst.Name("device_type"), value=self._accel_call("device_name"),
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
            )
            self._needs_torch = True
            return updated.with_changes(
                func=cst.parse_expression(rules.AMP_DECORATORS[amp_name]), args=[device, *updated.args]
            )
        return updated

    def _keywordize(
        self, original: cst.Call, updated: cst.Call, names: Sequence[str], label: str, skip: int = 0
    ) -> list[cst.Arg] | None:
        """Return ``updated``'s arguments with positional ones passed by keyword, or None (and a finding).

        The first ``skip`` arguments stay positional (the device of ``torch.autocast``).
        """
        result: list[cst.Arg] = list(updated.args[:skip])
        for index, arg in enumerate(updated.args[skip:], start=skip):
            if arg.star:
                self._report(original, "amp-call-args", name=label, detail="*args or **kwargs")
                return None
            if arg.keyword is None:
                if index >= len(names):
                    self._report(original, "amp-call-args", name=label, detail="too many positional arguments")
                    return None
                arg = arg.with_changes(
                    keyword=cst.Name(names[index]),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                )
            result.append(arg)
        return result

    def _rewrite_cuda_method(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """``x.cuda(...)`` -> ``x.to(get_accelerator().device_name(...), ...)`` for every device argument kind.

        The device (an index, a device string, a ``torch.device``, None; positional or ``device=``) goes to
        ``device_name``, which reads each kind; ``non_blocking`` (also Tensor.cuda's second positional
        argument) and ``memory_format`` are passed on to ``.to``. Anything else is reported.
        """
        device: cst.BaseExpression | None = None
        kept: list[cst.Arg] = []
        positional = 0
        for arg in updated.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if arg.star:
                self._report(original, "cuda-call-args", detail="*args or **kwargs")
                return updated
            if keyword in rules.CUDA_METHOD_PASSTHROUGH:
                kept.append(arg)
            elif keyword == "device" or (keyword is None and positional == 0):
                device = arg.value
            elif keyword is None and positional == 1:  # Tensor.cuda(device, non_blocking)
                kept.append(arg.with_changes(keyword=cst.Name("non_blocking"), equal=_TIGHT_EQUAL))
            else:
                self._report(original, "cuda-call-args", detail=f"argument {keyword or 'positional'!s}")
                return updated
            positional += keyword is None
        if self._opted_out(original):
            return updated
        assert isinstance(updated.func, cst.Attribute)
        if device is None or (isinstance(device, cst.Name) and device.value == "None"):
            target: cst.BaseExpression = self._accel_call("device_name")
        elif _is_accelerator_call(device):
            target = device  # a device string already rewritten: "cuda:1" -> device_name(1)
        else:
            target = self._accel_call("device_name", [device])
        device_arg = cst.Arg(value=target)
        if self._in_map_location_function(original):  # storage.to() takes the device by keyword only
            device_arg = cst.Arg(keyword=cst.Name("device"), value=target, equal=_TIGHT_EQUAL)
        return updated.with_changes(func=updated.func.with_changes(attr=cst.Name("to")), args=[device_arg, *kept])

    def _in_map_location_function(self, node: cst.CSTNode) -> bool:
        """True inside ``map_location=lambda storage, loc: ...``, where ``.cuda`` is called on a storage."""
        current: cst.CSTNode | None = node
        while current is not None and not isinstance(current, cst.Lambda):
            current = self._parent(current)
        parent = self._parent(current) if current is not None else None
        return isinstance(parent, cst.Arg) and parent.keyword is not None and parent.keyword.value == "map_location"

    @override
    def leave_Decorator(self, original_node: cst.Decorator, updated_node: cst.Decorator) -> cst.Decorator:
        expr = original_node.decorator
        if not isinstance(expr, (cst.Name, cst.Attribute)):
            return updated_node
        suffix = self._cuda_suffix(expr)
        amp_name = suffix[len("amp."):] if suffix and suffix.startswith("amp.") else ""
        if amp_name not in rules.AMP_DECORATORS or self._opted_out(original_node):
            return updated_node
        self._needs_torch = True
        call = cst.Call(
            func=cst.parse_expression(rules.AMP_DECORATORS[amp_name]),
            args=[
                cst.Arg(
                    keyword=cst.Name("device_type"), value=self._accel_call("device_name"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                )
            ],
        )
        return updated_node.with_changes(decorator=call)
