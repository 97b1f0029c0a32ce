"""Integer device indices, DDP device lists, ``.cuda(x)`` of every kind, device checks, and what is reported.

Every rewrite is checked for idempotence; the rewritten device checks are also evaluated on the CPU
accelerator, where they must be False (the original's CPU branch), and on a CUDA accelerator object.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.accelerator.cuda import CUDA_Accelerator
from anyaccel.migrate.engine import migrate_source

HEAD = "import torch\n"
IMPORT = "from anyaccel import get_accelerator\n"
DN = "get_accelerator().device_name"
NOT_CPU = 'None if get_accelerator().device_name() == "cpu" else'

# (id, code after HEAD, expected code after HEAD + IMPORT + "\n")
CASES: list[tuple[str, str, str]] = [
    # integer device indices, proven by an annotation, int(...), range(), rank=, set_device, spawn, type=int
    ("to-annotated", "def f(m, gpu_id: int):\n    return m.to(gpu_id)\n",
     f"def f(m, gpu_id: int):\n    return m.to({DN}(gpu_id))\n"),
    ("self-attribute", "class T:\n    def __init__(self, gpu_id: int):\n        self.gpu_id = gpu_id\n"
     "    def step(self, x):\n        return x.to(self.gpu_id, non_blocking=True)\n",
     "class T:\n    def __init__(self, gpu_id: int):\n        self.gpu_id = gpu_id\n"
     f"    def step(self, x):\n        return x.to({DN}(self.gpu_id), non_blocking=True)\n"),
    ("int-env", "local_rank = int(env['LOCAL_RANK'])\nx = torch.zeros(2, device=local_rank)\n",
     f"local_rank = int(env['LOCAL_RANK'])\nx = torch.zeros(2, device={DN}(local_rank))\n"),
    ("module-int-seen-in-function", "gpu = 0\ndef f(m):\n    return m.to(gpu)\n",
     f"gpu = 0\ndef f(m):\n    return m.to({DN}(gpu))\n"),
    ("range-loop", "for i in range(2):\n    d = torch.device(i)\n",
     f"for i in range(2):\n    d = torch.device({DN}(i))\n"),
    ("literal", "y = x.to(0)\n", f"y = x.to({DN}(0))\n"),
    ("rank-keyword", "torch.distributed.init_process_group('gloo', rank=r, world_size=2)\nm = m.to(r)\n",
     f"torch.distributed.init_process_group('gloo', rank=r, world_size=2)\nm = m.to({DN}(r))\n"),
    ("set-device-proves", "torch.cuda.set_device(rank)\nm = m.to(rank)\n",
     f"get_accelerator().set_device(rank)\nm = m.to({DN}(rank))\n"),
    ("spawned", "def run(rank, n):\n    m.to(rank)\ntorch.multiprocessing.spawn(run, nprocs=2)\n",
     f"def run(rank, n):\n    m.to({DN}(rank))\ntorch.multiprocessing.spawn(run, nprocs=2)\n"),
    ("argparse-int", "p.add_argument('--gpu', type=int)\nargs = p.parse_args()\nx = x.to(args.gpu)\n",
     f"p.add_argument('--gpu', type=int)\nargs = p.parse_args()\nx = x.to({DN}(args.gpu))\n"),
    ("modulo", "device_id = rank % torch.cuda.device_count()\ntorch.cuda.set_device(rank)\nm.to(device_id)\n",
     f"device_id = rank % get_accelerator().device_count()\nget_accelerator().set_device(rank)\n"
     f"m.to({DN}(device_id))\n"),
    ("map-location-int", "def load(p, gpu: int):\n    return torch.load(p, map_location=gpu)\n",
     f"def load(p, gpu: int):\n    return torch.load(p, map_location={DN}(gpu))\n"),
    ("map-location-lambda", "sd = torch.load(p, map_location=lambda storage, loc: storage.cuda(gpu))\n",
     f"sd = torch.load(p, map_location=lambda storage, loc: storage.to(device={DN}(gpu)))\n"),
    # DDP's device lists: None on the CPU accelerator
    ("device-ids", "m = DDP(m, device_ids=[local_rank], output_device=local_rank)\n",
     f"m = DDP(m, device_ids={NOT_CPU} [local_rank], output_device={NOT_CPU} local_rank)\n"),
    # .cuda(x) of every kind
    ("cuda-none", "x = x.cuda(None)\n", f"x = x.to({DN}())\n"),
    ("cuda-string", "x = x.cuda('cuda:1')\n", f"x = x.to({DN}(1))\n"),
    ("cuda-device-object", "x = x.cuda(dev)\n", f"x = x.to({DN}(dev))\n"),
    ("cuda-keyword", "x = x.cuda(device=dev, non_blocking=True)\n", f"x = x.to({DN}(dev), non_blocking=True)\n"),
    ("cuda-positional-non-blocking", "x = x.cuda(0, True)\n", f"x = x.to({DN}(0), non_blocking=True)\n"),
    # device checks: "on the accelerator, which is not the CPU"
    ("type-eq", "if device.type =='cuda':\n    pass\n",
     "if get_accelerator().on_accelerator(device.type, exclude_cpu=True):\n    pass\n"),
    ("type-ne-parens", "pin = (x.device.type != \"cuda\")\n",
     "pin = (not get_accelerator().on_accelerator(x.device.type, exclude_cpu=True))\n"),
    ("reversed", "ok = 'cuda' == device.type and flag\n",
     "ok = get_accelerator().on_accelerator(device.type, exclude_cpu=True) and flag\n"),
    ("device-type-variable", "ctx = nullcontext() if device_type != 'cuda' else torch.autocast(device_type)\n",
     "ctx = nullcontext() if not get_accelerator().on_accelerator(device_type, exclude_cpu=True) "
     "else torch.autocast(device_type)\n"),
    ("in-device", "device_type = 'cuda' if 'cuda' in device else 'cpu'\n",
     f"device_type = {DN}() if get_accelerator().on_accelerator(device, exclude_cpu=True) else 'cpu'\n"),
    ("not-in-str", "if 'cuda' not in str(x.device):\n    pass\n",
     "if not get_accelerator().on_accelerator(str(x.device), exclude_cpu=True):\n    pass\n"),
]


@pytest.mark.parametrize("before,after", [(b, a) for _, b, a in CASES], ids=[c[0] for c in CASES])
def test_rewrite(before: str, after: str) -> None:
    result = migrate_source(HEAD + before)
    assert result.findings == ()
    assert result.rewritten == HEAD + IMPORT + "\n" + after
    assert migrate_source(result.rewritten).rewritten == result.rewritten  # idempotent


# (id, source after HEAD, expected (line, kind) findings); the source must be left unchanged
LEFT: list[tuple[str, str, list[tuple[int, str]]]] = [
    ("unproven-index", "def f(m, rank):\n    return m.to(rank)\n", [(3, "device-index")]),
    ("device-variable", "def f(m, device):\n    return m.to(device)\n", []),
    ("other-scope", "def f(gpu: int):\n    return gpu\ndef g(m, gpu):\n    return m.to(gpu)\n",
     [(5, "device-index")]),
    ("argparse-flag", "args = p.parse_args()\nuse_cuda = args.cuda and ok\n", []),
    ("config-field", "class C:\n    cuda: bool = True\nif c.cuda:\n    pass\n", []),
    ("not-flag", "if not opt.cuda:\n    pass\n", []),
    ("method-ref", "move = model.cuda\n", [(2, "cuda-method-ref")]),
    ("option-in-function", "def train(args, model):\n    use_cuda = args.cuda\n", []),
    ("assigned-field", "state.cuda = True\nflag = state.cuda\nmove = model.cuda\n", [(4, "cuda-method-ref")]),
    ("namespace-is-cuda", "args = p.parse_args()\nif args.is_cuda:\n    pass\n", []),
    ("config-is-cuda", "def f(cfg):\n    return cfg.is_cuda\n", [(3, "cuda-field")]),
    ("field-is-cuda", "class C:\n    is_cuda: bool = False\nok = x.is_cuda\n", [(4, "cuda-field")]),
    ("visible-devices", "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n", [(3, "cuda-env")]),
    ("nccl-env", "import os\nos.environ.setdefault('NCCL_DEBUG', 'INFO')\n", [(3, "cuda-env")]),
    ("cudnn-alias", "import torch.backends.cudnn as cudnn\ncudnn.benchmark = True\n", [(3, "cuda-only-setting")]),
    ("tf32", "torch.backends.cuda.matmul.allow_tf32 = True\n", [(2, "cuda-only-setting")]),
    ("chained-check", "ok = a == device.type == 'cuda'\n", [(2, "cuda-string")]),
    ("string-compare", "if args.device == 'cuda':\n    pass\n", [(2, "cuda-string")]),
]


@pytest.mark.parametrize("source,expected", [(s, e) for _, s, e in LEFT], ids=[c[0] for c in LEFT])
def test_left_alone_and_reported(source: str, expected: list[tuple[int, str]]) -> None:
    result = migrate_source(HEAD + source, "m.py")
    assert result.rewritten == HEAD + source
    assert sorted((f.line, f.kind) for f in result.findings) == sorted(expected)


def test_map_location_function_loads(tmp_path: Path) -> None:
    """The rewritten ``map_location`` lambda really loads a checkpoint (a storage's ``.to`` takes ``device=``)."""
    path = tmp_path / "w.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    code = migrate_source(HEAD + "def load(p, gpu: int):\n"
                          "    return torch.load(p, map_location=lambda storage, loc: storage.cuda(gpu))\n").rewritten
    namespace: dict[str, object] = {}
    exec(compile(code, "<migrated>", "exec"), namespace)
    loaded = namespace["load"](str(path), 0)  # type: ignore[operator]
    assert torch.equal(loaded["w"], torch.arange(3.0)) and loaded["w"].device.type == "cpu"


def test_device_context_targets_torch_accelerator_only_where_it_exists() -> None:
    source = HEAD + "with torch.cuda.device(1):\n    pass\n"
    with_member = migrate_source(source, torch_accelerator=frozenset({"device_index"})).rewritten
    assert f"with torch.accelerator.device_index({NOT_CPU} 1):" in with_member
    other_form = migrate_source(HEAD + "with torch.cuda.device(device=1):\n    pass\n").rewritten
    assert f"with torch.accelerator.device_index({NOT_CPU} 1):" in other_form  # keyword passed positionally
    starred = migrate_source(HEAD + "with torch.cuda.device(*where):\n    pass\n", "m.py")
    assert starred.rewritten == HEAD + "with torch.cuda.device(*where):\n    pass\n"
    assert [f.kind for f in starred.findings] == ["amp-call-args"]
    without = migrate_source(source, torch_accelerator=frozenset()).rewritten
    assert "with get_accelerator().device(1):" in without
    assert "torch.accelerator" not in without


def test_detected_members_are_the_installed_torch_members() -> None:
    from anyaccel.migrate.torch_api import torch_accelerator_members

    members = torch_accelerator_members()
    assert members == {m for m in ("device_index",) if callable(getattr(torch.accelerator, m, None))}


@pytest.mark.parametrize("acc,expected", [(CPU_Accelerator(), False), (CUDA_Accelerator(), True)],
                         ids=["cpu", "cuda"])
def test_rewritten_checks_evaluate_like_the_original(acc: object, expected: bool) -> None:
    """On the CPU accelerator a migrated check is False for the CPU (the original's CPU branch); on CUDA the
    check is True for a CUDA device, as the original."""
    source = (HEAD + "def checks(device):\n    return [device.type == 'cuda', 'cuda' in str(device), "
              "device.type != 'cuda']\n")
    code = migrate_source(source).rewritten
    namespace: dict[str, object] = {}
    exec(compile(code.replace(IMPORT, ""), "<migrated>", "exec"), {"get_accelerator": lambda: acc}, namespace)
    own = torch.device("cuda" if expected else "cpu")
    assert namespace["checks"](own) == [expected, expected, not expected]  # type: ignore[operator]
