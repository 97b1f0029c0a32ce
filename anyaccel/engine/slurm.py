"""SLURM's compressed lists: the first host of a node list, and one node's task count.

SLURM writes node lists in its hostlist syntax (``gpu[001-004,007],login1``) and per-node task counts in a
run-length form (``2(x3),1``), described in the ``srun``/``sbatch`` manuals (``SLURM_JOB_NODELIST``,
``SLURM_TASKS_PER_NODE``). Only what the engine needs is read: the first host (the rendezvous address, as
Lightning's ``SLURMEnvironment`` and ``scontrol show hostnames | head -1`` choose it) and the number of tasks
on one node. Pure functions; no ``scontrol`` call.
"""

from __future__ import annotations

import re

from typing_extensions import override

__all__ = ["SlurmFormatError", "first_host", "tasks_on_node"]

_RUN = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


class SlurmFormatError(ValueError):
    """A SLURM list that does not follow SLURM's syntax.

    Args:
        value: the text that was read.
        expected: the syntax it should follow.
    """

    def __init__(self, value: str, expected: str) -> None:
        self.value = value
        self.expected = expected
        super().__init__(f"{value!r} is not a SLURM {expected}")

    @override
    def __reduce__(self) -> tuple[type[SlurmFormatError], tuple[str, str]]:
        return type(self), (self.value, self.expected)


def _split_top_level(text: str) -> list[str]:
    """Split ``text`` on the commas outside brackets (``a[1,2],b`` -> ``["a[1,2]", "b"]``)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmFormatError(text, "node list (unbalanced ']')")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise SlurmFormatError(text, "node list (unbalanced '[')")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def first_host(nodelist: str) -> str:
    """The first host name of a SLURM node list.

    Args:
        nodelist: a hostlist such as ``"gpu[001-004,007],login1"``, ``"node7"`` or ``"rack[1-2]-n[01-08]"``.

    Returns:
        The first host: ``"gpu001"``, ``"node7"``, ``"rack1-n01"`` (each bracket gives its first value, with
        its zero padding).

    Raises:
        SlurmFormatError: empty list, unbalanced brackets, or an empty bracket.
    """
    items = _split_top_level(nodelist)
    if not items:
        raise SlurmFormatError(nodelist, "node list (it is empty)")

    def first_of(match: re.Match[str]) -> str:
        first = match.group(1).split(",")[0].split("-")[0].strip()
        if not first:
            raise SlurmFormatError(nodelist, "node list (empty range in brackets)")
        return first

    return re.sub(r"\[([^\]]*)\]", first_of, items[0])


def tasks_on_node(tasks_per_node: str, node_id: int) -> int:
    """The number of tasks SLURM runs on the node of relative index ``node_id``.

    Args:
        tasks_per_node: ``SLURM_TASKS_PER_NODE``-style counts: ``"4"``, ``"2(x3),1"`` (three nodes with 2 tasks,
            then one with 1).
        node_id: the node's index in the job step (``SLURM_NODEID``), from 0.

    Returns:
        The task count of that node.

    Raises:
        SlurmFormatError: the counts do not follow the syntax, or have no entry for ``node_id``.
    """
    counts: list[int] = []
    for item in tasks_per_node.split(","):
        match = _RUN.match(item.strip())
        if match is None:
            raise SlurmFormatError(tasks_per_node, "tasks-per-node list such as '2(x3),1'")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    if not 0 <= node_id < len(counts):
        raise SlurmFormatError(tasks_per_node, f"tasks-per-node list with an entry for node {node_id}")
    return counts[node_id]
