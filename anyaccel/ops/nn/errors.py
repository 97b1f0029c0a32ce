"""The errors of the model ops ([`anyaccel.ops.nn`][anyaccel.ops.nn]).

Every message names the op, the offending value, what is accepted and the fix, in the form
``"<op>: <what> is <value>; accepted: <rule>. <fix>"``. The validating fakes raise the same errors as the
kernels' wrappers, so a bad call fails the same way in eager mode and while ``torch.compile`` traces it.
"""

from __future__ import annotations


class OpInputError(ValueError):
    """A tensor or argument that the op does not accept (dtype, device, shape, choice)."""


class UnsupportedOpError(NotImplementedError):
    """A valid request that this op does not implement (e.g. ``reduction="none"`` for the fused linear
    cross-entropy); the message says what to use instead."""


class TargetIndexError(OpInputError, IndexError):
    """A class index outside ``[0, V)`` that is not ``ignore_index``: an `IndexError`, as torch's
    ``cross_entropy`` raises, and an [`OpInputError`][anyaccel.ops.nn.errors.OpInputError]."""
