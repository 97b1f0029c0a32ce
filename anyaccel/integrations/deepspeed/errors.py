"""Typed errors of the DeepSpeed integration; each names the value, what is accepted and the fix."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from anyaccel.accelerator.errors import ReconstructibleError

__all__ = [
    "DeepSpeedIntegrationError",
    "DeepSpeedNotInstalledError",
    "UntestedDeepSpeedVersionError",
    "DeepSpeedBuilderNotImplementedError",
    "DeepSpeedABIMissingError",
]


class DeepSpeedIntegrationError(ReconstructibleError):
    """Base class of every error raised by ``anyaccel.integrations.deepspeed`` (picklable: DeepSpeed's tests
    send exceptions from worker processes back to pytest)."""


class DeepSpeedNotInstalledError(DeepSpeedIntegrationError, ImportError):
    """``install()`` was called but the ``deepspeed`` distribution is not installed."""

    def __init__(self) -> None:
        super().__init__(
            "anyaccel.integrations.deepspeed.install() needs DeepSpeed, which is not installed in this "
            "environment. Install a tested version (pip install deepspeed==0.19.8), or do not call install()."
        )


class UntestedDeepSpeedVersionError(DeepSpeedIntegrationError, RuntimeError):
    """The installed DeepSpeed is not a version the integration was tested with.

    Args:
        found: the installed version string.
        tested: the versions this integration was tested with.
        override_env: the variable that turns this error into a warning.
    """

    def __init__(self, found: str, tested: Sequence[str], override_env: str) -> None:
        self.found = found
        self.tested = tuple(tested)
        self.override_env = override_env
        super().__init__(
            f"DeepSpeed {found} is installed, but anyaccel's DeepSpeed integration was tested only with "
            f"{', '.join(self.tested)}; DeepSpeed's private wiring (its accelerator validation, op-builder "
            f"bindings, op ABI) may have changed. Install a tested version (pip install "
            f"deepspeed=={self.tested[-1]}), or set {override_env}=1 to try this version anyway."
        )


class DeepSpeedBuilderNotImplementedError(DeepSpeedIntegrationError, ValueError):
    """DeepSpeed asked to load an op builder that anyaccel does not implement for this accelerator.

    A ``ValueError``, as DeepSpeed's own ``NotImplementedBuilder.load()`` raises.

    Args:
        builder: the DeepSpeed builder class name (``"AsyncIOBuilder"``).
        accelerator: the accelerator's name.
        implemented: the builder names anyaccel implements for that accelerator.
    """

    def __init__(self, builder: str, accelerator: str, implemented: Iterable[str]) -> None:
        self.builder = builder
        self.accelerator = accelerator
        self.implemented = sorted(implemented)
        super().__init__(
            f"anyaccel implements no {builder!r} for accelerator {accelerator!r} (it implements: "
            f"{', '.join(self.implemented) or 'none'}), so the DeepSpeed feature that needs it is unavailable "
            f"while anyaccel is installed into DeepSpeed. Turn that feature off in the DeepSpeed config, or run "
            f"without anyaccel.integrations.deepspeed.install() (unset ANYACCEL_DEEPSPEED) to use DeepSpeed's "
            f"own op builders."
        )


class DeepSpeedABIMissingError(DeepSpeedIntegrationError, AttributeError):
    """anyaccel's op module lacks functions DeepSpeed's callers use (``create_adam``, ``multi_tensor_adam``...).

    anyaccel's own op families declare DeepSpeed's module ABI in their specs, so this names a builder whose
    spec does not (a plug-in op family published under a DeepSpeed builder name). An ``AttributeError``,
    what DeepSpeed's optimizers would raise on the missing function.

    Args:
        builder: the DeepSpeed builder class name.
        op: anyaccel's op name.
        missing: the missing function names.
    """

    def __init__(self, builder: str, op: str, missing: Sequence[str]) -> None:
        self.builder = builder
        self.op = op
        self.missing = tuple(missing)
        super().__init__(
            f"anyaccel's {op!r} op (DeepSpeed's {builder}) does not offer DeepSpeed's module functions "
            f"{', '.join(self.missing)}. Declare them for the op family (an ABI in "
            f"anyaccel/integrations/deepspeed/abi/<family>.py, or the anyaccel.deepspeed_abi entry point of a "
            f"plug-in; see docs/adding_an_op.md), or run without anyaccel.integrations.deepspeed.install() "
            f"(unset ANYACCEL_DEEPSPEED) to use DeepSpeed's own {builder}."
        )
