"""``anyaccel report``: what anyaccel sees on this machine, for people (a table) and machines (``--json``).

The report shows the chosen accelerator and why (every candidate's probe result), the torch, Python and
compiler versions, the CPU's SIMD level, the op cache root, and for every op builder whether it is
compatible here (with the reason when not) and whether it is built. ``--build`` builds every compatible op
first and records the outcome per op.

When a section cannot be gathered (a bad ``ANYACCEL_ACCELERATOR``, an unusable cache), the report still
prints, with the error in that section and in ``errors`` (``--json`` output stays one JSON object, no
traceback), and the command exits 1.

The compilers section names every toolchain record (host C++, nvcc, hipcc, icpx, acpp) with the path and
version found, or why not (`anyaccel.op_builder.toolchains.records`).

Side effects: selects the accelerator (``get_accelerator()``), runs the compiler and ninja with
``--version``, runs each toolchain record's compiler found once with its version arguments, and calls
py-cpuinfo once (about 1 s); with ``--build`` it compiles ops into the cache.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--json`` and ``--build`` on the ``report`` subcommand's parser."""
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--build", action="store_true", help="build every compatible op before reporting")


def _accelerator_section() -> dict[str, Any]:
    from anyaccel.accelerator import explain, get_accelerator

    acc = get_accelerator()
    section = explain().to_dict()
    section.update(
        device_name=acc.device_name(),
        device_count=acc.device_count(),
        communication_backend=acc.communication_backend_name(),
    )
    return section


def _op_rows(build: bool) -> list[dict[str, Any]]:
    from anyaccel.accelerator import get_accelerator
    from anyaccel.op_builder.errors import BuildError, OpBuilderError
    from anyaccel.ops.registry import all_builder_names

    acc = get_accelerator()
    rows = []
    for name in all_builder_names():
        builder = acc.create_op_builder(name)
        row: dict[str, Any] = {"op": name}
        if builder is None:
            row.update(compatible=False, reason=f"no implementation for accelerator {acc._name!r}", built=False)
            rows.append(row)
            continue
        ok, reason = builder.compatibility()
        row.update(compatible=ok, reason=reason)
        if build and ok:
            t0 = time.perf_counter()
            try:
                builder.load()
                row["build"] = f"ok in {time.perf_counter() - t0:.1f} s"
            except (BuildError, OpBuilderError) as exc:
                row["build"] = f"failed: {getattr(exc, 'code', type(exc).__name__)}"
                row["error"] = str(exc)
        row["built"] = bool(builder.is_built()) if ok else False
        rows.append(row)
    return rows


def _compilers_section() -> list[dict[str, Any]]:
    """Every toolchain record (host C++, nvcc, hipcc, icpx, acpp): its path and version, or why not
    (`anyaccel.op_builder.toolchains.records.survey`; runs each compiler found once)."""
    from anyaccel.op_builder.toolchains.records import TOOLCHAINS, survey

    return [{"toolchain": f.toolchain, "title": TOOLCHAINS[f.toolchain].title,
             "path": None if f.path is None else str(f.path), "version": f.version, "ok": f.ok,
             "why_not": f.why_not} for f in survey()]


def _pinned_memory_section() -> dict[str, Any]:
    """What this process pinned (``DeepSpeedAccelerator.pinned_memory_report()``; builds and loads nothing)."""
    from anyaccel.accelerator import get_accelerator

    report: dict[str, Any] = get_accelerator().pinned_memory_report()
    return report


def _deepspeed_section() -> dict[str, Any]:
    """Whether DeepSpeed is installed and wired (``anyaccel.integrations.deepspeed.status()``; no DeepSpeed import)."""
    from anyaccel.integrations.deepspeed import status

    return status()


def _error_entry(exc: BaseException) -> dict[str, Any]:
    """An error as report data: its type, message and (for the op builders' errors) code and fix."""
    entry: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        entry["code"] = code
    fix = getattr(exc, "fix", None)
    if isinstance(fix, str):
        entry["fix"] = fix
    return entry


def _section(name: str, gather: Callable[[], Any], errors: list[dict[str, Any]], failed: Any) -> Any:
    """``gather()``, or ``failed`` when it raises one of the library's typed errors (recorded in ``errors``)."""
    from anyaccel.accelerator.errors import AcceleratorError
    from anyaccel.op_builder.errors import OpBuilderError

    try:
        return gather()
    except (AcceleratorError, OpBuilderError, OSError, ValueError) as exc:
        errors.append({"section": name, **_error_entry(exc)})
        return failed


def collect(build: bool = False) -> dict[str, Any]:
    """Gather the report as a JSON-able dict.

    Args:
        build: when True, build (JIT, into the cache) every op compatible with this machine first.

    Returns:
        A dict with the keys ``anyaccel``, ``python``, ``platform``, ``torch``, ``accelerator`` (the selection
        report of [`anyaccel.accelerator.explain`][anyaccel.accelerator.explain] plus device name/count and
        communication backend),
        ``toolchain`` (`anyaccel.op_builder.cli.info.describe`: compiler, ninja, nvcc, CPU ISA, build
        jobs, cache root), ``compilers`` (one dict per toolchain record, `anyaccel.op_builder.toolchains.records`:
        ``toolchain``, ``title``, ``path``, ``version``, ``ok`` and ``why_not``: where it looked or what the
        compiler printed, and how to install it), ``cpu_threads``
        ([`anyaccel.ops.cpu_threads.thread_plan`][anyaccel.ops.cpu_threads.thread_plan]), ``ops`` (a list of
        per-op dicts with ``op``, ``compatible``, ``reason``, ``built`` and, with ``build``, ``build`` and on
        failure ``error``), ``pinned_memory`` (the accelerator's ``pinned_memory_report()``: backend, bytes and
        calls pinned, ``RLIMIT_MEMLOCK``, and the native regions alive when the native backend was used in this
        process; None without an accelerator), ``deepspeed``
        ([`anyaccel.integrations.deepspeed.status`][anyaccel.integrations.deepspeed.status]:
        installed, version, tested, startup hook, wired) and ``errors``: one dict per section that could not be
        gathered (``section``, ``type``, ``message``, and ``code``/``fix`` for op-builder errors); that section
        is then ``{"error": message}`` (``ops``: empty).
    """
    import torch

    from anyaccel.op_builder.cli import info
    from anyaccel.ops.cpu_threads import thread_plan
    from anyaccel.version import __version__

    errors: list[dict[str, Any]] = []
    accelerator = _section("accelerator", _accelerator_section, errors, None)
    toolchain = _section("toolchain", info.describe, errors, None)
    compilers = _section("compilers", _compilers_section, errors, [])
    cpu_threads = _section("cpu_threads", thread_plan, errors, None)
    ops = _section("ops", lambda: _op_rows(build), errors, []) if accelerator is not None else []
    pinned = _section("pinned_memory", _pinned_memory_section, errors, None) if accelerator is not None else None
    deepspeed = _section("deepspeed", _deepspeed_section, errors, None)
    return {
        "anyaccel": __version__,
        "python": sys.version.split()[0],
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "cxx11_abi": bool(torch.compiled_with_cxx11_abi()),
            "threads": torch.get_num_threads(),
        },
        "accelerator": accelerator if accelerator is not None else {"error": _first_error(errors, "accelerator")},
        "toolchain": toolchain if toolchain is not None else {"error": _first_error(errors, "toolchain")},
        "compilers": compilers,
        "cpu_threads": cpu_threads,
        "ops": ops,
        "pinned_memory": pinned,
        "deepspeed": deepspeed if deepspeed is not None else {"error": _first_error(errors, "deepspeed")},
        "errors": errors,
    }


def _first_error(errors: list[dict[str, Any]], section: str) -> str:
    return next((e["message"] for e in errors if e["section"] == section), "")


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value in (None, "") else str(value)


def render(report: dict[str, Any]) -> str:
    """Format a report from `collect` as aligned text tables for a terminal."""
    acc = report["accelerator"]
    lines = [
        f"anyaccel {report['anyaccel']}  python {report['python']}  {report['platform']}",
        f"torch {report['torch']['version']}  cuda {_fmt(report['torch']['cuda'])}  hip {_fmt(report['torch']['hip'])}"
        f"  cxx11 abi {_fmt(report['torch']['cxx11_abi'])}  threads {report['torch']['threads']}",
        "",
    ]
    if "error" in acc:
        lines.append(f"accelerator: error: {acc['error']}")
    else:
        lines += [f"accelerator: {acc['chosen']} ({acc['device_name']}, {acc['device_count']} device(s), "
                  f"communication backend {acc['communication_backend']})",
                  f"  why: {acc['reason']}",
                  "  candidates:"]
        for c in acc.get("candidates", []):
            mark = "available" if c.get("available") else "unavailable"
            lines.append(f"    {c['name']:<8} priority {_fmt(c.get('priority')):<5} {mark:<12} {c.get('reason', '')}")
    lines.append("")
    tc = report["toolchain"]
    if "error" in tc:
        lines.append(f"toolchain: error: {tc['error']}")
        return "\n".join(lines + _error_lines(report))
    isa = tc["cpu_isa"]
    lines.append(f"cpu SIMD level: {isa.get('chosen') or 'error: ' + str(isa.get('error'))}  "
                 f"(supported: {', '.join(isa['supported'])}; torch capability {isa['torch_capability']}; "
                 f"ANYACCEL_CPU_ISA={_fmt(isa.get('env'))}; cpu flags: {' '.join(isa.get('cpuinfo_flags', []))})")
    for tool in ("cxx", "ninja", "nvcc"):
        entry = tc[tool]
        version = (entry.get("version") or entry.get("error") or "").splitlines()
        lines.append(f"{tool:<6} {_fmt(entry.get('path')):<40} {version[0] if version else '-'}")
    lines.append(f"python tag {tc['python_tag']}  build jobs {tc['build_jobs']}")
    lines += _render_compilers(report.get("compilers") or [])
    lines.append(f"cache root: {tc['cache_root']}")
    threads = report.get("cpu_threads")
    if threads:
        lines.append(_render_threads(threads))
    lines.append("")
    if "error" in acc:  # no accelerator, no ops to list: say so rather than print an empty table
        lines.append("ops: not listed: the accelerator could not be selected (error (accelerator) below: fix it, or "
                     "unset ANYACCEL_ACCELERATOR to let anyaccel detect the device)")
    else:
        lines.append(f"{'op':<22} {'compatible':<11} {'built':<6} reason / build")
        for row in report["ops"]:
            extra = row.get("build") or row.get("reason") or ""
            lines.append(f"{row['op']:<22} {_fmt(row['compatible']):<11} {_fmt(row['built']):<6} {extra}")
    lines.append("")
    if report.get("pinned_memory"):
        lines.append(_render_pinned(report["pinned_memory"]))
    lines.append(_render_deepspeed(report.get("deepspeed")))
    return "\n".join(lines + _error_lines(report))


def _error_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for err in report.get("errors", []):
        lines += ["", f"error ({err['section']}): {err['message']}"]
        if err.get("fix") and err["fix"] not in err["message"]:
            lines.append(f"  fix: {err['fix']}")
    return lines


def _render_compilers(rows: list[dict[str, Any]]) -> list[str]:
    """The toolchain records: one line each, path and version, or why not."""
    if not rows:
        return []
    lines = ["compilers (toolchain records):"]
    for row in rows:
        if row["ok"]:
            lines.append(f"  {row['toolchain']:<6} {row['path']:<40} {row['version'] or '-':<14} {row['title']}")
        else:
            state = "not found" if row["path"] is None else "unusable"
            lines.append(f"  {row['toolchain']:<6} {_fmt(row['path']):<40} {state:<14} {row['why_not']}")
    return lines


def _render_threads(t: dict[str, Any]) -> str:
    """One line on the CPU kernels' threads (anyaccel.ops.cpu_threads.thread_plan)."""
    line = (f"cpu kernels: up to {t['torch_threads']} threads (torch), affinity {t['affinity_cpus']} of "
            f"{t['host_cpus']} CPUs ({'bound' if t['bound'] else 'not bound'}), {t['local_ranks']} rank(s) on this "
            f"host, ANYACCEL_CPU_THREADS={t['policy']}")
    if t["oversubscribed"]:
        line += (f"; OVERSUBSCRIBED: {t['busy_threads']} busy threads on {t['affinity_cpus']} CPUs, the CPU "
                 f"optimizers will use {t['recommended_threads']} (policy auto)")
    return line


def _render_pinned(p: dict[str, Any]) -> str:
    """One line on pinned host memory (the accelerator's ``pinned_memory_report()``)."""
    limit = p["memlock_limit_bytes"]
    line = (f"pinned memory: backend {p['backend']} (DS_PIN_MEMORY_BACKEND), {p['tracked_bytes']} bytes asked in "
            f"{p['tracked_calls']} call(s), RLIMIT_MEMLOCK {'unlimited' if limit is None else f'{limit} bytes'}")
    native = p.get("native")
    if native is None:
        return line + "; native: not used in this process"
    return (line + f"; native: {native['bytes']} bytes in {native['regions']} region(s), {native['locked_bytes']} "
            f"bytes mlock-ed, {native['released_regions']} released region(s) still in use")


def _render_deepspeed(ds: Any) -> str:
    """One line on DeepSpeed: installed/tested, and whether ``import deepspeed`` uses anyaccel (docs/deepspeed.md)."""
    if ds and "error" in ds:
        return f"deepspeed: error: {ds['error']}"
    if not ds or not ds.get("installed"):
        return "deepspeed: not installed"
    tested = "tested" if ds["tested"] else f"untested (tested: {', '.join(ds['tested_versions'])})"
    if ds.get("wired"):
        wiring = "wired: DeepSpeed uses anyaccel in this process"
    elif ds.get("hook_active"):
        wiring = "wired at import: ANYACCEL_DEEPSPEED is on and the startup hook is installed"
    else:
        hook = ds.get("startup_hook") or "not installed (python -m anyaccel.integrations.deepspeed write-pth)"
        wiring = (f"not wired (ANYACCEL_DEEPSPEED={_fmt(ds.get('env'))}, startup hook {hook}; "
                  f"or call anyaccel.integrations.deepspeed.install())")
    return f"deepspeed: {ds['version']} ({tested}), {wiring}"


def run(args: argparse.Namespace) -> int:
    """Run ``anyaccel report``; print the report (to stdout: it is the command's output).

    Returns:
        0; 1 when a section could not be gathered (see `collect`) or ``--build`` had a failed build.
    """
    report = collect(build=args.build)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(render(report) + "\n")
    failed = [r["op"] for r in report["ops"] if str(r.get("build", "")).startswith("failed")]
    return 1 if failed or report["errors"] else 0
