"""Before/after table of every conversion of ``anyaccel migrate``, each checked for idempotence."""

from __future__ import annotations

import libcst as cst
import pytest

from anyaccel.migrate.engine import migrate_source

IMPORT = "from anyaccel import get_accelerator\n"
#: CUDA AMP turns itself off without CUDA; migrated, it is off on the CPU accelerator
OFF_ON_CPU = 'enabled=get_accelerator().device_name() != "cpu"'

# (id, code after "import torch\n", expected code after "import torch\n" + IMPORT + "\n")
CASES: list[tuple[str, str, str]] = [
    # torch.cuda runtime calls -> get_accelerator().<same>
    ("synchronize", "torch.cuda.synchronize()\n", "get_accelerator().synchronize()\n"),
    ("synchronize-index", "torch.cuda.synchronize(1)\n", "get_accelerator().synchronize(1)\n"),
    ("set-device", "torch.cuda.set_device(local_rank)\n", "get_accelerator().set_device(local_rank)\n"),
    ("device-count", "n = torch.cuda.device_count()\n", "n = get_accelerator().device_count()\n"),
    ("is-available", "ok = torch.cuda.is_available()\n", "ok = get_accelerator().is_available()\n"),
    ("manual-seed-all", "torch.cuda.manual_seed_all(seed)\n", "get_accelerator().manual_seed_all(seed)\n"),
    ("rng-state", "s = torch.cuda.get_rng_state()\n", "s = get_accelerator().get_rng_state()\n"),
    ("empty-cache", "torch.cuda.empty_cache()\n", "get_accelerator().empty_cache()\n"),
    ("memory", "m = torch.cuda.max_memory_allocated(0) / 2**30\n",
     "m = get_accelerator().max_memory_allocated(0) / 2**30\n"),
    ("reset-peak", "torch.cuda.reset_peak_memory_stats()\n", "get_accelerator().reset_peak_memory_stats()\n"),
    ("stream-class", "s = torch.cuda.Stream()\n", "s = get_accelerator().Stream()\n"),
    ("stream-ctx", "with torch.cuda.stream(s):\n    pass\n", "with get_accelerator().stream(s):\n    pass\n"),
    ("current-stream", "torch.cuda.current_stream().wait_stream(s)\n",
     "get_accelerator().current_stream().wait_stream(s)\n"),
    ("event", "e = torch.cuda.Event(enable_timing=True)\n", "e = get_accelerator().Event(enable_timing=True)\n"),
    ("device-ctx", "with torch.cuda.device(1):\n    pass\n",
     "with torch.accelerator.device_index(None if get_accelerator().device_name() == \"cpu\" else 1):\n    pass\n"),
    ("tensor-type", "t = torch.cuda.FloatTensor([1.0, 2.0])\n", "t = get_accelerator().FloatTensor([1.0, 2.0])\n"),
    ("nvtx", "torch.cuda.nvtx.range_push('fwd')\ntorch.cuda.nvtx.range_pop()\n",
     "get_accelerator().range_push('fwd')\nget_accelerator().range_pop()\n"),
    ("graph", "g = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    pass\n",
     "g = get_accelerator().create_graph()\nwith get_accelerator().capture_to_graph(g):\n    pass\n"),
    ("bf16", "if torch.cuda.is_bf16_supported():\n    pass\n",
     "if get_accelerator().is_bf16_supported():\n    pass\n"),
    # current_device: int where an int is expected, name where a device is expected
    ("current-device-int", "i = torch.cuda.current_device()\n", "i = get_accelerator().current_device()\n"),
    ("current-device-ids", "m = DDP(m, device_ids=[torch.cuda.current_device()])\n",
     "m = DDP(m, device_ids=None if get_accelerator().device_name() == \"cpu\" else "
     "[get_accelerator().current_device()])\n"),
    ("current-device-to", "x = x.to(torch.cuda.current_device())\n",
     "x = x.to(get_accelerator().current_device_name())\n"),
    ("current-device-kw", "y = torch.empty(3, device=torch.cuda.current_device())\n",
     "y = torch.empty(3, device=get_accelerator().current_device_name())\n"),
    ("current-device-torch-device", "d = torch.device(torch.cuda.current_device())\n",
     "d = torch.device(get_accelerator().current_device_name())\n"),
    # .cuda() -> .to(device_name(...))
    ("cuda-method", "model = model.cuda()\n", "model = model.to(get_accelerator().device_name())\n"),
    ("cuda-method-index", "x = x.cuda(rank)\n", "x = x.to(get_accelerator().device_name(rank))\n"),
    ("cuda-method-kw", "x = x.cuda(device=1, non_blocking=True)\n",
     "x = x.to(get_accelerator().device_name(1), non_blocking=True)\n"),
    ("cuda-method-chain", "y = f(x).cuda().float()\n", "y = f(x).to(get_accelerator().device_name()).float()\n"),
    # is_cuda, pin_memory, is_pinned
    ("is-cuda", "if x.is_cuda:\n    pass\n", "if get_accelerator().on_accelerator(x, exclude_cpu=True):\n    pass\n"),
    ("is-cuda-expr", "ok = all(p.is_cuda for p in m.parameters())\n",
     "ok = all(get_accelerator().on_accelerator(p, exclude_cpu=True) for p in m.parameters())\n"),
    ("pin-memory", "b = batch.pin_memory()\n", "b = get_accelerator().pin_memory(batch)\n"),
    ("is-pinned", "ok = b.is_pinned()\n", "ok = get_accelerator().is_pinned(b)\n"),
    ("nested", "x = x.pin_memory().cuda(non_blocking=True)\n",
     "x = get_accelerator().pin_memory(x).to(get_accelerator().device_name(), non_blocking=True)\n"),
    # communication backend
    ("nccl-positional", "torch.distributed.init_process_group('nccl')\n",
     "torch.distributed.init_process_group(get_accelerator().communication_backend_name())\n"),
    ("nccl-keyword", "torch.distributed.init_process_group(backend=\"nccl\", rank=r, world_size=w)\n",
     "torch.distributed.init_process_group(backend=get_accelerator().communication_backend_name(), rank=r, "
     "world_size=w)\n"),
    ("nccl-new-group", "g = torch.distributed.new_group([0, 1], backend='nccl')\n",
     "g = torch.distributed.new_group([0, 1], backend=get_accelerator().communication_backend_name())\n"),
    ("nccl-ifexp", "backend = 'nccl' if torch.cuda.is_available() else 'gloo'\n",
     "backend = get_accelerator().communication_backend_name() if get_accelerator().is_available() else 'gloo'\n"),
    # device strings that are provably devices
    ("device-kw", "x = torch.randn(4, device='cuda')\n",
     "x = torch.randn(4, device=get_accelerator().device_name())\n"),
    ("device-kw-index", "x = torch.randn(4, device=\"cuda:1\")\n",
     "x = torch.randn(4, device=get_accelerator().device_name(1))\n"),
    ("device-fstring", "x = torch.randn(4, device=f'cuda:{rank}')\n",
     "x = torch.randn(4, device=get_accelerator().device_name(rank))\n"),
    ("torch-device", "d = torch.device('cuda')\n", "d = torch.device(get_accelerator().device_name())\n"),
    ("to-string", "x = x.to('cuda:0')\n", "x = x.to(get_accelerator().device_name(0))\n"),
    ("map-location", "sd = torch.load(p, map_location='cuda')\n",
     "sd = torch.load(p, map_location=get_accelerator().device_name())\n"),
    ("device-ifexp", "d = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n",
     "d = torch.device(get_accelerator().device_name() if get_accelerator().is_available() else 'cpu')\n"),
    ("device-ifexp-pair", "name = 'cuda' if use_gpu else 'cpu'\n",
     "name = get_accelerator().device_name() if use_gpu else 'cpu'\n"),
    ("device-assign", "device = 'cuda'\nself.device = 'cuda:0'\n",
     "device = get_accelerator().device_name()\nself.device = get_accelerator().device_name(0)\n"),
    ("device-param", "def f(x, device='cuda'):\n    return x\n",
     "def f(x, device=get_accelerator().device_name()):\n    return x\n"),
    ("device-type-compare", "if x.device.type == 'cuda':\n    pass\n",
     "if get_accelerator().on_accelerator(x.device.type, exclude_cpu=True):\n    pass\n"),
    ("autocast-device-type", "with torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    pass\n",
     "with torch.autocast(device_type=get_accelerator().device_name(), dtype=torch.bfloat16, "
     f"{OFF_ON_CPU}):\n    pass\n"),
    # torch.cuda.amp -> torch.amp / torch.autocast with the device
    ("amp-autocast", "with torch.cuda.amp.autocast():\n    pass\n",
     f"with torch.autocast(get_accelerator().device_name(), {OFF_ON_CPU}):\n    pass\n"),
    ("amp-autocast-positional", "with torch.cuda.amp.autocast(True, torch.float16):\n    pass\n",
     f"with torch.autocast(get_accelerator().device_name(), {OFF_ON_CPU}, dtype=torch.float16):\n    pass\n"),
    ("amp-grad-scaler", "scaler = torch.cuda.amp.GradScaler(init_scale=1024.0)\n",
     f"scaler = torch.amp.GradScaler(get_accelerator().device_name(), init_scale=1024.0, {OFF_ON_CPU})\n"),
    ("amp-custom-fwd", "@torch.cuda.amp.custom_fwd\ndef f(ctx, x):\n    return x\n",
     "@torch.amp.custom_fwd(device_type=get_accelerator().device_name())\ndef f(ctx, x):\n    return x\n"),
    ("amp-custom-fwd-args", "@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\ndef f(ctx, x):\n    return x\n",
     "@torch.amp.custom_fwd(device_type=get_accelerator().device_name(), cast_inputs=torch.float32)\n"
     "def f(ctx, x):\n    return x\n"),
    # comments and formatting survive
    ("comments", "torch.cuda.synchronize(  # wait for the kernels\n    0,  # device\n)\n",
     "get_accelerator().synchronize(  # wait for the kernels\n    0,  # device\n)\n"),
    ("multiline-cuda", "x = batch[\"input\"].cuda(\n    non_blocking=True,  # overlap\n)\n",
     "x = batch[\"input\"].to(\n    get_accelerator().device_name(), non_blocking=True,  # overlap\n)\n"),
]


def _full(code: str, with_import: bool) -> str:
    return "import torch\n" + (IMPORT + "\n" if with_import else "") + code


@pytest.mark.parametrize("before,after", [(b, a) for _, b, a in CASES], ids=[c[0] for c in CASES])
def test_conversion_and_idempotence(before: str, after: str) -> None:
    result = migrate_source(_full(before, False))
    assert result.error is None
    assert result.rewritten == _full(after, True)
    cst.parse_module(result.rewritten)
    compile(result.rewritten, "<rewritten>", "exec")
    again = migrate_source(result.rewritten)
    assert again.rewritten == result.rewritten
    assert again.findings == ()


ALIAS_CASES: list[tuple[str, str, str]] = [
    ("import-as", "import torch.cuda as tc\n\ntc.synchronize()\nn = tc.device_count()\n",
     IMPORT + "\nget_accelerator().synchronize()\nn = get_accelerator().device_count()\n"),
    ("from-torch-import-cuda", "from torch import cuda\n\ncuda.empty_cache()\n",
     IMPORT + "\nget_accelerator().empty_cache()\n"),
    ("from-torch-cuda-import", "from torch.cuda import synchronize as sync, manual_seed\n\nsync()\nmanual_seed(3)\n",
     IMPORT + "\nget_accelerator().synchronize()\nget_accelerator().manual_seed(3)\n"),
    ("from-amp-import",
     "from torch.cuda.amp import GradScaler, autocast\n\ns = GradScaler()\nwith autocast():\n    pass\n",
     "import torch\n" + IMPORT + f"\ns = torch.amp.GradScaler(get_accelerator().device_name(), {OFF_ON_CPU})\n"
     f"with torch.autocast(get_accelerator().device_name(), {OFF_ON_CPU}):\n    pass\n"),
    # an alias still used for something unconvertible is kept
    ("alias-kept", "import torch.cuda as tc\n\ntc.synchronize()\nname = tc.get_device_name(0)\n",
     "import torch.cuda as tc\n" + IMPORT + "\nget_accelerator().synchronize()\nname = tc.get_device_name(0)\n"),
    # the import goes after the docstring and __future__ imports, once
    ("import-placement", '"""Doc."""\nfrom __future__ import annotations\nimport torch\n\n\ndef f():\n'
     "    torch.cuda.synchronize()\n    torch.cuda.synchronize()\n",
     '"""Doc."""\nfrom __future__ import annotations\nimport torch\n' + IMPORT + "\n\ndef f():\n"
     "    get_accelerator().synchronize()\n    get_accelerator().synchronize()\n"),
    # an existing get_accelerator import (e.g. DeepSpeed's) is reused, not shadowed
    ("existing-import", "import torch\nfrom deepspeed.accelerator import get_accelerator\n\ntorch.cuda.synchronize()\n",
     "import torch\nfrom deepspeed.accelerator import get_accelerator\n\nget_accelerator().synchronize()\n"),
    # a local name that only looks like torch.cuda is not touched
    ("not-torch", "import mylib as torch_like\n\ntorch_like.cuda.synchronize()\n",
     "import mylib as torch_like\n\ntorch_like.cuda.synchronize()\n"),
]


@pytest.mark.parametrize("before,after", [(b, a) for _, b, a in ALIAS_CASES], ids=[c[0] for c in ALIAS_CASES])
def test_aliases_and_imports(before: str, after: str) -> None:
    result = migrate_source(before)
    assert result.rewritten == after
    assert migrate_source(after).rewritten == after


# (id, source, expected (line, kind) findings); the source must be left unchanged
LEFT_ALONE: list[tuple[str, str, list[tuple[int, str]]]] = [
    ("no-equivalent", "import torch\nname = torch.cuda.get_device_name(0)\n", [(2, "no-equivalent")]),
    ("module-object", "import torch\nmod = torch.cuda\n", [(2, "module-object")]),
    ("unproven-string", "import torch\nif args.device == 'cuda':\n    pass\n", [(2, "cuda-string")]),
    ("unproven-fstring", "import torch\nlabel = f'cuda:{i}'\n", [(2, "cuda-string")]),
    ("unproven-nccl", "import torch\nnames = ['nccl', 'gloo']\n", [(2, "nccl-string")]),
    ("cuda-method-ref", "import torch\nmove = x.cuda\n", [(2, "cuda-method-ref")]),
    ("amp-too-many", "import torch\nwith torch.cuda.amp.autocast(True, None, True, 4):\n    pass\n",
     [(2, "amp-call-args")]),
    ("opt-out", "import torch\ntorch.cuda.synchronize()  # anyaccel: ignore\nx = x.cuda()  # anyaccel: ignore\n", []),
    ("backends-flags", "import torch\ntorch.backends.cudnn.benchmark = True\nv = torch.version.cuda\n",
     [(2, "cuda-only-setting"), (3, "cuda-only-setting")]),
]


@pytest.mark.parametrize("source,expected", [(s, e) for _, s, e in LEFT_ALONE], ids=[c[0] for c in LEFT_ALONE])
def test_left_alone_and_reported(source: str, expected: list[tuple[int, str]]) -> None:
    result = migrate_source(source, "m.py")
    assert result.rewritten == source
    assert sorted((f.line, f.kind) for f in result.findings) == sorted(expected)
    for finding in result.findings:
        assert finding.format().startswith(f"m.py:{finding.line}:{finding.column}: {finding.kind}: ")


def test_opt_out_is_per_line() -> None:
    source = "import torch\ntorch.cuda.synchronize()  # anyaccel: ignore\ntorch.cuda.synchronize()\n"
    result = migrate_source(source)
    assert result.rewritten.splitlines()[-2:] == ["torch.cuda.synchronize()  # anyaccel: ignore",
                                                  "get_accelerator().synchronize()"]


def test_marker_inside_string_does_not_opt_out() -> None:
    source = "import torch\ntorch.cuda.synchronize(); s = '# anyaccel: ignore'\n"
    assert "get_accelerator().synchronize()" in migrate_source(source).rewritten


def test_unparsable_source_is_left_untouched() -> None:
    source = "import torch\ndef broken(:\n    torch.cuda.synchronize()\n"
    result = migrate_source(source, "bad.py")
    assert result.rewritten == source and not result.changed
    assert result.error is not None and result.error.kind == "parse-error" and result.error.path == "bad.py"


def test_crlf_newlines_survive() -> None:
    source = "import torch\r\nx = x.cuda()\r\n"
    rewritten = migrate_source(source).rewritten
    assert "x.to(get_accelerator().device_name())\r\n" in rewritten
    assert "\n" not in rewritten.replace("\r\n", "")
