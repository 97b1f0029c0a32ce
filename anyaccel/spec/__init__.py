"""Op specs: every op family described once, in a leaf package that imports nothing else of anyaccel.

An [`OpSpec`][anyaccel.spec.OpSpec] is the single source of truth for one op family (Adam, Lion, ...): its functions and
their schemas (`anyaccel.spec.schema`), the dtype combinations its kernels accept, its native builds
(`anyaccel.spec.builds`: sources and flags per backend) and its implementations with their priorities
(`anyaccel.spec.implementations`). Everything else is derived from the specs:

- the op registry ([`anyaccel.ops.registry`][anyaccel.ops.registry]): family -> builds and implementations, the builder
  classes
  made from the builds ([`anyaccel.op_builder.classes`][anyaccel.op_builder.classes]) and the loader's candidates;
- the schema header each native build compiles against (`anyaccel.op_builder.toolchains.schema`);
- the validating fakes registered for ``torch.compile`` and ``opcheck``;
- DeepSpeed's view ([`anyaccel.integrations.deepspeed`][anyaccel.integrations.deepspeed]), AOT selection, ``anyaccel
  report`` and
  ``anyaccel build``;
- the tests' parametrisation (``tests/spec/test_specs.py`` walks every spec).

Specs live in ``anyaccel/ops/<family>/spec.py`` as a module-level ``SPEC``, or deeper for a group of
families (``anyaccel/ops/nn/families/<family>/spec.py``: the model ops); [`all_op_specs`][anyaccel.spec.all_op_specs]
finds them by
that convention (`anyaccel.spec.discovery`, and through the ``anyaccel.ops`` entry-point group for
plug-in op families), so adding an op family edits no table. Importing a spec module is cheap: it imports
neither torch nor a builder; fakes and loaders are named as ``"module:attribute"`` strings
([`resolve`][anyaccel.spec.resolve]) and imported on first use.
"""

from __future__ import annotations

from anyaccel.spec.builds import BACKENDS, REGISTRATION_CXX_ARGS, NativeBuild
from anyaccel.spec.discovery import ENTRY_POINT_GROUP, all_op_specs, op_spec
from anyaccel.spec.errors import SpecError
from anyaccel.spec.family import OpSpec
from anyaccel.spec.implementations import Implementation
from anyaccel.spec.intervals import Interval
from anyaccel.spec.schema import (
    CXX_RETURNS,
    CXX_TYPES,
    PYTHON_RETURNS,
    SCALAR_TYPES,
    Argument,
    DtypeCombo,
    Function,
)
from anyaccel.spec.targets import resolve

__all__ = [
    "BACKENDS",
    "CXX_RETURNS",
    "CXX_TYPES",
    "ENTRY_POINT_GROUP",
    "PYTHON_RETURNS",
    "REGISTRATION_CXX_ARGS",
    "SCALAR_TYPES",
    "Argument",
    "DtypeCombo",
    "Function",
    "Implementation",
    "Interval",
    "NativeBuild",
    "OpSpec",
    "SpecError",
    "all_op_specs",
    "op_spec",
    "resolve",
]
