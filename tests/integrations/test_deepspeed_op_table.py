"""DeepSpeed's op table completed with every op anyaccel answers (anyaccel/integrations/deepspeed/op_table.py),
on a stand-in for DeepSpeed's ``all_ops`` module (no DeepSpeed needed)."""

from __future__ import annotations

import types
from typing import Any

from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.integrations.deepspeed import op_table
from anyaccel.integrations.deepspeed.builders import implemented_builders


class _View:
    """The two members of the DeepSpeed view that ``complete`` uses, over anyaccel's own lookup."""

    _name = "cpu"

    def create_op_builder(self, name: str) -> Any:
        return CPU_Accelerator().create_op_builder(name)


def test_every_op_anyaccel_answers_is_added_and_deepspeeds_entries_stay() -> None:
    theirs = object()
    all_ops = types.ModuleType("all_ops")
    all_ops.ALL_OPS = {"cpu_adam": theirs}  # type: ignore[attr-defined]
    all_ops.__op_builders__ = [theirs]  # type: ignore[attr-defined]
    added = op_table.complete(all_ops, _View())
    assert "cpu_lamb" in added and "cpu_adam" not in added  # FusedLambBuilder on the CPU is anyaccel's cpu_lamb
    assert all_ops.ALL_OPS["cpu_adam"] is theirs
    answered = {CPU_Accelerator().create_op_builder(n).NAME for n in implemented_builders("cpu")}
    assert answered <= set(all_ops.ALL_OPS)
    assert len(all_ops.__op_builders__) == 1 + len(added)
    assert op_table.complete(all_ops, _View()) == []  # idempotent
