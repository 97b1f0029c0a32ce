"""The training engine's device layer: the ``Accelerator`` component and distributed set-up.

``Accelerator`` binds a process to its device and puts models there (ColossalAI Booster's ``bind()`` /
``configure_model()``); ``init_distributed()`` turns any launcher's environment (torchrun, deepspeed, MPI,
SLURM) into an initialised process group and returns an ``EnvironmentTable``. Built on
``anyaccel.get_accelerator()``, so it serves every accelerator anyaccel knows. See ``docs/engine.md``.

Importing this package imports torch and ``torch.distributed``; ``import anyaccel`` does not import it
until one of its names is used.
"""

from anyaccel.engine.accelerator import SHARED_DEVICE_TYPES, Accelerator
from anyaccel.engine.distributed import (
    DEFAULT_TIMEOUT,
    current_environment,
    destroy_distributed,
    init_distributed,
)
from anyaccel.engine.environment import EnvironmentTable
from anyaccel.engine.errors import (
    DistributedEnvironmentError,
    DistributedUnavailableError,
    EngineError,
    IncompleteLaunchEnvironmentError,
    InvalidEnvironmentValueError,
    LocalRankOutOfRangeError,
    MissingMasterAddressError,
    ProcessGroupMismatchError,
    RankOutOfRangeError,
)
from anyaccel.engine.launchers import LAUNCHERS, LaunchEnvironment, LauncherSpec, detect_launch

__all__ = [
    "Accelerator",
    "SHARED_DEVICE_TYPES",
    "EnvironmentTable",
    "init_distributed",
    "destroy_distributed",
    "current_environment",
    "DEFAULT_TIMEOUT",
    "LaunchEnvironment",
    "LauncherSpec",
    "LAUNCHERS",
    "detect_launch",
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
