#!/usr/bin/env bash
# The prepared GPU check: exactness on CUDA (fp32, bf16) against the fp64 CPU model, fla against
# the reference delta rule, and the 35B-A3B shape's prefill/decode speed and peak memory on one
# GPU. Runs as is on a fresh GPU machine with the repository copied in, in under 8 minutes; the
# figures go to a JSON file (written after every section) and a table.
#
#   bash benchmarks/gpu_check.sh [--dry-run] [--json PATH] [--budget-s S]
#
# --dry-run: the same on the CPU with the tiny preset (well under a minute, one thread).
# PATH: --json, else $GPU_CHECK_JSON, else gpu_check.json.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"  # no cd: a relative --json PATH is the caller's
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || PY=python

dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
if [ -z "${OMP_NUM_THREADS:-}" ]; then
    # the CPU only computes the fp64 reference here; a few threads, never more than the cores
    if [ "$dry" = 1 ]; then OMP_NUM_THREADS=1; else OMP_NUM_THREADS=$(( $(nproc) < 8 ? $(nproc) : 8 )); fi
fi
export OMP_NUM_THREADS

# clover from this tree; installed (editable) only when its dependencies are missing, and the
# check goes on without it if pip cannot reach an index
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import clover, safetensors, rich" >/dev/null 2>&1; then
    echo "gpu_check: clover does not import; pip install -e . (needs its dependencies)" >&2
    timeout 120 "$PY" -m pip install -q --retries 1 --timeout 10 -e "$ROOT" >&2 \
        || echo "gpu_check: pip install failed; trying as is" >&2
fi
if [ "$dry" = 0 ] && command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 || true
fi

# the script stops each section at its own budget; this is the net under all of them
exec timeout --signal=INT --kill-after=20 460 "$PY" "$ROOT/benchmarks/gpu_check.py" "$@"
