"""``anyaccel.migrate.isolated``: the parse and the rewrite after it have bounds of their own.

Before, one bound of 60 s covered the whole migration of a file, so a long flat file (20,000 lines: nothing
deep) was refused as "nested or chained too deeply". A stand-in worker (same protocol, a sleep in place of
the rewrite or the parse) shows which bound applies and what reason the finding gives, without a slow file.
"""

from __future__ import annotations

import pytest

from anyaccel.migrate.isolated import _BOOT, IsolatedMigrator

#: A worker that answers like ``serve``, sleeping PARSE_S before "parsed" (never sending it when < 0) and
#: REWRITE_S after it.
FAKE = """
import pickle, sys, time
sys.path[:0] = pickle.load(sys.stdin.buffer)
from anyaccel.migrate.findings import MigrationResult
from anyaccel.migrate.isolated import send
stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
while True:
    try:
        source, path, members = pickle.load(stdin)
    except EOFError:
        break
    if {parse_s} < 0:
        time.sleep(3600)
    time.sleep({parse_s})
    send(stdout, ("parsed", None))
    time.sleep({rewrite_s})
    send(stdout, ("ok", MigrationResult(source, source + "# done\\n", ())))
"""


def _migrator(parse_s: float, rewrite_s: float, timeout_s: float, per_line: float) -> IsolatedMigrator:
    class Fake(IsolatedMigrator):
        _WORKER = ("-c", FAKE.format(parse_s=parse_s, rewrite_s=rewrite_s))

    return Fake(torch_accelerator=frozenset(), timeout_s=timeout_s, rewrite_s_per_line=per_line)


FLAT = "x = 1\n" * 1000


def test_a_rewrite_longer_than_the_parse_bound_is_not_refused() -> None:
    """The parse ends within its bound; the rewrite takes longer than that bound, within its own."""
    with _migrator(parse_s=0, rewrite_s=2, timeout_s=1, per_line=0.06) as migrator:  # rewrite bound: 61 s
        result = migrator.migrate(FLAT, "flat.py")
    assert result.error is None and result.rewritten == FLAT + "# done\n"


def test_a_rewrite_past_its_bound_is_too_slow_not_too_complex() -> None:
    with _migrator(parse_s=0, rewrite_s=3600, timeout_s=0.5, per_line=0.0005) as migrator:  # bound: 1.0005 s
        result = migrator.migrate(FLAT, "flat.py")
    assert result.error is not None and result.error.kind == "too-slow", result.error
    assert "libcst parsed it, but the rewrite of its 1001 lines took longer than 1.0005 s" in result.error.message
    assert "nested or chained" not in result.error.message and result.rewritten == FLAT


def test_a_stalled_parse_is_still_too_complex() -> None:
    with _migrator(parse_s=-1, rewrite_s=0, timeout_s=0.5, per_line=60.0) as migrator:
        result = migrator.migrate(FLAT, "flat.py")
    assert result.error is not None and result.error.kind == "too-complex"
    assert "libcst's parser took longer than 0.5 s" in result.error.message


def test_the_real_worker_reports_the_parse_and_migrates() -> None:
    assert IsolatedMigrator._WORKER == ("-c", _BOOT)
    source = "import torch\n" + "y = foo(1, bar=2)\n" * 200 + "torch.cuda.synchronize()\n"
    with IsolatedMigrator(torch_accelerator=frozenset(), timeout_s=60, rewrite_s_per_line=0.06) as migrator:
        result = migrator.migrate(source, "flat.py")
    assert result.error is None and "get_accelerator().synchronize()" in result.rewritten


@pytest.mark.parametrize("lines", [0, 1])
def test_the_rewrite_bound_grows_with_the_file(lines: int) -> None:
    """A file of one line (no newline) still gets the parse bound for its rewrite."""
    with _migrator(parse_s=0, rewrite_s=0, timeout_s=5, per_line=0.06) as migrator:
        result = migrator.migrate("x = 1" + "\n" * lines, "tiny.py")
    assert result.error is None
