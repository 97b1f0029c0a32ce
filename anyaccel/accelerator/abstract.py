"""``DeepSpeedAccelerator``: DeepSpeed's accelerator interface, member for member, with a small abstract core.

Every member of DeepSpeed's ``accelerator/abstract_accelerator.py`` (v0.9 to v0.19.8;
``tests/accelerator/test_deepspeed_interface.py`` diffs the two classes whenever DeepSpeed is installed) is
here, accepting both the current and the classic signatures. Members that only some of DeepSpeed's concrete
accelerators have (``seed``, ``set_per_process_memory_fraction``, ``communication_backend_version``) are here
too, written once.

Only two methods are abstract (`is_available` and `communication_backend_name`) plus the
``_name`` attribute; everything else has a working default that forwards to the torch device module of the
accelerator's device type (``torch.get_device_module(device_type)``), so a plug-in written against the small
core keeps working as DeepSpeed's interface grows. The pinned host memory members live in
`PinnedHostMemory`, a base of this class.

Plug-ins written for DeepSpeed subclass this class without calling ``super().__init__()``, so no default may
depend on ``__init__`` having run: per-instance state has class-level defaults and is created lazily.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import importlib.util
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
from typing_extensions import override

from anyaccel.accelerator.device_module import module_function, optional_attribute
from anyaccel.accelerator.device_names import device_index_of, device_type_of
from anyaccel.accelerator.errors import UnsupportedCompileBackendError
from anyaccel.accelerator.host_memory import PinnedHostMemory
from anyaccel.accelerator.host_sync import HostStream, host_event_class, host_stream_class
from anyaccel.accelerator.tensor_types import TensorFactory

#: dtype -> name of torch's legacy tensor-type class (``torch.FloatTensor``, ``torch.cuda.FloatTensor``...).
_LEGACY_TENSOR_NAMES = {
    torch.bfloat16: "BFloat16Tensor",
    torch.uint8: "ByteTensor",
    torch.double: "DoubleTensor",
    torch.float: "FloatTensor",
    torch.half: "HalfTensor",
    torch.int: "IntTensor",
    torch.long: "LongTensor",
}

logger = logging.getLogger(__name__)

__all__ = ["DeepSpeedAccelerator", "OP_BUILDER_DIR"]

#: Python package holding the op builders (``op_builder_dir()``; see docs/architecture.md).
OP_BUILDER_DIR = "anyaccel.op_builder"


class DeepSpeedAccelerator(PinnedHostMemory, abc.ABC):
    """The accelerator interface. Subclass it (or a concrete accelerator) to add a device.

    Required of a subclass: a non-empty ``_name`` (class or instance attribute; also the torch device type
    unless ``_device_type`` says otherwise),
    [`is_available`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.is_available] and
    [`communication_backend_name`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.communication_backend_name].
    Optional class attributes describe the device as data:

    Attributes:
        _name: the accelerator's name (``"cuda"``, ``"cpu"``...), used for selection and op-builder lookup.
        _device_type: torch device type when it differs from ``_name``; None means ``_name``.
        _communication_backend_name: the ``torch.distributed`` backend name, DeepSpeed's private attribute.
        _compile_backend: the ``torch.compile`` backend (DeepSpeed's private attribute), ``"inductor"``.
        _synchronized_device: True when work completes before a call returns (CPU).
        _graph_class_name: the device module's graph class (``"CUDAGraph"``), None when it has no graphs.
        _visible_devices_envs: variables a launcher sets to restrict each process's devices.
        _export_envs: prefixes of variables a multi-node launcher forwards to remote nodes.
        _fp16_supported: whether float16 is a fast, supported training dtype.
        _fp64_supported: whether float64 is supported (False on MPS); DeepSpeed's ZeRO picks its gradient-norm
            dtype from it.
        _host_streams: use the host ``Stream``/``Event`` stand-ins (``host_sync``) instead of the device
            module's classes; None (default) means "when
            [`is_synchronized_device`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.is_synchronized_device]".
        _torch_pins_host_memory, _unified_host_memory, _pin_memory_alignment, _host_register: how the device
            pins host memory (`PinnedHostMemory`, a base of this class).
        _communication_library: the device module's attribute holding the collective library with a
            ``version()`` function (``"nccl"`` on CUDA), for
            [`communication_backend_version`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.communication_backend_version].
        supports_nvtx_domain: DeepSpeed's public class attribute:
            [`range_push`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.range_push] and
            [`range_pop`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.range_pop] honour NVTX domains
            (through the ``nvtx`` package when it is installed).
    """

    _name: str | None = None
    _device_type: str | None = None
    _communication_backend_name: str | None = None
    _compile_backend: str | None = "inductor"
    _synchronized_device: bool = False
    _graph_class_name: str | None = None
    _visible_devices_envs: Sequence[str] = ()
    _export_envs: Sequence[str] = ()
    _fp16_supported: bool = True
    _fp64_supported: bool = True
    _host_streams: bool | None = None
    _communication_library: str | None = None
    supports_nvtx_domain: bool = False

    # ------------------------------------------------------------------ the abstract core
    @abc.abstractmethod
    def is_available(self) -> bool:
        """True when at least one device of this accelerator is present and usable in this process."""

    @abc.abstractmethod
    def communication_backend_name(self) -> str:
        """The ``torch.distributed`` backend for this device (``"nccl"``, ``"xccl"``, ``"hccl"``, ``"gloo"``)."""

    def communication_backend_version(self) -> tuple[int, ...] | None:
        """Version of the collective library behind the backend, e.g. ``(2, 27, 3)`` for NCCL; None if unknown.

        Reads ``torch.<type>.<_communication_library>.version()`` (``torch.cuda.nccl.version()`` on CUDA, as
        DeepSpeed's CUDA accelerator, the only one of DeepSpeed's with this member).
        """
        library = getattr(self, "_communication_library", None)
        version = getattr(optional_attribute(self.device_type, library), "version", None) if library else None
        if version is None:
            return None
        value = version()
        return tuple(int(part) for part in value) if isinstance(value, (tuple, list)) else (int(value),)

    # ------------------------------------------------------------------ helpers
    @property
    @override
    def device_type(self) -> str:
        """The torch device type string of this accelerator (``_device_type`` or else ``_name``)."""
        return self._device_type or str(self._name)

    def _fn(self, name: str, member: str) -> Callable[..., Any]:
        """``torch.<device_type>.<name>``; raises ``UnsupportedOperationError`` naming ``member`` if absent."""
        return module_function(self.device_type, name, str(self._name), member)

    def _has(self, name: str) -> bool:
        return optional_attribute(self.device_type, name) is not None

    @staticmethod
    def _index_args(device_index: Any | None) -> tuple:
        """Positional device argument for torch functions: none when ``device_index`` is None."""
        return () if device_index is None else (device_index,)

    def _uses_host_streams(self) -> bool:
        """Whether ``Stream``/``Event``/``stream()`` use the host stand-ins (see ``_host_streams``)."""
        host = getattr(self, "_host_streams", None)
        return self.is_synchronized_device() if host is None else bool(host)

    # ------------------------------------------------------------------ device-behaviour flags
    def is_synchronized_device(self) -> bool:
        """True when device work completes before each call returns (only the CPU, in the built-ins)."""
        return bool(self._synchronized_device)

    def use_host_timers(self) -> bool:
        """True when wall-clock timers measure device work (defaults to
        [`is_synchronized_device`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.is_synchronized_device])."""
        return self.is_synchronized_device()

    def resolves_data_dependency(self) -> bool:
        """True when the device orders dependent work itself (defaults to
        [`is_synchronized_device`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.is_synchronized_device])."""
        return self.is_synchronized_device()

    def handles_memory_backpressure(self) -> bool:
        """True when allocation waits for frees itself (defaults to
        [`is_synchronized_device`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.is_synchronized_device])."""
        return self.is_synchronized_device()

    # ------------------------------------------------------------------ device APIs
    def device_name(self, device_index: int | str | torch.device | None = None) -> str:
        """``"<type>"`` when no index is named, else ``"<type>:<index>"`` (``"cuda"``, ``"cuda:1"``).

        Accepts what DeepSpeed's does (None, an int) and the device arguments that ``Tensor.cuda``
        accepts, always giving a valid device string: ``device_name(torch.device("cuda"))`` is ``"cuda"``,
        never ``"cuda:cuda"``.

        Args:
            device_index: None; an index (int >= 0, or a string of digits); a device string or
                ``torch.device`` of this accelerator's type or of ``"cuda"`` (code ported from CUDA), whose
                index, if any, is kept.

        Raises:
            TypeError: ``device_index`` is of another type (bool, float...).
            ValueError: a negative index, a string that is no device, or a device of another type.
        """
        index = device_index_of(device_index, self.device_type)
        return self.device_type if index is None else f"{self.device_type}:{index}"

    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device(<type>, device_index)`` (DeepSpeed's current behaviour)."""
        if device_index is None:
            return torch.device(self.device_type)
        return torch.device(self.device_type, device_index)

    def set_device(self, device_index: int) -> None:
        """Make ``device_index`` the current device of this process (``torch.<type>.set_device``)."""
        self._fn("set_device", "set_device")(device_index)

    def current_device(self) -> int:
        """The current device index (int). Initialises the device runtime on first use.

        A module answering with a device string (``torch.cpu.current_device()`` gives ``"cpu"``) is read
        as that device's index, 0 when it has none.
        """
        current = self._fn("current_device", "current_device")()
        if isinstance(current, (str, torch.device)):
            return torch.device(current).index or 0
        return int(current)

    def current_device_name(self) -> str:
        """``"<type>:<current index>"``, e.g. ``"cuda:0"``."""
        return f"{self.device_type}:{self.current_device()}"

    def device_count(self) -> int:
        """Number of devices visible to this process (after ``*_VISIBLE_DEVICES`` filtering)."""
        return int(self._fn("device_count", "device_count")())

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait for all work queued on ``device_index`` (the current device when None)."""
        return self._fn("synchronize", "synchronize")(*self._index_args(device_index))

    # ------------------------------------------------------------------ RNG
    def random(self) -> Any:
        """The ``torch.random`` module (what DeepSpeed returns)."""
        return torch.random

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Set the generator state (a uint8 CPU tensor from
        [`get_rng_state`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.get_rng_state]) of a device."""
        return self._fn("set_rng_state", "set_rng_state")(new_state, *self._index_args(device_index))

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """The generator state of a device (current when None) as a uint8 CPU tensor."""
        return self._fn("get_rng_state", "get_rng_state")(*self._index_args(device_index))

    def manual_seed(self, seed: int) -> None:
        """Seed the current device's generator."""
        return self._fn("manual_seed", "manual_seed")(seed)

    def manual_seed_all(self, seed: int) -> None:
        """Seed the generators of all devices of this type."""
        return self._fn("manual_seed_all", "manual_seed_all")(seed)

    def initial_seed(self) -> int:
        """The seed of the current device's generator."""
        return int(self._fn("initial_seed", "initial_seed")())

    def seed(self) -> None:
        """Seed the current device's generator with a non-deterministic random number (``torch.<type>.seed``).

        DeepSpeed has this member on its MPS accelerator only; here every accelerator has it.
        """
        self._fn("seed", "seed")()

    def default_generator(self, device_index: int) -> torch.Generator:
        """The default ``torch.Generator`` of device ``device_index``."""
        generators: Any = self._fn("default_generators", "default_generator")  # a tuple, not a function
        return generators[0 if device_index is None else device_index]

    # ------------------------------------------------------------------ streams and events
    @property
    def Stream(self) -> type:  # noqa: N802 (DeepSpeed's name)
        """The stream class (``torch.cuda.Stream``); a host stand-in for devices without streams."""
        cls = optional_attribute(self.device_type, "Stream")
        if cls is not None and not self._uses_host_streams():
            return cls
        return host_stream_class(self.device_type, lambda: self.synchronize())

    def stream(self, stream: Any) -> AbstractContextManager[Any]:
        """A context manager making ``stream`` current (``torch.cuda.stream``); a no-op without streams."""
        fn = optional_attribute(self.device_type, "stream")
        if fn is None or self._uses_host_streams() or isinstance(stream, HostStream):
            return contextlib.nullcontext(stream)
        return fn(stream)

    def current_stream(self, device_index: int | None = None) -> Any:
        """The current stream of a device (current device when None)."""
        fn = optional_attribute(self.device_type, "current_stream")
        if fn is None or self._uses_host_streams():
            return self.Stream()
        return fn(*self._index_args(device_index))

    def default_stream(self, device_index: int | None = None) -> Any:
        """The default stream of a device (current device when None)."""
        fn = optional_attribute(self.device_type, "default_stream")
        if fn is None or self._uses_host_streams():
            return self.current_stream(device_index)
        return fn(*self._index_args(device_index))

    @property
    def Event(self) -> type:  # noqa: N802 (DeepSpeed's name)
        """The event class (``torch.cuda.Event``); a host-clock stand-in for devices without events."""
        cls = optional_attribute(self.device_type, "Event")
        if cls is not None and not self._uses_host_streams():
            return cls
        return host_event_class(self.device_type, lambda: self.synchronize())

    def is_current_stream_capturing(self) -> bool:
        """True while the current stream is capturing a graph; False on devices without graphs."""
        fn = optional_attribute(self.device_type, "is_current_stream_capturing")
        return bool(fn()) if fn is not None else False

    # ------------------------------------------------------------------ memory (bytes)
    def empty_cache(self) -> None:
        """Release cached, unused device memory to the driver; a no-op when the device has no cache."""
        fn = optional_attribute(self.device_type, "empty_cache")
        if fn is not None:
            fn()

    def memory_allocated(self, device_index: int | None = None) -> int:
        """Bytes currently held by tensors on a device."""
        return int(self._fn("memory_allocated", "memory_allocated")(*self._index_args(device_index)))

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak of [`memory_allocated`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.memory_allocated] (bytes)
        since start or the last reset."""
        return int(self._fn("max_memory_allocated", "max_memory_allocated")(*self._index_args(device_index)))

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        """Reset the allocated-memory peak (``reset_peak_memory_stats``, which torch's alias calls)."""
        return self.reset_peak_memory_stats(device_index)

    def memory_cached(self, device_index: int | None = None) -> int:
        """Old name of [`memory_reserved`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.memory_reserved]
        (bytes)."""
        return self.memory_reserved(device_index)

    def max_memory_cached(self, device_index: int | None = None) -> int:
        """Old name of [`max_memory_reserved`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.max_memory_reserved]
        (bytes)."""
        return self.max_memory_reserved(device_index)

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        """Reset the reserved-memory peak (``reset_peak_memory_stats``)."""
        return self.reset_peak_memory_stats(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """The allocator's statistics dictionary (``torch.cuda.memory_stats`` keys; sizes in bytes)."""
        return dict(self._fn("memory_stats", "memory_stats")(*self._index_args(device_index)))

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Reset every peak statistic of a device's allocator."""
        return self._fn("reset_peak_memory_stats", "reset_peak_memory_stats")(*self._index_args(device_index))

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes held by the caching allocator on a device (allocated plus cached)."""
        return int(self._fn("memory_reserved", "memory_reserved")(*self._index_args(device_index)))

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Peak of [`memory_reserved`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.memory_reserved] (bytes) since
        start or the last reset."""
        return int(self._fn("max_memory_reserved", "max_memory_reserved")(*self._index_args(device_index)))

    def total_memory(self, device_index: int | None = None) -> int:
        """Total memory of a device in bytes (``get_device_properties(i).total_memory``)."""
        props = self._fn("get_device_properties", "total_memory")(*self._index_args(device_index))
        return int(props.total_memory)

    def set_per_process_memory_fraction(self, fraction: float, device_index: int | None = None) -> None:
        """Cap this process's share of device memory at ``fraction`` (0..1) of the total.

        Forwards to ``torch.<type>.set_per_process_memory_fraction`` (DeepSpeed has the member on MPS only).

        Raises:
            UnsupportedOperationError: the device module has no such function (CPU).
        """
        self._fn("set_per_process_memory_fraction", "set_per_process_memory_fraction")(
            fraction, *self._index_args(device_index))

    def available_memory(self, device_index: int | None = None) -> int:
        """Free device memory in bytes as the driver reports it (``mem_get_info``), counting other processes.

        Falls back to ``total_memory - memory_reserved`` (this process only) when the device module has no
        ``mem_get_info``.
        """
        fn = optional_attribute(self.device_type, "mem_get_info")
        if fn is not None:
            return int(fn(*self._index_args(device_index))[0])
        return self.total_memory(device_index) - self.memory_reserved(device_index)

    # ------------------------------------------------------------------ data types
    def is_bf16_supported(self) -> bool:
        """True when bfloat16 is supported (``torch.<type>.is_bf16_supported()``; False if unknown)."""
        fn = optional_attribute(self.device_type, "is_bf16_supported")
        return bool(fn()) if fn is not None else False

    def is_fp16_supported(self) -> bool:
        """True when float16 is a supported, fast dtype (class attribute ``_fp16_supported``)."""
        return bool(self._fp16_supported)

    def is_fp64_supported(self) -> bool:
        """True when float64 tensors work on this device (class attribute ``_fp64_supported``; False on MPS).

        DeepSpeed >= 0.19.8 reads it to choose the gradient-norm dtype (``runtime/zero/utils.py``).
        """
        return bool(self._fp64_supported)

    def supported_dtypes(self) -> list[torch.dtype]:
        """``[torch.float]`` plus ``torch.half`` and ``torch.bfloat16`` when supported, in that order."""
        dtypes = [torch.float]
        if self.is_fp16_supported():
            dtypes.append(torch.half)
        if self.is_bf16_supported():
            dtypes.append(torch.bfloat16)
        return dtypes

    # ------------------------------------------------------------------ profiler ranges, lazy calls, Triton
    def _nvtx_domain(self, domain: str | None) -> Any:
        """The ``nvtx`` package's domain object for ``domain``, or None.

        None unless the class sets ``supports_nvtx_domain``, ``domain`` is given and the ``nvtx`` package is
        installed (as DeepSpeed's CUDA accelerator). Domains are cached per instance (lazily: plug-ins need
        not call ``__init__``).
        """
        if domain is None or not getattr(self, "supports_nvtx_domain", False):
            return None
        domains = self.__dict__.setdefault("_nvtx_domains", {})
        if domain not in domains:
            nvtx = None
            if importlib.util.find_spec("nvtx") is not None:
                nvtx = importlib.import_module("nvtx")
            domains[domain] = nvtx.get_domain(domain) if nvtx is not None else None
        return domains[domain]

    def range_push(self, msg: str, domain: str | None = None, category: str | None = None) -> Any:
        """Open a profiler range named ``msg``; a no-op without NVTX.

        With ``domain`` (DeepSpeed >= 0.18) on an accelerator whose ``supports_nvtx_domain`` is True and the
        ``nvtx`` package installed, the range opens in that NVTX domain with ``category``; otherwise through
        ``torch.<type>.nvtx.range_push`` (no domains). Returns what the profiler returns (the nesting depth
        for torch's NVTX) or None.
        """
        nvtx_domain = self._nvtx_domain(domain)
        if nvtx_domain is not None:
            return nvtx_domain.push_range(message=msg, category=category)
        nvtx = optional_attribute(self.device_type, "nvtx")
        push = getattr(nvtx, "range_push", None)
        return push(msg) if push is not None else None

    def range_pop(self, domain: str | None = None) -> Any:
        """Close the innermost range opened by
        [`range_push`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.range_push] (in ``domain`` when it
        was opened in one)."""
        nvtx_domain = self._nvtx_domain(domain)
        if nvtx_domain is not None:
            return nvtx_domain.pop_range()
        nvtx = optional_attribute(self.device_type, "nvtx")
        pop = getattr(nvtx, "range_pop", None)
        return pop() if pop is not None else None

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        """Run ``callback`` once the device runtime is initialised (now, if it is or has no lazy init)."""
        fn = optional_attribute(self.device_type, "_lazy_call")
        if fn is not None:
            return fn(callback)
        return callback()

    def is_triton_supported(self) -> bool:
        """True when Triton kernels can run on this accelerator (False by default)."""
        return False

    def prefer_triton_grouped_mm(self) -> bool:
        """True when Triton grouped GEMM should be preferred over the vendor library (DeepSpeed >= 0.18)."""
        return False

    # ------------------------------------------------------------------ graph capture
    def create_graph(self) -> Any:
        """A new graph object (``torch.cuda.CUDAGraph()``), or None on devices without graphs."""
        cls = optional_attribute(self.device_type, self._graph_class_name) if self._graph_class_name else None
        return cls() if cls is not None else None

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> AbstractContextManager[Any]:
        """A context manager capturing the work issued inside it into ``graph`` (``torch.cuda.graph``).

        A no-op context when ``graph`` is None (what
        [`create_graph`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.create_graph] gives on devices without
        graphs).
        """
        fn = optional_attribute(self.device_type, "graph")
        if graph is None or fn is None:
            return contextlib.nullcontext()
        return fn(graph, pool=pool, stream=stream)

    def replay_graph(self, graph: Any) -> None:
        """Replay a captured graph; does nothing for None."""
        if graph is not None:
            graph.replay()

    # ------------------------------------------------------------------ tensor types
    #: Module holding torch's legacy tensor-type classes for this device (``"torch"`` on CPU, ``"torch.cuda"``
    #: on CUDA), or None where torch has none. Where set, the tensor-type properties return those classes,
    #: as DeepSpeed does, so ``x.type(acc.FloatTensor)`` keeps working; elsewhere a ``TensorFactory``.
    _legacy_tensor_module: ClassVar[str | None] = None

    def _factory(self, dtype: torch.dtype) -> Any:
        module_name = getattr(self, "_legacy_tensor_module", None)
        legacy_name = _LEGACY_TENSOR_NAMES.get(dtype)
        if module_name and legacy_name:
            legacy = getattr(importlib.import_module(module_name), legacy_name, None)
            if legacy is not None:
                return legacy
        return TensorFactory(dtype, self.device_type)

    @property
    def BFloat16Tensor(self) -> Any:  # noqa: N802
        """Factory of bfloat16 tensors on this device (data or legacy size form, see ``TensorFactory``)."""
        return self._factory(torch.bfloat16)

    @property
    def ByteTensor(self) -> Any:  # noqa: N802
        """Factory of uint8 tensors on this device."""
        return self._factory(torch.uint8)

    @property
    def DoubleTensor(self) -> Any:  # noqa: N802
        """Factory of float64 tensors on this device."""
        return self._factory(torch.double)

    @property
    def FloatTensor(self) -> Any:  # noqa: N802
        """Factory of float32 tensors on this device."""
        return self._factory(torch.float)

    @property
    def HalfTensor(self) -> Any:  # noqa: N802
        """Factory of float16 tensors on this device."""
        return self._factory(torch.half)

    @property
    def IntTensor(self) -> Any:  # noqa: N802
        """Factory of int32 tensors on this device."""
        return self._factory(torch.int)

    @property
    def LongTensor(self) -> Any:  # noqa: N802
        """Factory of int64 tensors on this device."""
        return self._factory(torch.long)

    # ------------------------------------------------------------------ tensor placement
    def on_accelerator(self, tensor: torch.Tensor | torch.device | str, *, exclude_cpu: bool = False) -> bool:
        """True when ``tensor`` lives on a device of this accelerator's type (DeepSpeed's member).

        Args:
            tensor: a tensor (anything with a ``torch.device`` in ``.device``), or a ``torch.device`` or a
                device string or type (``"cuda:0"``, ``"xpu"``), so that a device check such as CUDA code's
                ``device.type == "cuda"`` has one spelling on every accelerator.
            exclude_cpu: False (DeepSpeed's behaviour): on the CPU accelerator, CPU tensors are on it.
                True: answer "on this accelerator, which is not the CPU", always False on the CPU
                accelerator; the meaning of CUDA code's ``x.is_cuda`` and ``device.type == "cuda"``, whose
                GPU branches must not run on a CPU-only machine.

        Raises:
            TypeError: ``tensor`` is none of the accepted kinds.
            ValueError: ``tensor`` is a string that names no device.
        """
        if exclude_cpu and self.device_type == "cpu":
            device_type_of(tensor)  # still reject what names no device
            return False
        return device_type_of(tensor) == self.device_type

    # ------------------------------------------------------------------ op builders
    def op_builder_dir(self) -> str:
        """The package holding the op builders: ``"anyaccel.op_builder"``."""
        return OP_BUILDER_DIR

    def get_op_builder(self, class_name: str) -> type | None:
        """The op-builder class ``class_name`` for this accelerator, or None if this accelerator lacks it.

        Delegates to ``anyaccel.ops.registry.get_builder_class(class_name, self._name)`` (imported
        here, so the accelerator layer never imports the build layer before it is needed).

        Raises:
            ValueError: (``UnknownOpError``) no accelerator knows ``class_name``.
        """
        from anyaccel.ops.registry import get_builder_class

        return get_builder_class(class_name, str(self._name))

    def create_op_builder(self, class_name: str) -> Any:
        """An instance of [`get_op_builder`][anyaccel.accelerator.abstract.DeepSpeedAccelerator.get_op_builder]'s class,
        or None when the accelerator lacks the op."""
        builder_class = self.get_op_builder(class_name)
        return builder_class() if builder_class is not None else None

    def build_extension(self) -> type:
        """``torch.utils.cpp_extension.BuildExtension`` (imported on call: it loads compiler machinery)."""
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    # ------------------------------------------------------------------ launcher environment
    def export_envs(self) -> list[str]:
        """Prefixes of environment variables a multi-node launcher forwards (``["NCCL"]`` on CUDA)."""
        return list(self._export_envs)

    def visible_devices_envs(self) -> list[str]:
        """Variables restricting a process's devices (``["CUDA_VISIBLE_DEVICES"]`` on CUDA)."""
        return list(self._visible_devices_envs)

    def set_visible_devices_envs(self, current_env: dict[str, str], local_accelerator_ids: Sequence[int]) -> None:
        """Write ``",".join(map(str, local_accelerator_ids))`` into each visible-devices variable of ``current_env``.

        Side effects: mutates ``current_env`` (a launcher's environment mapping), never ``os.environ``
        unless that is what the caller passes.
        """
        value = ",".join(map(str, local_accelerator_ids))
        for env in self.visible_devices_envs():
            current_env[env] = value

    # ------------------------------------------------------------------ torch.compile backend
    def get_compile_backend(self) -> str:
        """The ``torch.compile`` backend name to use on this accelerator (``"inductor"`` by default)."""
        return getattr(self, "_compile_backend", None) or "inductor"

    def set_compile_backend(self, backend: str) -> None:
        """Choose the ``torch.compile`` backend after checking torch knows it.

        Side effects: imports Dynamo (about 1 s the first time).

        Raises:
            UnsupportedCompileBackendError: (a ``ValueError``) ``backend`` is not in
                ``torch.compiler.list_backends(exclude_tags=())``; the message lists the supported names.
        """
        supported = torch.compiler.list_backends(exclude_tags=())
        if backend not in supported:
            raise UnsupportedCompileBackendError(backend, supported)
        self._compile_backend = backend

    # ------------------------------------------------------------------ removed in DeepSpeed, still called
    def amp(self) -> Any:
        """The device's ``amp`` module (``torch.cuda.amp``) or None; removed from DeepSpeed, kept for callers."""
        return optional_attribute(self.device_type, "amp")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self._name!r}>"
