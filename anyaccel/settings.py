"""Every ``ANYACCEL_*`` environment variable, declared once: name, type, default, accepted values, one-line doc.

Code that needs a variable reads it through its declaration here (``settings.BUILD_TIMEOUT.get()``), which
parses the text into a typed value or raises `SettingError` naming the variable, the bad value, what
is accepted and the fix. ``docs/environment.md`` carries the table `markdown_table` renders;
``scripts/gen_environment_doc.py`` writes it, and its ``--check`` (run by
``tests/scripts/test_gen_environment_doc.py``) fails when the document and these declarations disagree.

Variables are read when the code that needs them runs, never at import. A leaf module: imports nothing else of
anyaccel (the op builders pass their own error class, a subclass of `SettingError`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

__all__ = [
    "SettingError",
    "Setting",
    "Text",
    "Flag",
    "Seconds",
    "PathSetting",
    "Choice",
    "CountOrChoice",
    "all_settings",
    "markdown_table",
]

#: The texts a `Flag` with ``words=True`` reads as on (any case).
ON_WORDS = ("1", "true", "yes", "on")


class SettingError(ValueError):
    """An environment variable holds a value that is not accepted.

    The message names the variable, the value, what is accepted and the fix.

    Attributes:
        name: the variable ("" when the error was made from a message only).
        value: its text.
    """

    def __init__(self, message: str, name: str = "", value: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.value = value

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.name, self.value))


def _environ(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


@dataclass(frozen=True)
class Setting:
    """One variable: what it is called, what it accepts, what unset means, who reads it.

    Attributes:
        name: the variable, e.g. ``"ANYACCEL_BUILD_TIMEOUT"``; a family of variables ends in ``<...>``
            (``"ANYACCEL_IMPL_<FAMILY>"``), and `named` gives one of them.
        doc: what it does, one line (the documentation's "effect").
        default: what unset (or empty) means, in words.
        read_by: the module(s) reading it, for the documentation.
    """

    name: str
    doc: str
    default: str
    read_by: str

    #: How the documentation describes the accepted values.
    KIND: ClassVar[str] = "text"

    def accepted(self) -> str:
        """The accepted values, in words (the documentation's "accepts")."""
        return self.KIND

    def named(self, part: str) -> str:
        """The variable of a family for ``part``: ``IMPL.named("adam")`` -> ``"ANYACCEL_IMPL_ADAM"``."""
        prefix, bracket, _ = self.name.partition("<")
        if not bracket:
            raise ValueError(f"{self.name} is one variable, not a family")
        return prefix + part.upper()

    def raw(self, env: Mapping[str, str] | None = None, name: str | None = None) -> str | None:
        """The variable's text, stripped; None when unset or empty.

        Args:
            env: the environment to read; ``os.environ`` when None.
            name: the variable to read instead of `name` (one of a family, `named`).

        Side effects: reads the environment.
        """
        value = _environ(env).get(name or self.name, "").strip()
        return value or None

    def error(self, value: str, error: type[SettingError] = SettingError, name: str | None = None) -> SettingError:
        """The typed error for a bad ``value``: names the variable, the value, what is accepted and the fix."""
        var = name or self.name
        return error(f"{var}={value!r} is not accepted: {self.accepted()}; fix: set it to one of these, or unset "
                     "it for the default", var, value)


@dataclass(frozen=True)
class Text(Setting):
    """A free text (a name, a command, a version); ``lower`` folds it to lower case; ``accepts`` describes it."""

    lower: bool = False
    accepts: str = "a name"

    def accepted(self) -> str:
        return self.accepts

    def get(self, env: Mapping[str, str] | None = None, name: str | None = None) -> str | None:
        """The text (stripped, folded with ``lower``), or None when unset or empty. Reads the environment."""
        value = self.raw(env, name)
        return value.lower() if value is not None and self.lower else value


@dataclass(frozen=True)
class Flag(Setting):
    """On or off. ``words``: ``1``, ``true``, ``yes``, ``on`` (any case) are on, anything else off; otherwise
    exactly ``on_value`` is on (and, with ``default_on``, anything but ``off_value``)."""

    words: bool = False
    on_value: str = "1"
    off_value: str = "0"
    default_on: bool = False

    KIND: ClassVar[str] = "flag"

    def accepted(self) -> str:
        if self.words:
            return "on: " + ", ".join(f"`{w}`" for w in ON_WORDS) + " (any case); anything else: off"
        if self.default_on:
            return f"`{self.off_value}`: off; anything else: on"
        return f"`{self.on_value}`: on; `{self.off_value}` or anything else: off"

    def get(self, env: Mapping[str, str] | None = None, name: str | None = None) -> bool:
        """Whether the flag is on. Reads the environment."""
        value = self.raw(env, name)
        if value is None:
            return self.default_on
        if self.words:
            return value.lower() in ON_WORDS
        if self.default_on:
            return value != self.off_value
        return value == self.on_value

    def state(self, env: Mapping[str, str] | None = None, name: str | None = None) -> bool | None:
        """True for ``on_value``, False for ``off_value``, None when unset or anything else (a family's
        three states: selected, deselected, not said). Reads the environment."""
        value = self.raw(env, name)
        return True if value == self.on_value else False if value == self.off_value else None


@dataclass(frozen=True)
class Seconds(Setting):
    """A duration in seconds: a finite number in ``(0, maximum]``; ``default_s`` when unset."""

    default_s: float = 0.0
    maximum: float = 1e9

    KIND: ClassVar[str] = "seconds"

    def accepted(self) -> str:
        return f"a finite positive number of seconds (0 < seconds <= {self.maximum:g})"

    def get(self, env: Mapping[str, str] | None = None, error: type[SettingError] = SettingError) -> float:
        """The number of seconds.

        Raises:
            SettingError: (``error``) not a number (``abc``), not finite (``nan``, ``inf``), above the maximum
                (``1e308``: an unbounded wait in practice) or not positive (``0``, ``-1``).

        Side effects: reads the environment.
        """
        raw = self.raw(env)
        if raw is None:
            return self.default_s
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 < value <= self.maximum):
            raise error(f"{self.name}={raw!r} is not {self.accepted()}; set it to e.g. {self.default_s:g} or "
                        f"unset it", self.name, raw)
        return value


@dataclass(frozen=True)
class PathSetting(Setting):
    """A file-system path (``~`` expanded); None when unset."""

    KIND: ClassVar[str] = "path"

    def accepted(self) -> str:
        return "a directory path (`~` is expanded)"

    def get(self, env: Mapping[str, str] | None = None) -> Path | None:
        """The path, or None when unset or empty. Reads the environment."""
        raw = self.raw(env)
        return Path(raw).expanduser() if raw is not None else None


@dataclass(frozen=True)
class Choice(Setting):
    """One of ``choices`` (any case); None when unset."""

    choices: tuple[str, ...] = ()

    KIND: ClassVar[str] = "choice"

    def accepted(self) -> str:
        return "one of " + ", ".join(f"`{c}`" for c in self.choices) + " (any case)"

    def get(self, env: Mapping[str, str] | None = None, error: type[SettingError] = SettingError) -> str | None:
        """The choice, lower-cased, or None when unset.

        Raises:
            SettingError: (``error``) the value is none of the choices.

        Side effects: reads the environment.
        """
        raw = self.raw(env)
        if raw is None:
            return None
        if raw.lower() not in self.choices:
            raise self.error(raw, error)
        return raw.lower()


@dataclass(frozen=True)
class CountOrChoice(Setting):
    """An integer ``>= minimum`` or one of ``choices`` (any case); ``default_choice`` when unset."""

    choices: tuple[str, ...] = ()
    default_choice: str = ""
    minimum: int = 1

    KIND: ClassVar[str] = "count or choice"

    def accepted(self) -> str:
        return " or ".join((", ".join(f"`{c}`" for c in self.choices), f"an integer >= {self.minimum}"))

    def get(self, env: Mapping[str, str] | None = None, error: type[SettingError] = SettingError) -> int | str:
        """The count, or the lower-cased choice.

        Raises:
            SettingError: (``error``) neither a choice nor an integer ``>= minimum``.

        Side effects: reads the environment.
        """
        raw = self.raw(env)
        if raw is None:
            return self.default_choice
        if raw.lower() in self.choices:
            return raw.lower()
        if raw.isdigit() and int(raw) >= self.minimum:
            return int(raw)
        raise self.error(raw, error)


# ----------------------------------------------------------------------------------------------- selection
ACCELERATOR = Text(
    "ANYACCEL_ACCELERATOR", lower=True, accepts="an accelerator name", read_by="anyaccel.accelerator.selection",
    doc="select the accelerator by name (`cuda`, `xpu`, `npu`, `mps`, `cpu`, a plug-in's name; case-insensitive). "
        "An unknown name raises `UnknownAcceleratorError` listing the valid ones; an unavailable one raises "
        "`AcceleratorUnavailableError` with the probe's reason",
    default="probe the installed stacks in priority order, CPU last ([Accelerators](accelerators.md#selection))")
DS_ACCELERATOR = Text(
    "DS_ACCELERATOR", lower=True, accepts="an accelerator name", read_by="anyaccel.accelerator.selection",
    doc="DeepSpeed's name for the same; used when `ANYACCEL_ACCELERATOR` is unset or empty", default="as above")
STRICT = Flag(
    "ANYACCEL_STRICT", words=True, read_by="anyaccel.accelerator.selection",
    doc="on: an installed GPU stack ranked above the chosen accelerator that cannot be used (a CUDA torch that "
        "sees no GPU) is an `AcceleratorUnavailableError`",
    default="off: logged once as a warning, selection goes on")

# ----------------------------------------------------------------------------------------------- ops
CPU_ISA = Choice(
    "ANYACCEL_CPU_ISA", choices=("avx512", "avx2", "sve", "neon", "portable"),
    read_by="anyaccel.op_builder.toolchains.cpu_isa",
    doc="the SIMD level of CPU ops; a level the op does not implement or the CPU cannot run is an `ISAError`. "
        "Part of the cache key",
    default="the best level this CPU runs among those the op implements: torch's CPU capability on x86, the "
            "kernel's CPU features (`AT_HWCAP`, e.g. SVE) on aarch64 (a forced level not found so is checked once "
            "more against py-cpuinfo)")
CPU_THREADS = CountOrChoice(
    "ANYACCEL_CPU_THREADS", choices=("auto", "torch"), default_choice="auto", read_by="anyaccel.ops.cpu_threads",
    doc="threads of the CPU optimizer kernels: `torch` leaves `torch.set_num_threads` alone, `N` calls "
        "`torch.set_num_threads(N)`, an `N` above the CPUs of the process's affinity mask clamped to them with one "
        "warning (not refused: extra threads only wait for a CPU, and one job script runs on hosts of every size); "
        "anything else is a `ThreadPolicyError`. Applied once per process before the first CPU optimizer step",
    default="`auto`: when the ranks of this host are not bound to cores and would oversubscribe its CPUs, lower "
            "torch's thread count to their share (one warning)")
IMPL = Text(
    "ANYACCEL_IMPL_<FAMILY>", lower=True, accepts="an implementation name", read_by="anyaccel.ops.dispatch",
    doc="force an implementation of the op family (`ANYACCEL_IMPL_ADAM`, `ANYACCEL_IMPL_LION`, "
        "`ANYACCEL_IMPL_LAMB`...) by name (`cpu`, `cuda`, `triton`, `sycl`, `npu`); applies to the device types "
        "the named implementation serves (`ANYACCEL_IMPL_ADAM=triton` changes `FusedAdam` on CUDA, not "
        "`CPUAdam`). An unknown or unavailable name raises, never falls back. An optimizer's `impl=` wins",
    default="the available implementation of highest priority")
TRITON_FAST_LAUNCH = Flag(
    "ANYACCEL_TRITON_FAST_LAUNCH", default_on=True, read_by="anyaccel._compat.triton_launch",
    doc="`0`: every Triton kernel of the model ops and the Triton optimizers launches through Triton's own "
        "`kernel[grid](...)` (read once, at the first launch in the process; "
        "`anyaccel._compat.triton_launch.set_enabled()` switches it at run time)",
    default="on: a launch of an already-seen specialization calls Triton's compiled launcher directly "
            "([model ops](nn_ops.md#limits))")
OVERRIDE_POLICY = Choice(
    "ANYACCEL_OVERRIDE_POLICY", choices=("tuned", "always", "never"), read_by="anyaccel.ops.override.policy",
    doc="which eligible aten calls the override mode sends to anyaccel's kernels: `tuned` (where the device's "
        "tuning table measured a speed-up), `always` or `never` ([model ops](nn_ops.md))",
    default="`tuned`")
AIO_TIMEOUT = Seconds(
    "ANYACCEL_AIO_TIMEOUT", default_s=600.0, read_by="anyaccel.ops.aio.handle",
    doc="seconds an async I/O handle's `wait()` (and the sync calls) wait for queued transfers before a typed "
        "error",
    default="600")
PIN_MEMORY_BACKEND = Choice(
    "DS_PIN_MEMORY_BACKEND", choices=("torch", "native"), read_by="anyaccel.accelerator.native_pinned",
    doc="DeepSpeed's variable: `native` makes the accelerator's `pin_memory`, `pin_empty`, `pin_empty_like`, "
        "`is_pinned` and `unpin_memory` use exact page-rounded regions of the `pin_memory` op (`mlock`-ed, or "
        "registered with the device runtime) instead of torch's caching host allocator; read at every call "
        "([pinned memory](pin_memory.md))",
    default="`torch`: `tensor.pin_memory()` and torch's pinned allocator")
PIN_MEMORY_REGISTER_DEVICE = Flag(
    "DS_PIN_MEMORY_REGISTER_DEVICE", words=True, default_on=True, read_by="anyaccel.accelerator.native_pinned",
    doc="DeepSpeed's variable: off (`0`, `false`, `no`, `off`) makes the native backend `mlock` its regions "
        "instead of registering them with the device runtime (`cudaHostRegister`); read when the backend is "
        "made, once per process",
    default="on: register where the accelerator can (CUDA, NPU), `mlock` elsewhere")

# ----------------------------------------------------------------------------------------------- op builds
CACHE_DIR = PathSetting(
    "ANYACCEL_CACHE_DIR", read_by="anyaccel.op_builder.core.cache",
    doc="root of the op cache (`ops/`, `tmp/`, `locks/`, `logs/`, `quarantine/`); it and every path down to a "
        "library must be owned by you (or root) and not writable by group or others, and only the root may be a "
        "symbolic link (yours) (`CacheSecurityError`; [integrity checks](op_builders.md))",
    default="`$XDG_CACHE_HOME/anyaccel`, else `~/.cache/anyaccel`")
PREBUILT_DIR = PathSetting(
    "ANYACCEL_PREBUILT_DIR", read_by="anyaccel.op_builder.core.loading",
    doc="where ahead-of-time built ops are looked up before the cache",
    default="`anyaccel/_prebuilt` in the installed package")
BUILD_OPS = Flag(
    "ANYACCEL_BUILD_OPS", read_by="`setup.py`, anyaccel.op_builder.cli.aot",
    doc="`1`: an install (`ANYACCEL_BUILD_OPS=1 pip install --no-build-isolation .`) builds every op ahead of "
        "time; one failing op is reported and skipped",
    default="no ahead-of-time builds")
BUILD = Flag(
    "ANYACCEL_BUILD_<NAME>", read_by="anyaccel.op_builder.cli.aot",
    doc="`1`: build this op at install; `0`: leave it out of `ANYACCEL_BUILD_OPS=1` (`ANYACCEL_BUILD_CPU_ADAM`, "
        "`..._FUSED_ADAM`, `..._CPU_LION`...: the build's `NAME` in capitals)",
    default="not selected")
BUILD_LOCK_TIMEOUT = Seconds(
    "ANYACCEL_BUILD_LOCK_TIMEOUT", default_s=1800.0, read_by="anyaccel.op_builder.core.lock",
    doc="seconds a process waits for another process's build of the same op before `LockTimeoutError` (a bad "
        "value raises `SettingError` before any wait)",
    default="1800")
BUILD_TIMEOUT = Seconds(
    "ANYACCEL_BUILD_TIMEOUT", default_s=3600.0, read_by="anyaccel.op_builder.toolchains.ninja",
    doc="wall-time bound of one build in seconds; past it ninja and every process it started are killed and the "
        "load raises `BuildError` `timeout` naming the command still running",
    default="3600")
TORCH_TARGET = Text(
    "ANYACCEL_TORCH_TARGET", accepts="a torch version `MAJOR.MINOR`",
    read_by="anyaccel.op_builder.toolchains.torch_abi",
    doc="the torch stable-ABI version new builds target (`2.11`): `MAJOR.MINOR`, at least 2.10 and at most the "
        "running torch (`TorchABIError` otherwise)",
    default="2.10: binaries load under every torch from 2.10 on")
SKIP_CUDA_CHECK = Flag(
    "ANYACCEL_SKIP_CUDA_CHECK", read_by="anyaccel.op_builder.toolchains.cuda",
    doc="`1`: build GPU ops although nvcc's CUDA major version differs from torch's",
    default="the mismatch is a `BuildError` with code `cuda_mismatch`")
SYCL_CXX = Text(
    "ANYACCEL_SYCL_CXX", accepts="a compiler name or path", read_by="anyaccel.op_builder.toolchains.sycl",
    doc="the SYCL compiler (a name or a path) for XPU ops; set but naming nothing is an error",
    default="`icpx` on `PATH`, else `$ONEAPI_ROOT/compiler/latest/bin/icpx`")

# ----------------------------------------------------------------------------------------------- DeepSpeed
DEEPSPEED = Flag(
    "ANYACCEL_DEEPSPEED", words=True, read_by="`_anyaccel_deepspeed_startup`, anyaccel.integrations.deepspeed",
    doc="on: the `anyaccel-deepspeed.pth` startup hook installs anyaccel into DeepSpeed at `import deepspeed` "
        "([DeepSpeed](deepspeed.md))",
    default="off: the hook does nothing")
DEEPSPEED_ALLOW_UNTESTED = Flag(
    "ANYACCEL_DEEPSPEED_ALLOW_UNTESTED", words=True, read_by="anyaccel.integrations.deepspeed.version",
    doc="on: `install()` accepts a DeepSpeed version other than the tested ones, with one warning",
    default="an untested version raises `UntestedDeepSpeedVersionError`")


def all_settings() -> Iterator[Setting]:
    """Every declared variable, in declaration order (the documentation's order)."""
    for value in globals().values():
        if isinstance(value, Setting):
            yield value


def markdown_table() -> str:
    """The documentation's table of the variables (``docs/environment.md``), one row per declaration."""
    rows = ["| variable | effect | accepts | default (unset) | read by |", "|---|---|---|---|---|"]
    for s in all_settings():
        read_by = ", ".join(part if part.startswith("`") else f"`{part}`" for part in s.read_by.split(", "))
        rows.append(f"| `{s.name}` | {s.doc} | {s.accepted()} | {s.default} | {read_by} |")
    return "\n".join(rows) + "\n"
