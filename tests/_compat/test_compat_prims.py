"""``anyaccel._compat.prims``: elementwise promotion from torch's primitives and from ``torch.result_type``."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

from anyaccel._compat import prims

CASES: list[tuple[Any, ...]] = [
    (torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.float32)),
    (torch.ones(2, dtype=torch.bfloat16), 2.0),
    (torch.ones(2, dtype=torch.int32), torch.ones((), dtype=torch.float64)),
    (torch.ones(2, dtype=torch.int64), 3),
    (torch.ones(2, dtype=torch.uint8), torch.ones(2, dtype=torch.int8)),
    (torch.ones((), dtype=torch.float64), torch.ones(2, dtype=torch.float16), 1.5),
    (torch.ones(2, dtype=torch.bool), True),
    (torch.ones(2, dtype=torch.float16),),
    (torch.ones(2, dtype=torch.int16), torch.ones(2, dtype=torch.bool), torch.ones((), dtype=torch.int64)),
]


@pytest.mark.parametrize("rule", sorted(prims.RULES))
@pytest.mark.parametrize("args", CASES, ids=range(len(CASES)))
def test_fallback_equals_torchs_rules(rule: str, args: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    private = prims.elementwise_dtypes(*args, rule=rule)
    monkeypatch.setitem(sys.modules, "torch._prims_common", None)  # the import fails: the fallback runs
    assert prims.elementwise_dtypes(*args, rule=rule) == private


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="accepted"):
        prims.elementwise_dtypes(torch.ones(1), rule="nearest")
