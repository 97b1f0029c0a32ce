"""Typed errors of the engine's device and distributed set-up.

Every error names the variables and values it read, what would have been accepted, and the fix, so the
message alone tells a user what to change in the launch command. All are picklable (a worker's error
travels to its parent intact).
"""

from __future__ import annotations

from collections.abc import Mapping

from typing_extensions import override

__all__ = [
    "EngineError",
    "DistributedEnvironmentError",
    "InvalidEnvironmentValueError",
    "IncompleteLaunchEnvironmentError",
    "RankOutOfRangeError",
    "LocalRankOutOfRangeError",
    "MissingMasterAddressError",
    "ProcessGroupMismatchError",
    "DistributedUnavailableError",
]


class EngineError(Exception):
    """Base class of every error raised by ``anyaccel.engine``."""


class DistributedEnvironmentError(EngineError, ValueError):
    """The launcher's environment (or an existing process group) is malformed or inconsistent.

    Args:
        problem: what is wrong, naming the values.
        source: the launcher whose variables were read (``"torchrun"``, ``"slurm"``...).
        variables: the variables involved and their values, in the order they should be shown.
        fix: what to change.

    Attributes:
        problem, source, variables, fix: as given.
    """

    def __init__(self, problem: str, source: str, variables: Mapping[str, str], fix: str) -> None:
        self.problem = problem
        self.source = source
        self.variables = dict(variables)
        self.fix = fix
        shown = ", ".join(f"{name}={value!r}" for name, value in self.variables.items()) or "no variables"
        super().__init__(f"{source}: {shown}: {problem}. Fix: {fix}")

    @override
    def __reduce__(self) -> tuple[type[DistributedEnvironmentError], tuple[str, str, dict[str, str], str]]:
        return type(self), (self.problem, self.source, self.variables, self.fix)


class InvalidEnvironmentValueError(DistributedEnvironmentError):
    """A variable holds something other than what the launcher writes (not an integer, out of range)."""


class IncompleteLaunchEnvironmentError(DistributedEnvironmentError):
    """Half of a launcher's pair of variables is set (``RANK`` without ``WORLD_SIZE``, or the reverse).

    Read as no launcher at all, the process would quietly train alone; torch's ``env://`` refuses it too.
    """


class RankOutOfRangeError(DistributedEnvironmentError):
    """The global rank is not below the world size."""


class LocalRankOutOfRangeError(DistributedEnvironmentError):
    """The local rank is not below the local world size, or there is no device of its own for it."""


class MissingMasterAddressError(DistributedEnvironmentError):
    """Several processes but no rendezvous address (``MASTER_ADDR``) to meet at."""


class ProcessGroupMismatchError(DistributedEnvironmentError):
    """An already-initialised process group disagrees with the environment or with the arguments."""


class DistributedUnavailableError(EngineError, RuntimeError):
    """This torch build has no ``torch.distributed`` (``torch.distributed.is_available()`` is False).

    Args:
        build: torch's version string, named in the message.
    """

    def __init__(self, build: str) -> None:
        self.build = build
        super().__init__(
            f"torch {build} is built without torch.distributed, so no process group can be set up. "
            "Fix: install a torch build with distributed support (every Linux and Windows wheel has it)."
        )

    @override
    def __reduce__(self) -> tuple[type[DistributedUnavailableError], tuple[str]]:
        return type(self), (self.build,)
