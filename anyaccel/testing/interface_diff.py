"""Diff an accelerator class against the installed DeepSpeed's accelerator classes, without importing DeepSpeed.

DeepSpeed's interface grows between releases (0.19.8 added ``pin_empty``, ``is_fp64_supported``...), and a
member an accelerator lacks is found only when DeepSpeed's runtime calls it. This module reads DeepSpeed's
``accelerator/*.py`` sources with `ast` (so nothing of DeepSpeed is imported or initialised and vendor
packages its accelerators import need not be installed) and reports, for a class of ours:

- members DeepSpeed's class has and ours lacks (`missing_members`);
- methods whose signature cannot accept every call DeepSpeed's signature allows (`signature_problems`):
  a parameter DeepSpeed lets callers omit must have a default here, ``*args``/``**kwargs`` and keyword-only
  parameters must be accepted, and (with ``check_names``) positional parameters keep DeepSpeed's names.

``tests/accelerator/test_deepspeed_interface.py`` runs it for the built-ins; plug-in authors can run it for
theirs: ``missing_members(MyAccelerator, deepspeed_classes()["DeepSpeedAccelerator"])``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "Member",
    "deepspeed_accelerator_dir",
    "deepspeed_classes",
    "missing_members",
    "signature_problems",
]

_KINDS_BY_DECORATOR = {"property": "property", "staticmethod": "staticmethod", "classmethod": "classmethod"}


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of a DeepSpeed accelerator class, as read from its source.

    Attributes:
        name: the member's name.
        kind: ``"method"``, ``"property"``, ``"staticmethod"``, ``"classmethod"`` or ``"attribute"``.
        abstract: decorated with ``abc.abstractmethod``.
        positional: positional parameters after ``self``/``cls`` as (name, has default) pairs.
        vararg: accepts ``*args``.
        keyword_only: keyword-only parameters as (name, has default) pairs.
        varkw: accepts ``**kwargs``.
    """

    name: str
    kind: str
    abstract: bool = False
    positional: tuple[tuple[str, bool], ...] = ()
    vararg: bool = False
    keyword_only: tuple[tuple[str, bool], ...] = ()
    varkw: bool = False


def deepspeed_accelerator_dir() -> Path | None:
    """The installed DeepSpeed's ``accelerator`` source directory, or None when DeepSpeed is not installed.

    Side effects: none (``importlib.util.find_spec`` on the top-level package only).
    """
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "accelerator"
    return path if path.is_dir() else None


def _decorator_names(node: ast.FunctionDef) -> list[str]:
    names = []
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.append(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def _member_from_function(node: ast.FunctionDef) -> Member:
    decorators = _decorator_names(node)
    kind = next((_KINDS_BY_DECORATOR[d] for d in decorators if d in _KINDS_BY_DECORATOR), "method")
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    if kind != "staticmethod" and positional:
        positional = positional[1:]  # self / cls
    first_default = len(positional) - len(args.defaults)
    return Member(
        name=node.name,
        kind=kind,
        abstract="abstractmethod" in decorators,
        positional=tuple((a.arg, i >= first_default) for i, a in enumerate(positional)),
        vararg=args.vararg is not None,
        keyword_only=tuple((a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)),
        varkw=args.kwarg is not None,
    )


def _class_members(node: ast.ClassDef) -> dict[str, Member]:
    members: dict[str, Member] = {}
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members[statement.name] = _member_from_function(statement)  # type: ignore[arg-type]
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    members[target.id] = Member(target.id, "attribute")
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            members[statement.target.id] = Member(statement.target.id, "attribute")
    return members


def deepspeed_classes(directory: Path | None = None) -> dict[str, dict[str, Member]]:
    """Members of every class in DeepSpeed's ``accelerator/*.py``, by class name.

    Args:
        directory: DeepSpeed's ``accelerator`` directory; the installed one when None.

    Returns:
        ``{"DeepSpeedAccelerator": {...}, "CPU_Accelerator": {...}, ...}``; members of each class's own body
        (not inherited), dunder names excluded. Empty when DeepSpeed is not installed.
    """
    directory = directory or deepspeed_accelerator_dir()
    if directory is None:
        return {}
    classes: dict[str, dict[str, Member]] = {}
    for source in sorted(directory.glob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = {
                    name: member for name, member in _class_members(node).items()
                    if not (name.startswith("__") and name.endswith("__"))
                }
    return classes


def missing_members(cls: type, members: dict[str, Member], include_private: bool = True) -> list[str]:
    """Names in ``members`` that ``cls`` (with its bases) lacks, sorted.

    Args:
        cls: the class to check.
        members: DeepSpeed's members, from `deepspeed_classes`.
        include_private: also check names starting with ``_``.
    """
    return sorted(
        name for name in members
        if (include_private or not name.startswith("_")) and inspect.getattr_static(cls, name, None) is None
    )


def _our_parameters(function: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def signature_problems(cls: type, members: dict[str, Member], check_names: bool = True,
                       names: Iterable[str] | None = None) -> dict[str, str]:
    """Methods of ``cls`` that cannot accept every call DeepSpeed's signature allows.

    Args:
        cls: the class to check.
        members: DeepSpeed's members, from `deepspeed_classes`.
        check_names: also require DeepSpeed's names for positional parameters (callers may pass them by
            keyword); DeepSpeed's concrete classes rename some (``create_op_builder(self, op_name)``), so
            check names against its abstract class only.
        names: restrict to these member names.

    Returns:
        ``{member: problem}`` for each incompatible method; properties and attributes are skipped.
    """
    problems: dict[str, str] = {}
    for name, member in members.items():
        if names is not None and name not in names:
            continue
        if member.kind not in ("method", "staticmethod", "classmethod"):
            continue
        raw = inspect.getattr_static(cls, name, None)
        if raw is None:
            continue
        function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        signature = _our_parameters(function)
        if signature is None:
            continue
        params = list(signature.parameters.values())
        if not isinstance(raw, staticmethod) and params:
            params = params[1:]
        problem = _compare(member, params, check_names)
        if problem:
            problems[name] = problem
    return problems


def _compare(member: Member, params: list[inspect.Parameter], check_names: bool) -> str:
    """One sentence describing why ``params`` cannot take DeepSpeed's calls, or ``""``."""
    kind = inspect.Parameter
    ours_positional = [p for p in params if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)]
    ours_var = any(p.kind is kind.VAR_POSITIONAL for p in params)
    ours_varkw = any(p.kind is kind.VAR_KEYWORD for p in params)
    by_name = {p.name: p for p in params if p.kind is not kind.POSITIONAL_ONLY}
    for index, (name, has_default) in enumerate(member.positional):
        if index >= len(ours_positional):
            if not ours_var:
                return f"DeepSpeed's positional parameter {name!r} (#{index + 1}) is not accepted"
            continue
        ours = ours_positional[index]
        if check_names and ours.name != name and not ours_varkw:
            return f"positional parameter #{index + 1} is {ours.name!r}, DeepSpeed's is {name!r}"
        if has_default and ours.default is kind.empty:
            return f"DeepSpeed lets callers omit {name!r}; here it has no default"
    for extra in ours_positional[len(member.positional):]:
        if extra.default is kind.empty:
            return f"parameter {extra.name!r} is required here but DeepSpeed's callers never pass it"
    if member.vararg and not ours_var:
        return "DeepSpeed accepts *args; this signature does not"
    if member.varkw and not ours_varkw:
        return "DeepSpeed accepts **kwargs; this signature does not"
    for name, has_default in member.keyword_only:
        ours_kw = by_name.get(name)
        if ours_kw is None and not ours_varkw:
            return f"DeepSpeed's keyword-only parameter {name!r} is not accepted"
        if ours_kw is not None and has_default and ours_kw.default is kind.empty:
            return f"DeepSpeed lets callers omit keyword {name!r}; here it has no default"
    return ""
