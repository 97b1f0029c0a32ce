"""``anyaccel._compat.torch_optim``: an optimizer's ``load_state_dict`` hooks, read through torch's private
tables and, when those are missing, none."""

from __future__ import annotations

import pytest
import torch

from anyaccel._compat import torch_optim
from anyaccel.ops.adam.cpu import CPUAdam


def test_load_state_dict_hooks_private_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPUAdam([p], lr=1e-3)
    seen: list[str] = []
    opt.register_load_state_dict_pre_hook(lambda o, sd: seen.append("pre"))
    opt.register_load_state_dict_post_hook(lambda o: seen.append("post"))
    ref = torch.optim.Adam([torch.nn.Parameter(torch.randn(3))], lr=1e-3)
    ref.register_load_state_dict_pre_hook(lambda o, sd: seen.append("pre"))
    ref.register_load_state_dict_post_hook(lambda o: seen.append("post"))
    opt.load_state_dict(opt.state_dict())
    ref.load_state_dict(ref.state_dict())
    assert seen == ["pre", "post"] * 2  # the same hooks, in torch's order
    pre, post = torch_optim.load_state_dict_hooks(opt)
    assert len(pre) == len(post) == 1
    monkeypatch.delattr(opt, "_optimizer_load_state_dict_pre_hooks")
    monkeypatch.setattr(opt, "_optimizer_load_state_dict_post_hooks", None, raising=False)
    assert torch_optim.load_state_dict_hooks(opt) == ([], [])
