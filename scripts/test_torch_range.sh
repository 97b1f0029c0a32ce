#!/usr/bin/env bash
# Test anyaccel on the ends of its supported torch range, each in a venv of its own (.venv-torch<version>).
#
# The native ops target torch's stable ABI from TORCH_TARGET_VERSION 2.10 on, so one binary serves every torch
# from 2.10; this proves the Python around them on the oldest torch of that range and on the newest release
# (with the Triton it pins). The main venv (.venv, the README's torch) runs the whole suite; these run the
# op, accelerator, op-builder and compatibility tests, among them the device_api tests
# (tests/accelerator/test_device_api.py: anyaccel's calls on torch.xpu and torch.mps checked against each torch).
#
# Usage: bash scripts/test_torch_range.sh ["torch==2.10.0 numpy<2.4" "torch==2.15.0 triton==3.9.0" ...]
# (NumPy below 2.4 beside torch 2.10: Triton 3.6's interpreter, which the CPU tests of the Triton kernels run on,
# cannot run them with NumPy 2.4; with it those tests skip, naming the versions.)
# Environment: pip's configuration files are bypassed (PIP_CONFIG_FILE=/dev/null) because a machine-wide
# constraint may cap torch below the newest release. Off an x86-64 Linux with a local CPU wheel this downloads
# torch's default (CUDA) build from PyPI: about 3 GB of downloads, 6 to 7 GB installed and a few minutes a
# version here. So that a small disk holds it: pip resolves the whole set first (--dry-run --report), then
# installs torch, Triton and the CUDA libraries one at a time with --no-deps (the small rest in one call), so
# the disk holds what is installed plus the download of one of them (the largest, cuDNN, is under 1 GB), not
# every download at once beside everything installed;
# pip keeps no copy of the downloads (--no-cache-dir), unpacks them beside the venv (not in a /tmp that may
# be a small tmpfs), and each venv is removed once its tests ran (ANYACCEL_KEEP_RANGE_VENVS=1 keeps them, to
# rerun tests by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
    specs=("torch==2.10.0 numpy<2.4" "torch==2.15.0 triton==3.9.0")
fi
for spec in "${specs[@]}"; do
    version=${spec%% *}
    venv=.venv-${version//=/}
    start=$SECONDS
    python3 -m venv "$venv"
    mkdir -p "$venv/tmp"
    pip_=(env TMPDIR="$PWD/$venv/tmp" PIP_CONFIG_FILE=/dev/null "$venv"/bin/python -m pip install -q --no-cache-dir
          --no-compile)
    # shellcheck disable=SC2086  # the spec is a list of requirements
    "${pip_[@]}" --dry-run --ignore-installed --report "$venv/tmp/report.json" $spec -e ".[test]"
    "$venv"/bin/python - "$venv/tmp/report.json" > "$venv/tmp/pins.txt" <<'PY'
import json
import sys

# one line per pip call: the big ones (torch, Triton, the CUDA libraries: 0.1 to 0.9 GB each) alone, the rest
# (small, about 0.2 GB together) in one call
big, small = [], []
for item in json.load(open(sys.argv[1]))["install"]:
    if not item.get("is_direct"):  # the project itself comes last, editable
        name = item["metadata"]["name"]
        pin = f"{name}=={item['metadata']['version']}"
        (big if name.lower().startswith(("torch", "triton", "nvidia-", "cuda-")) else small).append(pin)
print("\n".join([*big, *([" ".join(small)] if small else [])]))
PY
    while read -r pins; do
        # shellcheck disable=SC2086  # a line is a list of requirements
        "${pip_[@]}" --no-deps $pins < /dev/null
    done < "$venv/tmp/pins.txt"
    "${pip_[@]}" --no-deps -e .
    "$venv"/bin/python -m pip check
    echo "== $spec: installed in $((SECONDS - start)) s"
    "$venv"/bin/python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    "$venv"/bin/python -m pytest -q -p no:cacheprovider tests/_compat tests/ops tests/accelerator tests/op_builder \
        tests/test_import_cost.py
    echo "== $spec: done in $((SECONDS - start)) s"
    if [ "${ANYACCEL_KEEP_RANGE_VENVS:-0}" != 1 ]; then
        rm -rf "$venv"
    fi
done
