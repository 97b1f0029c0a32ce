"""The conversion tables of ``anyaccel migrate``: what maps to what, as data.

Every rewrite the codemod performs is driven by one of the tables below; the transformer holds no
per-name logic. The conversions follow DeepSpeed's accelerator proposal
(``docs/_tutorials/accelerator-abstraction-interface.md`` in the DeepSpeed repository) and the member list
of ``DeepSpeedAccelerator`` (``accelerator/abstract_accelerator.py``, v0.9 to v0.19).

This module imports nothing heavy: no libcst, no torch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

#: Import used by rewritten code, as ``from <module> import <name>``.
ACCELERATOR_MODULE = "anyaccel"
ACCELERATOR_FACTORY = "get_accelerator"

#: Inline comment that opts a line out of rewriting and of ``--check`` (as flake8's noqa comment does).
OPT_OUT_PATTERN = re.compile(r"#\s*anyaccel\s*:\s*ignore\b")

#: ``torch.cuda.<key>`` -> ``get_accelerator().<value>``. The accelerator member takes the same
#: arguments in the same order (checked against torch.cuda's signatures and DeepSpeed's interface), so
#: only the callee is replaced and the call's arguments, comments and formatting are kept.
RUNTIME_MEMBERS: Mapping[str, str] = {
    # device
    "device": "device",
    "set_device": "set_device",
    "current_device": "current_device",
    "device_count": "device_count",
    "synchronize": "synchronize",
    "is_available": "is_available",
    # RNG
    "get_rng_state": "get_rng_state",
    "set_rng_state": "set_rng_state",
    "manual_seed": "manual_seed",
    "manual_seed_all": "manual_seed_all",
    "initial_seed": "initial_seed",
    # streams and events (``Stream``/``Event`` are properties returning the class)
    "Stream": "Stream",
    "Event": "Event",
    "stream": "stream",
    "current_stream": "current_stream",
    "default_stream": "default_stream",
    # memory
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "reset_max_memory_allocated": "reset_max_memory_allocated",
    "memory_cached": "memory_cached",
    "max_memory_cached": "max_memory_cached",
    "reset_max_memory_cached": "reset_max_memory_cached",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    # data types
    "is_bf16_supported": "is_bf16_supported",
    # profiler ranges
    "nvtx.range_push": "range_push",
    "nvtx.range_pop": "range_pop",
    # graphs: torch.cuda.graph(g, pool=None, stream=None) matches capture_to_graph(graph, pool, stream)
    "graph": "capture_to_graph",
    # tensor types (properties returning a tensor factory)
    "BFloat16Tensor": "BFloat16Tensor",
    "ByteTensor": "ByteTensor",
    "DoubleTensor": "DoubleTensor",
    "FloatTensor": "FloatTensor",
    "HalfTensor": "HalfTensor",
    "IntTensor": "IntTensor",
    "LongTensor": "LongTensor",
}

#: ``torch.cuda.<key>(...)`` calls that map to an accelerator member with a different call shape:
#: key -> (member, number of positional arguments the member accepts). ``torch.cuda.CUDAGraph()``
#: becomes ``get_accelerator().create_graph()``.
RUNTIME_CALLS: Mapping[str, tuple[str, int]] = {
    "CUDAGraph": ("create_graph", 0),
}

#: Where ``torch.cuda.current_device()`` stands for a device rather than an index, it becomes this member.
CURRENT_DEVICE_AS_DEVICE = "current_device_name"

#: ``torch.cuda.amp.<key>`` -> (replacement callable, positional parameter names of the original in order).
#: The replacement takes the device type as its first argument (``torch.autocast(device_type, ...)``,
#: ``torch.amp.GradScaler(device, ...)``); the original's positional arguments are passed on by keyword
#: because the parameter orders differ (PyTorch docs: torch.autocast, torch.amp.GradScaler).
AMP_CALLS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "autocast": ("torch.autocast", ("enabled", "dtype", "cache_enabled")),
    "GradScaler": (
        "torch.amp.GradScaler",
        ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
    ),
}

#: ``torch.cuda.amp.<key>`` decorators -> ``torch.amp.<value>(device_type=...)`` (PyTorch >= 2.4).
AMP_DECORATORS: Mapping[str, str] = {
    "custom_fwd": "torch.amp.custom_fwd",
    "custom_bwd": "torch.amp.custom_bwd",
}

#: AMP entry points taking a device type: with ``"cuda"`` (or as ``torch.cuda.amp.*``) they are CUDA AMP, which
#: turns itself off where there is no CUDA; migrated, ``enabled`` also says ``device_name() != "cpu"``, so the
#: CPU accelerator keeps the original's full-precision run instead of switching CPU autocast on.
#: Each one's positional parameters after the device, by which positional arguments are passed on by keyword.
AMP_DEVICE_CALLEES: Mapping[str, tuple[str, ...]] = {
    "torch.autocast": ("dtype", "enabled", "cache_enabled"),
    "torch.amp.autocast": ("dtype", "enabled", "cache_enabled"),
    "torch.amp.GradScaler": ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
}

#: Keyword arguments whose value is a device (any callee): ``torch.zeros(..., device="cuda")``,
#: ``torch.load(..., map_location="cuda")``, ``torch.autocast(device_type="cuda")``.
DEVICE_KEYWORDS: frozenset[str] = frozenset({"device", "map_location", "device_type"})

#: Callees whose first positional argument is a device.
DEVICE_FIRST_ARG_CALLEES: frozenset[str] = frozenset(
    {"torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.Generator"}
)

#: Methods whose first positional argument is a device when it is a device string: ``x.to("cuda")``.
DEVICE_FIRST_ARG_METHODS: frozenset[str] = frozenset({"to"})

#: Assignment targets whose value is a device: a name equal to or ending with one of these.
DEVICE_NAME_SUFFIXES: tuple[str, ...] = ("device", "device_type")

#: Distributed calls whose argument is a communication backend: qualified-name suffix ->
#: (keyword name, positional index or None).
BACKEND_ARGUMENTS: Mapping[str, tuple[str, int | None]] = {
    "init_process_group": ("backend", 0),
    "new_group": ("backend", None),
    "init_distributed": ("dist_backend", 0),
}

#: Assignment targets whose value is a communication backend.
BACKEND_NAME_SUFFIXES: tuple[str, ...] = ("backend",)

#: Keywords whose value is a DDP/DataParallel device list or output device: on the CPU accelerator they must be
#: None (DDP refuses ``device_ids=[0]`` for a CPU module), so the rewrite passes None there.
DEVICE_LIST_KEYWORDS: frozenset[str] = frozenset({"device_ids", "output_device"})

#: Calls whose first argument is a device index: ``torch.cuda.set_device(i)``, ``torch.cuda.device(i)``.
INDEX_FIRST_ARG_CALLEES: frozenset[str] = frozenset({"torch.cuda.set_device", "torch.cuda.device"})

#: Keywords whose value is an integer process or device index in any call (``init_process_group(rank=r)``,
#: ``DistributedSampler(rank=r)``): a name passed there holds an int, so ``.to(r)`` means device ``r``.
INDEX_KEYWORDS: frozenset[str] = frozenset({"rank", "local_rank"})

#: Process launchers whose target function receives the process index (an int) as its first argument.
SPAWN_CALLEES: frozenset[str] = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})

#: Names that look like a device index (``rank``, ``gpu_id``...): found in a device position without a proof
#: that they hold an int, they are reported rather than rewritten.
INDEX_NAME_HINTS: tuple[str, ...] = (
    "rank", "gpu", "gpu_id", "gpu_idx", "gpu_index", "device_id", "device_idx", "device_index", "local_rank",
)

#: Integer arithmetic that keeps a device index an int: ``rank % torch.cuda.device_count()``.
#: Calls whose result is an int: ``int(...)`` and these methods (``get_accelerator().device_count()``).
INT_CALLS: frozenset[str] = frozenset({"int", "device_count", "current_device", "get_rank", "get_local_rank"})

#: The string a device check compares with (``device.type == "cuda"``, ``"cuda" in device``): such a check
#: becomes ``get_accelerator().on_accelerator(<operand>, exclude_cpu=True)``, "on the accelerator, which is not
#: the CPU", so a CPU run keeps taking the original's CPU branch.
CUDA_TYPE = "cuda"
DEVICE_CHECK_MEMBER = "on_accelerator"
DEVICE_CHECK_KEYWORD = "exclude_cpu"

#: Attribute names holding data where CUDA code names a device (an argparse ``--cuda`` flag, ``config.cuda``):
#: read without a call they are not the ``.cuda`` method.
CUDA_METHOD = "cuda"

#: The attribute names of the CUDA tensor/module API that a config object or an options namespace also uses.
CUDA_ATTRIBUTES: frozenset[str] = frozenset({"cuda", "is_cuda"})

#: Names that conventionally hold options or configuration (never a tensor or module): ``args.is_cuda`` is not
#: rewritten to ``on_accelerator(args)``, it is reported.
NAMESPACE_NAME_HINTS: frozenset[str] = frozenset(
    {"args", "opt", "opts", "options", "cfg", "config", "conf", "hparams", "params", "flags", "FLAGS", "settings"}
)

#: argparse's parsing methods: a name assigned their result is a namespace of options, not a tensor.
PARSE_METHODS: frozenset[str] = frozenset({"parse_args", "parse_known_args", "parse_intermixed_args"})

#: Module paths that are CUDA-only settings or facts: reported, since they do nothing on other devices.
CUDA_ONLY_PATHS: tuple[str, ...] = ("torch.backends.cudnn", "torch.backends.cuda", "torch.version.cuda")

#: Environment variables of the CUDA/NCCL stack (``CUDA_VISIBLE_DEVICES``, ``NCCL_DEBUG``,
#: ``PYTORCH_CUDA_ALLOC_CONF``): named in a string, they are reported.
CUDA_ENV_NAME = re.compile(r"^(?:PYTORCH_)?(?:CUDA|NCCL|CUDNN)_[A-Z0-9_]+$")

#: ``torch.accelerator`` members a rewrite may target, when the installed torch has them (feature-detected by
#: ``torch_api.torch_accelerator_members``): ``with torch.cuda.device(i):`` switches the current device, which
#: ``torch.accelerator.device_index(i)`` does on every accelerator; without it the rewrite falls back to
#: ``get_accelerator().device(i)``.
TORCH_ACCELERATOR_CONTEXTS: Mapping[str, str] = {"device": "device_index"}

#: The CUDA communication backend string and its accelerator replacement.
CUDA_BACKEND = "nccl"
BACKEND_MEMBER = "communication_backend_name"

#: The host-side alternative that, paired with a CUDA literal in ``a if cond else b``, proves the pair.
HOST_DEVICE = "cpu"
HOST_BACKEND = "gloo"

#: A CUDA device string: ``"cuda"`` or ``"cuda:<index>"``.
CUDA_DEVICE_STRING = re.compile(r"^cuda(?::(\d+))?$")

#: Tensor methods with no argument that become accelerator calls taking the tensor:
#: ``x.pin_memory()`` -> ``get_accelerator().pin_memory(x)``.
TENSOR_METHODS: Mapping[str, str] = {
    "pin_memory": "pin_memory",
    "is_pinned": "is_pinned",
}

#: Tensor properties that become accelerator calls: ``x.is_cuda`` -> ``get_accelerator().on_accelerator(x)``.
TENSOR_PROPERTIES: Mapping[str, str] = {"is_cuda": "on_accelerator"}

#: Keywords of ``Tensor.cuda``/``Module.cuda`` that ``.to(...)`` accepts unchanged.
CUDA_METHOD_PASSTHROUGH: frozenset[str] = frozenset({"non_blocking", "memory_format"})

#: argparse's method declaring an option: ``parser.add_argument(...)`` (also on argument groups).
OPTION_METHOD = "add_argument"
#: Keywords of ``add_argument`` that matter to the codemod: the default, the destination, the accepted values.
OPTION_DEFAULT, OPTION_DEST, OPTION_CHOICES = "default", "dest", "choices"


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why a place was left for a person, in three parts, so that every finding says *why*, not only what.

    Attributes:
        what: what was found and left as it is (a ``str.format`` template over the finding's fields).
        why: why the codemod cannot decide it alone: what is unknown or what a rewrite would risk.
        fix: what the person should do.
    """

    what: str
    why: str
    fix: str

    def format(self, **fields: str) -> str:
        """The finding's message: ``"<what>: <why>. Fix: <fix>"`` with ``fields`` substituted."""
        return f"{self.what}: {self.why}. Fix: {self.fix}".format(**fields)


#: Reasons given for code left alone, by kind (the kind is printed with each finding).
REASONS: dict[str, Reason] = {
    "no-equivalent": Reason(
        "{name} is left as it is",
        "the accelerator interface has no member that does the same on other devices",
        "port it by hand (guard it with get_accelerator().device_name() == 'cuda' if it is CUDA-only), "
        "or mark the line '# anyaccel: ignore'",
    ),
    "module-object": Reason(
        "the torch.cuda module is used as an object",
        "what is later looked up on the object cannot be followed, so no call through it can be rewritten safely",
        "call get_accelerator().<member>(...) where the object is used",
    ),
    "cuda-string": Reason(
        "string {value!r} is left as it is",
        "nothing here proves it is a device (a device=/map_location= keyword, the argument of .to() or "
        "torch.device(), a variable named *device, a 'cuda'/'cpu' pair); it may be a label, a key or a "
        "comparison, which a rewrite would change",
        "if it is a device, write get_accelerator().device_name()",
    ),
    "nccl-string": Reason(
        "string {value!r} is left as it is",
        "nothing here proves it is the communication backend (the backend of init_process_group/new_group/"
        "deepspeed.init_distributed, a variable named *backend, a 'nccl'/'gloo' pair); it may be a label, a "
        "key or a comparison, which a rewrite would change",
        "if it is the backend, write get_accelerator().communication_backend_name() (NCCL runs only on "
        "CUDA/ROCm GPUs)",
    ),
    "nccl-option-default": Reason(
        "{value!r} is the default of command-line option {option}",
        "{detail}",
        "if the option is the torch.distributed backend, use default=get_accelerator()."
        "communication_backend_name() (NCCL runs only on CUDA/ROCm GPUs; gloo, xccl, hccl elsewhere), and "
        "accept those names in its choices= if it has any",
    ),
    "cuda-option-default": Reason(
        "{value!r} is the default of command-line option {option}",
        "{detail}",
        "if the option is a device, use default=get_accelerator().device_name(), and accept the other "
        "device types in its choices= if it has any",
    ),
    "cuda-call-args": Reason(
        ".cuda(...) with {detail} is left as it is",
        "only a device (an index, a device string, a torch.device or None), non_blocking and memory_format "
        "can be carried over to .to(get_accelerator().device_name(device), ...)",
        "rewrite it as .to(get_accelerator().device_name(device)) by hand",
    ),
    "device-index": Reason(
        "{value} in a device position is left as it is",
        "its name suggests a device index, but nothing in this file proves it holds an int (an int annotation, "
        "int(...), a range() loop, a rank= keyword, torch.cuda.set_device); an int device means CUDA device "
        "<index> to torch, and fails where there is no CUDA",
        "if it is an index, write get_accelerator().device_name({value}); if it is a device, leave it",
    ),
    "cuda-field": Reason(
        "{value} is left as it is",
        "{name} may be a data field here, not the tensor property: the receiver's name is one that usually holds "
        "options or configuration, or this file declares an option, field or keyword named {name}",
        "if it is a tensor, write get_accelerator().on_accelerator(<tensor>, exclude_cpu=True)",
    ),
    "cuda-only-setting": Reason(
        "{name} is left as it is",
        "it is a CUDA-only setting or fact: on other accelerators a cuDNN/cuBLAS flag does nothing and "
        "torch.version.cuda is None, so code relying on it behaves differently there",
        "keep it if doing nothing elsewhere is right and mark the line '# anyaccel: ignore', or guard it with "
        "get_accelerator().device_name() == 'cuda'",
    ),
    "cuda-env": Reason(
        "environment variable {value!r} is left as it is",
        "it configures the CUDA/NCCL stack only; other accelerators read other variables (ZE_AFFINITY_MASK, "
        "ASCEND_RT_VISIBLE_DEVICES...)",
        "for the visible devices use get_accelerator().visible_devices_envs(); mark the line "
        "'# anyaccel: ignore' if it is CUDA-only on purpose",
    ),
    "cuda-method-ref": Reason(
        ".cuda is referenced without being called",
        "the bound method may be stored or passed on and called later with arguments the codemod cannot see",
        "use a function calling .to(get_accelerator().device_name()) instead",
    ),
    "tensor-method-args": Reason(
        ".{name}(...) with arguments is left as it is",
        "get_accelerator().{name}(tensor) takes only the tensor, so the arguments would be lost",
        "port it by hand",
    ),
    "amp-call-args": Reason(
        "{name}(...) with {detail} is left as it is",
        "the replacement (torch.autocast, torch.amp.GradScaler, the accelerator member) takes its parameters "
        "in another order, and these arguments cannot be passed on by keyword",
        "pass the arguments by keyword, or port the call by hand",
    ),
}

#: Why an option's ``default='nccl'``/``'cuda'`` was not rewritten (the ``detail`` of the finding), by case.
OPTION_DEFAULT_WHY: Mapping[str, str] = {
    "unused": "its value (.{dest} of the parsed arguments) is not passed, in this file, where a {role} is "
    "expected, so nothing proves it is one: it may be read in another module, logged or compared with strings",
    "choices": "its choices= list fixes the values a user may pass, and the accelerator's {role} may not be "
    "one of them",
    "no-dest": "its destination cannot be read from the call (a computed option name or dest=), so its "
    "uses cannot be followed",
}
