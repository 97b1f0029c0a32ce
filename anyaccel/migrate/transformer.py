"""The libcst transformer that rewrites torch.cuda code to ``get_accelerator()`` calls.

First a read-only pass (:class:`~anyaccel.migrate.contexts.ContextMarker`) marks the expressions that
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

from anyaccel.migrate import rules
from anyaccel.migrate.contexts import ContextMarker, last_name, string_value
from anyaccel.migrate.findings import Finding
from anyaccel.migrate.options import option_of_default, read_option

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

    Attributes:
        findings: CUDA-specific code left alone, filled during ``transform_module``.
        rewrites: the number of rewrites made.
    """

    DESCRIPTION = "Rewrite torch.cuda code to anyaccel's get_accelerator() API."
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ParentNodeProvider)

    def __init__(self, context: CodemodContext, path: str, opted_out: frozenset[int]) -> None:
        super().__init__(context)
        self.path = path
        self.opted_out = opted_out
        self.findings: list[Finding] = []
        self.rewrites = 0
        self._contexts = ContextMarker(lambda node: {q.name for q in self._qualified(node)})
        self._needs_torch = False
        self._cuda_imports: list[tuple[str, str | None, str | None]] = []
        self._binds_get_accelerator = False

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

    # ------------------------------------------------------------------ imports

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            module = get_full_name_for_node(alias.name) or ""
            if (module == _CUDA_MODULE or module.startswith(_CUDA_PREFIX)) and alias.asname is not None:
                asname = get_full_name_for_node(alias.asname.name)
                self._cuda_imports.append((module, None, asname))
        return False

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

    def visit_Module(self, node: cst.Module) -> bool:
        """Mark every device and backend position of the module before anything is rewritten."""
        node.visit(self._contexts)
        return True

    # ------------------------------------------------------------------ strings (bottom-up)

    def _device_string(self, value: str) -> cst.Call | None:
        match = rules.CUDA_DEVICE_STRING.match(value)
        if match is None:
            return None
        index = match.group(1)
        return self._accel_call("device_name", [cst.Integer(index)] if index is not None else [])

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.BaseExpression:
        value = string_value(original_node)
        if value is None:
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
        ):
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

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if not self._is_outermost(original_node):
            return updated_node
        suffix = self._cuda_suffix(original_node)
        if suffix is None:
            return updated_node
        return self._rewrite_cuda_reference(original_node, updated_node, suffix)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if not self._is_outermost(original_node):
            return updated_node
        suffix = self._cuda_suffix(original_node)
        if suffix is not None:
            return self._rewrite_cuda_reference(original_node, updated_node, suffix)
        if self._is_module_path(original_node):
            return updated_node  # torch.backends.cuda, torch.version.cuda: not device code
        attr = original_node.attr.value
        if attr in rules.TENSOR_PROPERTIES and not isinstance(self._parent(original_node), cst.AssignTarget):
            if self._opted_out(original_node):
                return updated_node
            return self._accel_call(rules.TENSOR_PROPERTIES[attr], [updated_node.value])
        if attr == "cuda" and not self._is_called(original_node):
            self._report(original_node, "cuda-method-ref")
        return updated_node

    # ------------------------------------------------------------------ calls

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        suffix = self._cuda_suffix(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if suffix is not None:
            return self._rewrite_cuda_call(original_node, updated_node, suffix)
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

    def _rewrite_cuda_call(self, original: cst.Call, updated: cst.Call, suffix: str) -> cst.BaseExpression:
        """``torch.cuda.CUDAGraph()``, ``torch.cuda.amp.autocast(...)``, ``@torch.cuda.amp.custom_fwd(...)``."""
        amp_name = suffix[len("amp."):] if suffix.startswith("amp.") else ""
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
            return updated.with_changes(func=cst.parse_expression(target), args=[device, *args])
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
        self, original: cst.Call, updated: cst.Call, names: Sequence[str], label: str
    ) -> list[cst.Arg] | None:
        """Return ``updated``'s arguments with positional ones passed by keyword, or None (and a finding)."""
        result: list[cst.Arg] = []
        for index, arg in enumerate(updated.args):
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
        """``x.cuda()`` / ``x.cuda(i)`` / ``x.cuda(device=i, non_blocking=True)`` -> ``x.to(...)``."""
        device: cst.BaseExpression | None = None
        kept: list[cst.Arg] = []
        for orig_arg, arg in zip(original.args, updated.args, strict=True):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if arg.star:
                self._report(original, "cuda-call-args", detail="*args or **kwargs")
                return updated
            if keyword in rules.CUDA_METHOD_PASSTHROUGH:
                kept.append(arg)
            elif (keyword is None or keyword == "device") and device is None:
                if isinstance(orig_arg.value, (cst.SimpleString, cst.FormattedString, cst.Call)):
                    self._report(original, "cuda-call-args", detail="a device that is not an index")
                    return updated
                device = arg.value
            else:
                self._report(original, "cuda-call-args", detail=f"argument {keyword or 'positional'!s}")
                return updated
        if self._opted_out(original):
            return updated
        assert isinstance(updated.func, cst.Attribute)
        target = self._accel_call("device_name", [device] if device is not None else [])
        return updated.with_changes(
            func=updated.func.with_changes(attr=cst.Name("to")), args=[cst.Arg(value=target), *kept]
        )

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
