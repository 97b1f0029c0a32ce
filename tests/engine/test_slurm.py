"""SLURM's hostlist and tasks-per-node forms."""

from __future__ import annotations

import pickle

import pytest

from anyaccel.engine.slurm import SlurmFormatError, first_host, tasks_on_node


@pytest.mark.parametrize("nodelist,host", [
    ("node7", "node7"),
    ("gnode[10,20,25,37]", "gnode10"),
    ("gpu[001-004,007],login1", "gpu001"),
    ("a,b[1-2]", "a"),
    ("rack[1-2]-n[01-08]", "rack1-n01"),
    ("node[3]", "node3"),
    (" nodeA , nodeB", "nodeA"),
])
def test_first_host(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.parametrize("nodelist", ["", "node[1-2", "node1-2]", "node[]", ","])
def test_first_host_rejects_malformed(nodelist: str) -> None:
    with pytest.raises(SlurmFormatError) as err:
        first_host(nodelist)
    assert repr(nodelist) in str(err.value)


@pytest.mark.parametrize("counts,node,tasks", [("4", 0, 4), ("2(x3),1", 0, 2), ("2(x3),1", 2, 2),
                                               ("2(x3),1", 3, 1), ("1,3", 1, 3)])
def test_tasks_on_node(counts: str, node: int, tasks: int) -> None:
    assert tasks_on_node(counts, node) == tasks


@pytest.mark.parametrize("counts,node", [("2(x3),1", 4), ("two", 0), ("2(x)", 0), ("", 0)])
def test_tasks_on_node_rejects(counts: str, node: int) -> None:
    with pytest.raises(SlurmFormatError):
        tasks_on_node(counts, node)


def test_error_pickles() -> None:
    err = SlurmFormatError("x[", "node list")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is SlurmFormatError and str(again) == str(err)
