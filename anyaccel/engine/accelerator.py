"""The training engine's ``Accelerator`` component: this process's device, bound and ready for a model.

An engine (a ColossalAI-style Booster, a Lightning-Fabric-style strategy, a plain training script) holds
one ``Accelerator`` next to its precision, checkpoint and parallelism components. The names follow the
field: ``bind()`` and ``configure_model(model)`` are ColossalAI Booster's ``Accelerator``
(``colossalai/booster/accelerator.py``), ``auto_device_count()`` is Lightning Fabric's. Unlike ColossalAI's
(cpu and cuda only, ``torch.cuda`` called directly), it serves every accelerator anyaccel knows (cpu, cuda
and ROCm, xpu, npu, mps and plug-ins) through the ``get_accelerator()`` object; the runtime calls all go
through that object.

Which device: on device types where each local process needs a device of its own (GPUs, NPUs), the local
rank indexes the devices this process sees, after the accelerator's visible-devices variables
(``CUDA_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``, ``ASCEND_RT_VISIBLE_DEVICES``...) have filtered them; a
process that sees exactly one device while such a variable is set was given that device by its launcher
(SLURM ``--gpus-per-task=1``, one-GPU containers) and uses it whatever its local rank. On
[`SHARED_DEVICE_TYPES`][anyaccel.engine.accelerator.SHARED_DEVICE_TYPES] every local process uses the one device.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import torch
from typing_extensions import override

from anyaccel.engine.collectives import supports_collectives
from anyaccel.engine.errors import LocalRankOutOfRangeError
from anyaccel.engine.launchers import LaunchEnvironment, detect_launch

if TYPE_CHECKING:
    from anyaccel.accelerator import DeepSpeedAccelerator

logger = logging.getLogger(__name__)

__all__ = ["SHARED_DEVICE_TYPES", "Accelerator", "local_device_index"]

#: Device types of which a machine has one device that all its processes share: the host CPU and Apple's
#: GPU (MPS). Every other device type gives each local process its own device.
SHARED_DEVICE_TYPES = frozenset({"cpu", "mps"})

ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


def local_device_index(
    launch: LaunchEnvironment, device_count: int, accelerator_name: str, visible: Mapping[str, str]
) -> int:
    """The index, among the devices this process sees, of the device its local rank should use.

    Args:
        launch: the process's launcher environment (its ``local_rank`` and where it came from).
        device_count: devices of this accelerator visible to the process (after visible-devices filtering).
        accelerator_name: for messages (``"cuda"``).
        visible: the accelerator's visible-devices variables that are set, with their values.

    Returns:
        ``launch.local_rank`` when it is below ``device_count``; 0 when the process sees exactly one device
        and a visible-devices variable is set (the launcher gave it that device).

    Raises:
        LocalRankOutOfRangeError: no device, or more local ranks than devices without per-process binding.
    """
    if launch.local_rank < device_count:
        return launch.local_rank
    if device_count == 1 and visible:
        return 0
    variables = launch.variables("local_rank", "local_world_size")
    variables.update(visible)
    seen = ", ".join(f"{name}={value!r}" for name, value in visible.items()) or "no visible-devices variable set"
    raise LocalRankOutOfRangeError(
        f"local rank {launch.local_rank} needs a {accelerator_name} device of its own, and this process sees "
        f"{device_count} ({seen})", launch.source, variables,
        f"start at most {device_count} process(es) per node (torchrun --nproc_per_node {max(device_count, 1)}), "
        "make more devices visible, or give each process its own device through the visible-devices variable",
    )


class Accelerator:
    """The engine component that manages this process's computation device.

    Args:
        accelerator: the anyaccel accelerator to use; ``anyaccel.get_accelerator()`` when None (on first use).
        launch: the launcher environment; read with [`detect_launch`][anyaccel.engine.launchers.detect_launch] from
            ``os.environ`` when None (on first use).

    Construction reads nothing and touches no device; each property reads what it needs on first use.

    Example:
        >>> acc = Accelerator()
        >>> acc.bind()                      # set the current device of this process
        >>> model = acc.configure_model(model)
    """

    def __init__(
        self, accelerator: DeepSpeedAccelerator | None = None, *, launch: LaunchEnvironment | None = None
    ) -> None:
        self._accelerator = accelerator
        self._launch = launch
        self._index: int | None = None
        self._index_known = False
        self._bound = False

    # ------------------------------------------------------------------ what the process runs on
    @property
    def accelerator(self) -> DeepSpeedAccelerator:
        """The anyaccel accelerator object all runtime calls go through.

        Side effects (first use, when none was given): ``get_accelerator()`` selects and caches one.
        """
        if self._accelerator is None:
            from anyaccel.accelerator import get_accelerator

            self._accelerator = get_accelerator()
        return self._accelerator

    @property
    def name(self) -> str:
        """The accelerator's name (``"cuda"``, ``"cpu"``...)."""
        return str(self.accelerator._name)

    @property
    def device_type(self) -> str:
        """The torch device type (``"cuda"`` also on ROCm)."""
        return self.accelerator.device_type

    @property
    def launch(self) -> LaunchEnvironment:
        """The launcher environment this component places the process by.

        Raises:
            DistributedEnvironmentError: (first use) the environment is malformed; see ``detect_launch``.
        """
        if self._launch is None:
            self._launch = detect_launch()
        return self._launch

    @property
    def local_rank(self) -> int:
        """This process's rank among the processes of its node (0 for a single process)."""
        return self.launch.local_rank

    @property
    def device_count(self) -> int:
        """Devices of this accelerator visible to the process (``accelerator.device_count()``).

        On the CPU accelerator this is the number of local processes, as in DeepSpeed.
        """
        return int(self.accelerator.device_count())

    def auto_device_count(self) -> int:
        """Lightning Fabric's name for [`device_count`][anyaccel.engine.accelerator.Accelerator.device_count]: the
        devices a ``devices="auto"`` run would use."""
        return self.device_count

    def _visible(self) -> dict[str, str]:
        """The accelerator's visible-devices variables that are set, with their values (read now)."""
        return {name: os.environ[name] for name in self.accelerator.visible_devices_envs() if name in os.environ}

    @property
    def device_index(self) -> int | None:
        """Index of this process's device among those it sees; None on
        [`SHARED_DEVICE_TYPES`][anyaccel.engine.accelerator.SHARED_DEVICE_TYPES].

        Raises:
            LocalRankOutOfRangeError: more local ranks than devices (see `local_device_index`).

        Side effects (first use): ``accelerator.device_count()`` (a driver query, no device context on CUDA);
        reads the visible-devices variables.
        """
        if not self._index_known:
            if self.device_type in SHARED_DEVICE_TYPES:
                self._index = None
            else:
                self._index = local_device_index(self.launch, self.device_count, self.name, self._visible())
            self._index_known = True
        return self._index

    @property
    def device(self) -> torch.device:
        """This process's device: ``cuda:<index>``, ``xpu:<index>``..., or ``cpu`` / ``mps``.

        Raises:
            LocalRankOutOfRangeError: see [`device_index`][anyaccel.engine.accelerator.Accelerator.device_index].
        """
        index = self.device_index
        return self.accelerator.device() if index is None else self.accelerator.device(index)

    @property
    def device_ids(self) -> list[int] | None:
        """The ``device_ids`` argument of ``DistributedDataParallel`` for this process: ``[index]`` on a device
        of its own, None on [`SHARED_DEVICE_TYPES`][anyaccel.engine.accelerator.SHARED_DEVICE_TYPES] (where DDP requires
        None)."""
        index = self.device_index
        return None if index is None else [index]

    @property
    def backend(self) -> str:
        """The ``torch.distributed`` backend for this device (``accelerator.communication_backend_name()``)."""
        return self.accelerator.communication_backend_name()

    @property
    def supports_collectives(self) -> bool:
        """True when [`backend`][anyaccel.engine.accelerator.Accelerator.backend] exists in this torch build and its
        collectives accept tensors on this
        device type (False on MPS: gloo takes CPU and CUDA tensors only). See ``collectives.py``."""
        return supports_collectives(self.backend, self.device_type)

    # ------------------------------------------------------------------ what the engine calls
    def bind(self) -> torch.device:
        """Make this process's device its current device, once; later calls return the device and do nothing.

        Returns:
            [`device`][anyaccel.engine.accelerator.Accelerator.device].

        Raises:
            LocalRankOutOfRangeError: see [`device_index`][anyaccel.engine.accelerator.Accelerator.device_index].

        Side effects: ``accelerator.set_device(index)`` on device types with per-process devices, which
        initialises the device runtime for this process (a CUDA context is created lazily by torch, on the
        first allocation); nothing on [`SHARED_DEVICE_TYPES`][anyaccel.engine.accelerator.SHARED_DEVICE_TYPES].
        """
        device = self.device
        if not self._bound:
            if self.device_index is not None:
                self.accelerator.set_device(self.device_index)
            self._bound = True
            logger.debug("bound local rank %d to %s", self.local_rank, device)
        return device

    def configure_model(self, model: ModuleT) -> ModuleT:
        """Put ``model``'s parameters and buffers on this process's device (binding it first).

        Idempotent: a model already there is returned as it is, with no copy; ``nn.Module.to`` moves in
        place, so the same object is returned either way.

        Args:
            model: an ``nn.Module`` (possibly already wrapped, e.g. by ``DistributedDataParallel``).

        Returns:
            ``model``, on [`device`][anyaccel.engine.accelerator.Accelerator.device].

        Raises:
            LocalRankOutOfRangeError: see [`device_index`][anyaccel.engine.accelerator.Accelerator.device_index].

        Side effects: [`bind`][anyaccel.engine.accelerator.Accelerator.bind]; copies tensors to the device when they are
        elsewhere.
        """
        device = self.bind()
        tensors = [*model.parameters(), *model.buffers()]
        if all(_on(t.device, device) for t in tensors):
            return model
        return model.to(device)

    @override
    def __repr__(self) -> str:
        accelerator = self.name if self._accelerator is not None else "not selected yet"
        local_rank = self._launch.local_rank if self._launch is not None else "not read yet"
        return f"Accelerator(accelerator={accelerator!r}, local_rank={local_rank!r})"


def _on(actual: torch.device, wanted: torch.device) -> bool:
    """True when a tensor on ``actual`` is on ``wanted`` (``cuda:0`` matches ``cuda:0``; ``cpu`` matches ``cpu``)."""
    return actual.type == wanted.type and (wanted.index is None or actual.index == wanted.index)
