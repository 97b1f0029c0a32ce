"""Cold build and warm load of CPU Adam in fresh processes, and the time from a SIGKILL of a build to the
next successful load. Compare with DeepSpeed's 45.7 s cold / 4.45 s warm (shared/reference/baselines.md).

Usage: python benchmarks/build_times.py   (uses a fresh temporary cache; prints a JSON summary)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

LOAD = ("import time, torch; t=time.perf_counter(); from anyaccel.op_builder import CPUAdamBuilder; "
        "m=CPUAdamBuilder().load(); print(time.perf_counter()-t)")


def load_seconds(env: dict) -> tuple[float, float]:
    """(wall seconds of the whole process, seconds of the load after `import torch`)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    env = dict(os.environ, ANYACCEL_CACHE_DIR=tempfile.mkdtemp(prefix="anyaccel-bench-"))
    cold_wall, cold_load = load_seconds(env)
    warm = [load_seconds(env)[1] for _ in range(5)]
    # kill a cold build 2 s in, then time the next successful load
    env2 = dict(env, ANYACCEL_CACHE_DIR=tempfile.mkdtemp(prefix="anyaccel-bench-"))
    proc = subprocess.Popen([sys.executable, "-c", LOAD], env=env2, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    t0 = time.perf_counter()
    load_seconds(env2)
    print(json.dumps({"cold_build_load_s": round(cold_load, 2), "cold_process_wall_s": round(cold_wall, 2),
                      "warm_load_ms_median": round(sorted(warm)[2] * 1000, 1),
                      "kill_to_next_load_s": round(time.perf_counter() - t0, 2)}))


if __name__ == "__main__":
    main()
