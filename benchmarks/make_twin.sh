#!/usr/bin/env bash
# The bundled model's recipe, end to end: an autoregressive Qwen3.5-MoE base trained with a
# next-token loss, converted to Clover, adapted to block diffusion. Resumable: rerun the same
# command after an interruption and each step continues from its last checkpoint.
#
#   benchmarks/make_twin.sh [WORK_DIR]        (default ~/.cache/clover/twin)
#
# Environment: AR_MINUTES / ADAPT_MINUTES (time budgets, default 70 / 35), NPROC (processes under
# torchrun with FSDP2; default one per GPU present, 1 on a machine without GPUs or with
# DEVICE=cpu; NPROC=2 on a 2-core CPU runs one single-threaded process per core), THREADS (per
# process, default 1), DEVICE (auto|cpu|cuda), AR_CONFIG / ADAPT_CONFIG (JSON overrides for clover
# train --config). One single-threaded process per core keeps its speed when another job shares the CPU.
set -euo pipefail
W=${1:-$HOME/.cache/clover/twin}
AR_MINUTES=${AR_MINUTES:-70}
ADAPT_MINUTES=${ADAPT_MINUTES:-35}
THREADS=${THREADS:-1}
DEVICE=${DEVICE:-auto}
if [ -z "${NPROC:-}" ]; then  # one process per GPU (a process per rank asks for cuda:LOCAL_RANK)
    NPROC=0
    [ "$DEVICE" = cpu ] || NPROC=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [ "$NPROC" -ge 1 ] || NPROC=1
fi
mkdir -p "$W"
AR_CONFIG=${AR_CONFIG:-$W/ar.json}
ADAPT_CONFIG=${ADAPT_CONFIG:-$W/adapt.json}
[ -f "$AR_CONFIG" ] || echo '{"train": {"steps": 100000, "eval_every": 100, "ckpt_every": 25}, "model": {"full_attention_interval": 2}}' > "$AR_CONFIG"
[ -f "$ADAPT_CONFIG" ] || cat > "$ADAPT_CONFIG" <<'JSON'
{"train": {"steps": 100000, "lr": 5e-4, "warmup": 30, "eval_every": 100, "ckpt_every": 25},
 "data": {"batch_size": 16, "max_len": 1024, "decision_frac": 0.3, "conversation_frac": 0.25}}
JSON
run() { echo "+ $*" >&2; "$@"; }
train() { if [ "$NPROC" -gt 1 ]; then run torchrun --standalone --nproc_per_node="$NPROC" -m clover train "$@"; else run python -m clover train "$@"; fi; }
if [ ! -f "$W/ar/config.json" ] || [ ! -f "$W/ar.done" ]; then
  train --recipe airspace-ar --config "$AR_CONFIG" --out "$W/ar_run" --export "$W/ar" \
    --threads "$THREADS" --device "$DEVICE" --time-budget "$AR_MINUTES" --resume --no-progress
  touch "$W/ar.done"
fi
[ -f "$W/converted/config.json" ] || run python -m clover convert --from "$W/ar" --out "$W/converted" --dtype fp32
train --recipe airspace --init-from "$W/converted" --config "$ADAPT_CONFIG" --out "$W/adapt_run" \
  --export "$W/clover" --threads "$THREADS" --device "$DEVICE" --time-budget "$ADAPT_MINUTES" --resume --no-progress
