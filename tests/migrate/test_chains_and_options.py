"""Chained calls (a call on a call) and argparse option defaults, and the *why* of every reported place."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import libcst as cst
import pytest

from anyaccel.migrate import cli, rules
from anyaccel.migrate.engine import migrate_source
from anyaccel.migrate.options import read_option

HEAD = "import torch\nimport torch.nn as nn\n"
IMPORT = "from anyaccel import get_accelerator\n"
DEVICE = "get_accelerator().device_name()"
BACKEND = "get_accelerator().communication_backend_name()"

# (id, code after HEAD, expected code after HEAD + IMPORT + "\n")
CHAINS: list[tuple[str, str, str]] = [
    ("data-parallel", "m = torch.nn.DataParallel(model).cuda()\n", f"m = torch.nn.DataParallel(model).to({DEVICE})\n"),
    ("data-parallel-alias", "m = nn.DataParallel(model.cuda()).cuda()\n",
     f"m = nn.DataParallel(model.to({DEVICE})).to({DEVICE})\n"),
    ("factory-result", "x = torch.randn(3, 4).cuda(non_blocking=True)\n",
     f"x = torch.randn(3, 4).to({DEVICE}, non_blocking=True)\n"),
    ("to-then-cuda", "m = model.to(torch.float16).cuda()\n", f"m = model.to(torch.float16).to({DEVICE})\n"),
    ("to-device-then-cuda", "m = model.to(dev).cuda(1)\n",
     "m = model.to(dev).to(get_accelerator().device_name(1))\n"),
    ("cuda-half-cuda", "m = model.cuda().half().cuda(0)\n",
     f"m = model.to({DEVICE}).half().to(get_accelerator().device_name(0))\n"),
    ("pin-on-result", "b = torch.randn(2).pin_memory()\n", "b = get_accelerator().pin_memory(torch.randn(2))\n"),
    ("is-cuda-on-result", "ok = torch.randn(2).is_cuda\n",
     "ok = get_accelerator().on_accelerator(torch.randn(2), exclude_cpu=True)\n"),
    ("subscript-result", "y = batches[0].cuda()\n", f"y = batches[0].to({DEVICE})\n"),
    ("stream-method", "torch.cuda.current_stream().synchronize()\n",
     "get_accelerator().current_stream().synchronize()\n"),
]


@pytest.mark.parametrize("before,after", [(b, a) for _, b, a in CHAINS], ids=[c[0] for c in CHAINS])
def test_chained_calls_are_rewritten(before: str, after: str) -> None:
    result = migrate_source(HEAD + before)
    assert result.findings == ()
    assert result.rewritten == HEAD + IMPORT + "\n" + after
    compile(result.rewritten, "<rewritten>", "exec")
    again = migrate_source(result.rewritten)
    assert again.rewritten == result.rewritten and again.findings == ()


def test_method_of_a_torch_cuda_result_is_reported_once() -> None:
    source = HEAD + "total = torch.cuda.get_device_properties(0).total_memory\n"
    result = migrate_source(source)
    assert result.rewritten == source
    assert [(f.kind, f.column) for f in result.findings] == [("no-equivalent", 9)]
    assert "torch.cuda.get_device_properties is left as it is" in result.findings[0].message


# (id, source, expected source or None when unchanged, expected finding kinds)
OPTIONS: list[tuple[str, str, str, list[str]]] = [
    ("backend-keyword",
     "p.add_argument('--backend', default='nccl')\nargs = p.parse_args()\n"
     "torch.distributed.init_process_group(backend=args.backend)\n",
     f"p.add_argument('--backend', default={BACKEND})\nargs = p.parse_args()\n"
     "torch.distributed.init_process_group(backend=args.backend)\n", []),
    ("backend-positional-dashed",
     "p.add_argument('-b', '--dist-backend', type=str, default=\"nccl\", help='x')\n"
     "torch.distributed.init_process_group(opts.dist_backend)\n",
     f"p.add_argument('-b', '--dist-backend', type=str, default={BACKEND}, help='x')\n"
     "torch.distributed.init_process_group(opts.dist_backend)\n", []),
    ("backend-through-variable",
     "g.add_argument('--comm', dest='comm_backend', default='nccl')\nbackend = args.comm_backend\n",
     f"g.add_argument('--comm', dest='comm_backend', default={BACKEND})\nbackend = args.comm_backend\n", []),
    ("backend-unused", "p.add_argument('--backend', default='nccl')\n", None, ["nccl-option-default"]),
    ("backend-choices",
     "p.add_argument('--backend', default='nccl', choices=['nccl', 'gloo'])\n"
     "torch.distributed.init_process_group(backend=args.backend)\n", None,
     ["nccl-option-default", "nccl-string"]),
    ("backend-computed-name",
     "p.add_argument(prefix + 'backend', default='nccl')\n"
     "torch.distributed.init_process_group(backend=args.backend)\n", None, ["nccl-option-default"]),
    ("device-proven",
     "p.add_argument('--device', default='cuda')\nx = torch.zeros(2, device=torch.device(args.device))\n",
     f"p.add_argument('--device', default={DEVICE})\nx = torch.zeros(2, device=torch.device(args.device))\n", []),
    ("device-index-proven",
     "p.add_argument('--device', default='cuda:0')\nmodel.to(args.device)\n",
     "p.add_argument('--device', default=get_accelerator().device_name(0))\nmodel.to(args.device)\n", []),
    ("device-unused", "p.add_argument('--device', default='cuda')\nif args.device == 'cpu':\n    pass\n", None,
     ["cuda-option-default"]),
]


@pytest.mark.parametrize("source,expected,kinds", [c[1:] for c in OPTIONS], ids=[c[0] for c in OPTIONS])
def test_option_defaults(source: str, expected: str, kinds: list[str]) -> None:
    result = migrate_source(HEAD + source, "train.py")
    if expected is None:
        assert result.rewritten == HEAD + source
    else:
        assert result.rewritten == HEAD + IMPORT + "\n" + expected
        assert migrate_source(result.rewritten).rewritten == result.rewritten
    assert sorted(f.kind for f in result.findings) == sorted(kinds)


@pytest.mark.parametrize("source,case", [
    ("p.add_argument('--backend', default='nccl')\n", "unused"),
    ("p.add_argument('--backend', default='nccl', choices=['nccl'])\ninit_process_group(backend=args.backend)\n",
     "choices"),
    ("p.add_argument(name, default='nccl')\ninit_process_group(backend=args.backend)\n", "no-dest"),
])
def test_option_default_finding_says_why(source: str, case: str) -> None:
    result = migrate_source(HEAD + source, "train.py")
    finding = next(f for f in result.findings if f.kind == "nccl-option-default")
    why = rules.OPTION_DEFAULT_WHY[case].format(dest="backend", role="communication backend")
    assert why.split("(")[0] in finding.message
    assert "'nccl' is the default of command-line option" in finding.message
    assert f"Fix: {rules.REASONS['nccl-option-default'].fix}" in finding.message


def test_opted_out_option_default_is_neither_rewritten_nor_reported() -> None:
    source = HEAD + "p.add_argument('--backend', default='nccl')  # anyaccel: ignore\n"
    result = migrate_source(source)
    assert result.rewritten == source and result.findings == ()


@pytest.mark.parametrize("code,dest", [
    ("add_argument('--dist-backend')", "dist_backend"),
    ("add_argument('-b', '--dist-backend')", "dist_backend"),
    ("add_argument('-b')", "b"),
    ("add_argument('backend')", "backend"),
    ("add_argument('--x', dest='y')", "y"),
    ("add_argument(name)", None),
    ("add_argument('--x', dest=name)", None),
])
def test_option_dest_follows_argparse(code: str, dest: str) -> None:
    call = cst.parse_expression("p." + code)
    assert isinstance(call, cst.Call)
    assert read_option(call).dest == dest
    if dest is not None:  # the same answer argparse gives
        parser = argparse.ArgumentParser()
        assert eval("parser." + code.replace("name", "'unused'"), {"parser": parser}).dest == dest  # noqa: S307


def test_tensor_method_with_arguments_is_reported() -> None:
    source = HEAD + "b = x.pin_memory('cuda')\n"
    result = migrate_source(source)
    assert "tensor-method-args" in [f.kind for f in result.findings]


def test_every_reason_says_what_why_and_fix() -> None:
    for kind, reason in rules.REASONS.items():
        assert reason.what and reason.why and reason.fix, kind
        fields = {name: "X" for name in ("name", "value", "detail", "option")}
        message = reason.format(**fields)
        assert ": " in message and ". Fix: " in message, kind


def test_cli_summarises_places_by_kind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "train.py"
    path.write_text(HEAD + "p.add_argument('--backend', default='nccl')\nname = torch.cuda.get_device_name(0)\n",
                    encoding="utf-8")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    with caplog.at_level("INFO", logger="anyaccel.migrate.cli"):
        cli.run(parser.parse_args([str(path)]), stdout=out, stderr=err)
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and all(". Fix: " in line for line in lines)
    assert "nccl-option-default 1, no-equivalent 1" in caplog.text
