"""The schema language of op functions: torch's, written without the function name.

Schemas use torch's schema language (``torch/csrc/jit/frontend/function_schema_parser.cpp``), written
without the function name: ``"(Tensor(a!)[] params, Tensor[] grads, float lr) -> ()"``. Functions a native
build registers use the subset with a C++ mapping ([`CXX_TYPES`][anyaccel.spec.schema.CXX_TYPES],
[`CXX_RETURNS`][anyaccel.spec.schema.CXX_RETURNS]); functions
offered only by Python-level implementations (``custom_op``/``triton_op``) may also take optional tensors
(``Tensor? weight``) and dtypes (``ScalarType accum_dtype``) and return tuples (``-> (Tensor, Tensor)``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anyaccel.spec.errors import SpecError
from anyaccel.spec.targets import resolve

#: Schema argument type -> the C++ parameter type a kernel declares for it (``csrc/includes/stable/boxing.h``).
CXX_TYPES: dict[str, str] = {
    "Tensor[]": "const ::anyaccel::stable::TensorList&",
    "Tensor": "const ::anyaccel::stable::Tensor&",
    "int": "int64_t",
    "float": "double",
    "bool": "bool",
    "str": "std::string",
}
#: Schema return type -> the C++ return type.
CXX_RETURNS: dict[str, str] = {"()": "void", "str": "std::string", "int": "int64_t",
                               "Tensor": "::anyaccel::stable::Tensor"}

#: torch dtype name -> ``c10::ScalarType`` enumerator name (what the C++ X-macros use).
SCALAR_TYPES: dict[str, str] = {"float32": "Float", "bfloat16": "BFloat16", "float16": "Half", "none": "Undefined"}

_ARG = re.compile(r"^(?P<type>Tensor\??|int|float|bool|str|ScalarType)(?P<alias>\([a-z]!?\))?(?P<list>\[\])?"
                  r"\s+(?P<name>[A-Za-z_]\w*)$")
#: Return types a Python-level function may have (one of these, or a parenthesised tuple of them, or ``()``).
PYTHON_RETURNS = frozenset({"Tensor", "int", "float", "bool", "str"})


@dataclass(frozen=True)
class Argument:
    """One parsed schema argument.

    Attributes:
        name: the argument name (``"params"``).
        type: the base schema type with ``[]`` for lists (``"Tensor[]"``, ``"float"``).
        mutable: whether the schema marks it written in place (``Tensor(a!)``).
    """

    name: str
    type: str
    mutable: bool


@dataclass(frozen=True)
class Function:
    """One function of an op family.

    Attributes:
        name: the function name, also the torch op name inside a build's namespace (``"adam_step"``).
        schema: arguments and returns in torch's schema language, without the name.
        fake: ``"module:function"`` of the validating fake (meta) implementation, or None for functions
            without tensor arguments.
        ranges: ``(argument, interval)`` pairs for scalar arguments, e.g. ``("beta1", "[0, 1)")``: checked
            by the kernels (generated into the schema header), the fakes and the front ends
            ([`anyaccel.ops.validation`][anyaccel.ops.validation]), so the range is written once.
        doc: one line for the report and docs.
    """

    name: str
    schema: str
    fake: str | None = None
    ranges: tuple[tuple[str, str], ...] = ()
    doc: str = ""

    @property
    def full_schema(self) -> str:
        """``name + schema``, the string passed to ``torch.library.define`` / ``m.def``."""
        return f"{self.name}{self.schema}"

    @functools.cached_property
    def arguments(self) -> tuple[Argument, ...]:
        """The parsed arguments.

        Raises:
            SpecError: an argument is not of the form ``<type>[(x!)][[]] <name>`` with a type of
                [`CXX_TYPES`][anyaccel.spec.schema.CXX_TYPES].
        """
        args_text = self._split()[0]
        out = []
        for raw in filter(None, (a.strip() for a in args_text.split(","))):
            m = _ARG.match(raw)
            if m is None:
                raise SpecError(f"function {self.name!r}: argument {raw!r} is not '<type>[(a!)][[]] <name>' with a "
                                f"type in {sorted(CXX_TYPES) + ['ScalarType', 'Tensor?']}")
            out.append(Argument(m["name"], m["type"] + (m["list"] or ""), bool(m["alias"] and "!" in m["alias"])))
        return tuple(out)

    @property
    def returns(self) -> str:
        """The return type text (``"()"``, ``"str"``)."""
        return self._split()[1]

    @property
    def return_types(self) -> tuple[str, ...]:
        """The returned types in order: ``()`` for none, ``("Tensor", "Tensor")`` for a tuple.

        Raises:
            SpecError: a returned type is not one of [`PYTHON_RETURNS`][anyaccel.spec.schema.PYTHON_RETURNS].
        """
        text = self.returns
        inner = text[1:-1] if text.startswith("(") and text.endswith(")") else text
        types = tuple(t.strip() for t in inner.split(",") if t.strip())
        bad = [t for t in types if t not in PYTHON_RETURNS]
        if bad:
            raise SpecError(f"function {self.name!r}: return type {bad[0]!r} is not one of {sorted(PYTHON_RETURNS)}")
        return types

    @property
    def mutated(self) -> tuple[str, ...]:
        """Names of the arguments written in place (``custom_op``'s ``mutates_args``)."""
        return tuple(a.name for a in self.arguments if a.mutable)

    def cxx_signature(self) -> str:
        """The C++ function type every kernel of this function must have, e.g.
        ``void(const ::anyaccel::stable::TensorList&, int64_t, double)``.

        Raises:
            SpecError: an argument or return type has no C++ mapping.
        """
        if self.returns not in CXX_RETURNS:
            raise SpecError(f"function {self.name!r}: return type {self.returns!r} is not one of {sorted(CXX_RETURNS)}")
        missing = [f"{a.type} {a.name}" for a in self.arguments if a.type not in CXX_TYPES]
        if missing:
            raise SpecError(f"function {self.name!r}: argument(s) {', '.join(missing)} have no C++ type; a native "
                            f"kernel takes only {sorted(CXX_TYPES)}")
        params = ", ".join(CXX_TYPES[a.type] for a in self.arguments)
        return f"{CXX_RETURNS[self.returns]}({params})"

    def load_fake(self) -> Callable[..., Any] | None:
        """The fake implementation, imported on first use (None when the function has none)."""
        return resolve(self.fake) if self.fake else None

    def _split(self) -> tuple[str, str]:
        m = re.fullmatch(r"\s*\((?P<args>.*)\)\s*->\s*(?P<ret>.+?)\s*", self.schema)
        if m is None:
            raise SpecError(f"function {self.name!r}: schema {self.schema!r} is not '(<arguments>) -> <returns>'")
        return m["args"], m["ret"]


@dataclass(frozen=True)
class DtypeCombo:
    """One accepted dtype combination of an optimizer op's tensor lists.

    Attributes:
        param: dtype of ``params`` (the tensors the kernel updates).
        grad: dtype of ``grads``.
        state: dtype of every optimizer-state list.
        copy: dtype of ``model_copies``, or ``"none"`` when the list must be empty.
    """

    param: str
    grad: str
    state: str
    copy: str = "none"

    def as_tuple(self) -> tuple[str, str, str, str]:
        """``(param, grad, state, copy)``."""
        return (self.param, self.grad, self.state, self.copy)


