"""The async I/O op's torch ops (anyaccel/csrc/aio/aio.cpp) against its spec and fakes: the same words for
the same bad call, opcheck where it applies, and torch.compile kept away from transfers that outlive the call.
(The spec-wide conformance tests run opcheck over dtype combinations, which this family has not.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from anyaccel.ops.aio.fakes import NOT_TRACEABLE
from anyaccel.ops.aio.spec import SPEC


def _bad_calls(path: str) -> dict[str, tuple[Any, ...]]:
    good = torch.zeros(64, dtype=torch.uint8)
    return {
        "handle out of range": (0, good, path, -1, 0),
        "fd out of range": (1, good, path, -2, 0),
        "negative offset": (1, good, path, -1, -5),
        "not contiguous": (1, torch.zeros(8, 8).t(), path, -1, 0),
        "path and fd": (1, good, path, 3, 0),
        "neither path nor fd": (1, good, "", -1, 0),
    }


@pytest.mark.parametrize("fn", ["aio_submit_read", "aio_submit_write"])
def test_fake_and_kernel_reject_bad_calls_with_the_same_message(aio_module, tmp_path, fn):
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = getattr(aio_module, fn)
    for what, args in _bad_calls(str(tmp_path / "f.bin")).items():
        with pytest.raises(RuntimeError) as kernel_error:
            op(*args)
        with FakeTensorMode() as mode:
            fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            with pytest.raises(RuntimeError) as fake_error:
                op(*fake_args)
        assert str(kernel_error.value) == str(fake_error.value), what
        assert str(kernel_error.value).startswith(f"{fn}: "), what


@pytest.mark.parametrize("fn", ["aio_submit_read", "aio_submit_write"])
def test_a_valid_call_cannot_be_traced(aio_module, tmp_path, fn):
    op = getattr(aio_module, fn)
    with pytest.raises(RuntimeError, match="torch.compile cannot trace it"):
        op(1, torch.zeros(4, device="meta"), str(tmp_path / "f.bin"), -1, 0)

    path = str(tmp_path / "f.bin")  # outside the compiled function: Dynamo 2.10 cannot trace pathlib's str()

    def call(buf: torch.Tensor) -> None:
        op(1, buf, path, -1, 0)

    torch._dynamo.reset()
    with pytest.raises(Exception, match="torch.compile cannot trace it"):
        torch.compile(call, fullgraph=True, backend="aot_eager")(torch.zeros(4))
    assert NOT_TRACEABLE.format(op=fn).startswith(fn)


def test_handle_calls_inside_a_compiled_function_run_eagerly_and_move_the_bytes(handle, tmp_path):
    path = str(tmp_path / "c.bin")
    x = torch.arange(5000, dtype=torch.float32)
    y = torch.zeros(5000)

    def step(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        handle.sync_pwrite(a, path)
        handle.async_pread(b, path)
        handle.wait()
        return b * 2

    torch._dynamo.reset()
    out = torch.compile(step, backend="aot_eager")(x, y)
    assert torch.equal(y, x) and torch.equal(out, 2 * x)


@pytest.mark.parametrize("fn", ["aio_submit_read", "aio_submit_write"])
def test_opcheck_schema_and_autograd_registration(aio_module, handle, tmp_path, fn):
    path = str(tmp_path / "o.bin")
    handle.sync_pwrite(torch.arange(1000, dtype=torch.float32), path)
    op = getattr(getattr(torch.ops, aio_module.namespace), fn).default
    for util in ("test_schema", "test_autograd_registration"):  # each util runs the op: wait in between
        torch.library.opcheck(op, (handle._id, torch.zeros(1000), path, -1, 0), test_utils=util)
        handle.wait()


def test_every_function_of_the_spec_is_registered(aio_module):
    ns = getattr(torch.ops, aio_module.namespace)
    assert {f.name for f in SPEC.functions} == {n for n in dir(ns) if n.startswith("aio_")}
    assert aio_module.aio_page_lock(0, 0, True) == 0  # an empty range locks nothing and succeeds
