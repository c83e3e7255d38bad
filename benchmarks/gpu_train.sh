#!/usr/bin/env bash
# The airspace recipe on one GPU, as one prepared command: a wider model than the bundled one
# (hidden 256, 8 experts; the bundled tokenizer), trained from scratch with block sizes drawn from
# 1 to 64 for at most 8 minutes, then compared with the bundled model on the airspace validation
# chats and the hand-written messages (benchmarks/compare_models.py). Leaves at most 8 files in $OUT:
#
#   model/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json, training.json}
#   train_log.jsonl   the run's log          gpu_train.json   comparison and settings
#   gpu_train.txt     the table, the run's last lines
#
#   OUT=DIR bash benchmarks/gpu_train.sh [--dry-run]
#
# --dry-run: the same on the CPU with a tiny model, 2 steps and a few chats (seconds, one thread).
# Environment: OUT (default ./gpu_train_out), MINUTES (training budget, default 6), WORK (run
# directory with the checkpoints, default a temporary one), PYTHON.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || PY=python
dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
OUT="${OUT:-gpu_train_out}"
if [ -z "${WORK:-}" ]; then WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
MINUTES="${MINUTES:-6}"
mkdir -p "$OUT" "$WORK/run"
OUT="$(cd "$OUT" && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import clover, safetensors" >/dev/null 2>&1; then
    echo "gpu_train: clover does not import; pip install -e . (needs its dependencies)" >&2
    timeout 120 "$PY" -m pip install -q --retries 1 --timeout 10 -e "$ROOT" >&2 || echo "gpu_train: pip failed" >&2
fi
# the wider model shares the bundled tokenizer: a run directory that holds one trains with it
cp "$ROOT"/clover/assets/default/tokenizer*.json "$WORK/run/"
if [ "$dry" = 1 ]; then
    export OMP_NUM_THREADS=1
    DEVICE=cpu THREADS=1 WORKERS=0 N=4 CASE_N=2 STEPS=2 BUDGET=""
    cat > "$WORK/config.json" <<'JSON'
{"model": {"hidden_size": 32, "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
           "num_experts": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32},
 "train": {"lr": 1e-3, "warmup": 1, "eval_every": 2, "ckpt_every": 2, "log_every": 1, "micro_batches": 1},
 "data": {"batch_size": 2, "max_len": 256, "decision_frac": 0.0}}
JSON
else
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
    DEVICE=cuda THREADS=4 WORKERS=$(( $(nproc) > 4 ? $(nproc) - 4 : 1 )) N=200 CASE_N=1000 STEPS=100000
    BUDGET="--time-budget $MINUTES"
    # batch 128: at block size 1 every answer token is its own noisy block, and the step keeps
    # all of them for one backward pass (the peak grows with the batch, not the micro-batches)
    cat > "$WORK/config.json" <<'JSON'
{"model": {"hidden_size": 256, "num_hidden_layers": 6,
           "layer_types": ["linear_attention", "full_attention", "linear_attention", "linear_attention",
                           "full_attention", "full_attention"],
           "num_attention_heads": 8, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
           "num_experts": 8, "moe_intermediate_size": 256, "shared_expert_intermediate_size": 256},
 "train": {"lr": 1e-3, "warmup": 50, "eval_every": 100, "ckpt_every": 200, "log_every": 10, "micro_batches": 1},
 "data": {"batch_size": 128, "max_len": 1024}}
JSON
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >&2 || true
fi
t0=$(date +%s)
# shellcheck disable=SC2086  # BUDGET is empty or two words
timeout --signal=INT --kill-after=30 $(( 60 * MINUTES + 150 )) "$PY" -m clover train --recipe airspace \
    --config "$WORK/config.json" --out "$WORK/run" --export "$OUT/model" --steps "$STEPS" $BUDGET \
    --device "$DEVICE" --threads "$THREADS" --workers "$WORKERS" --no-progress > "$WORK/train.out" 2>&1 \
    || echo "gpu_train: training stopped with status $?" >> "$WORK/train.out"
t1=$(date +%s)
cp "$WORK/run/train_log.jsonl" "$OUT/train_log.jsonl" 2>/dev/null || true
timeout 240 "$PY" "$ROOT/benchmarks/compare_models.py" --model "wider=$OUT/model" --model bundled= --n "$N" \
    --cases "$ROOT/benchmarks/newcomer_messages.jsonl" --cases "$ROOT/benchmarks/operator_messages.jsonl" \
    --case-n "$CASE_N" --device "$DEVICE" --threads "$THREADS" --json "$WORK/compare.json" > "$WORK/compare.txt" 2>&1 \
    || echo "gpu_train: comparison stopped with status $?" >> "$WORK/compare.txt"
"$PY" - "$WORK" "$OUT" "$dry" "$(( t1 - t0 ))" <<'PY'
import json, sys
from pathlib import Path
work, out, dry, train_s = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
cmp = json.loads((work / "compare.json").read_text())["figures"] if (work / "compare.json").exists() else None
rec = json.loads((out / "model" / "training.json").read_text()) if (out / "model" / "training.json").exists() else {}
res = {"dry_run": dry, "train_s": train_s, "steps": rec.get("step"), "val_loss": rec.get("val_loss"),
       "params": rec.get("total_params"), "config": json.loads((work / "config.json").read_text()), "compare": cmp}
(out / "gpu_train.json").write_text(json.dumps(res, indent=1))
tail = (work / "train.out").read_text(errors="replace").splitlines()[-15:]
(out / "gpu_train.txt").write_text((work / "compare.txt").read_text() + "\n\n" + "\n".join(tail) + "\n")
print("gpu_train:", json.dumps({k: res[k] for k in ("dry_run", "train_s", "steps", "val_loss", "params")}))
print((work / "compare.txt").read_text())
PY
