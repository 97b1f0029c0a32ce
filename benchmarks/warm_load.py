"""Time a warm ``load()``: the op is in the cache, the process has never loaded it.

Each sample is a fresh interpreter (``python -c``) that imports anyaccel and torch, then times one
``get_accelerator().create_op_builder(NAME).load()``, so the library's dlopen, the integrity checks, the
function check and the fake registration are all in the number; a first run builds the op if needed.

Usage::

    python benchmarks/warm_load.py [--builder CPUAdamBuilder] [--runs 15] [--profile]

Prints the median and minimum in milliseconds (``--profile``: the slowest calls of one load, cProfile).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

_SNIPPET = """
import time, torch
from anyaccel import get_accelerator
builder = get_accelerator().create_op_builder({name!r})
t0 = time.perf_counter()
builder.load()
print((time.perf_counter() - t0) * 1e3)
"""

_PROFILE = """
import cProfile, pstats, torch
from anyaccel import get_accelerator
builder = get_accelerator().create_op_builder({name!r})
profile = cProfile.Profile()
profile.runcall(builder.load)
pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
"""


def main() -> None:
    """Run the samples and print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builder", default="CPUAdamBuilder")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    snippet = (_PROFILE if args.profile else _SNIPPET).format(name=args.builder)
    subprocess.run([sys.executable, "-c", _SNIPPET.format(name=args.builder)], check=True, capture_output=True)
    if args.profile:
        subprocess.run([sys.executable, "-c", snippet], check=True)
        return
    samples = [float(subprocess.run([sys.executable, "-c", snippet], check=True, capture_output=True,
                                    text=True).stdout.split()[-1]) for _ in range(args.runs)]
    print(f"{args.builder} warm load(): median {statistics.median(samples):.2f} ms, "
          f"min {min(samples):.2f} ms over {args.runs} fresh processes")


if __name__ == "__main__":
    main()
