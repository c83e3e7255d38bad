#!/usr/bin/env bash
# The seeds' ablation and the parallel-decoding objective, as equal-budget fine-tunes of one
# checkpoint on the airspace recipe (block sizes drawn from 1 to 64), each then decoded with the
# default policy on the first 100 validation chats at block 16, 32 and 64. Resumable: rerun the
# same command and finished parts are skipped.
#
#   benchmarks/ablation.sh BASE_MODEL_DIR [WORK_DIR]     (default WORK_DIR ~/.cache/clover/ablation)
#
# Variants: clover (the design as it is), causal (GDN causal inside the block too), noconv (no
# right-context conv), nocalib (no γ·ln n), conf0.3 / conf1.0 (the design, plus the confidence
# term of the loss at λ 0.3 / 1.0). Environment: STEPS (default 150), LR (default 1.5e-4),
# VARIANTS (space-separated, default all), N (validation chats, default 100). One thread per run.
# Prints one table row per variant and block size at the end (also WORK_DIR/ablation.md).
set -euo pipefail
BASE=${1:?usage: benchmarks/ablation.sh BASE_MODEL_DIR [WORK_DIR]}
W=${2:-$HOME/.cache/clover/ablation}
STEPS=${STEPS:-150}
LR=${LR:-1.5e-4}
N=${N:-100}
VARIANTS=${VARIANTS:-clover causal noconv nocalib conf0.3 conf1.0}
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
mkdir -p "$W"
masking() {  # the recipe's masking with the confidence term at λ $1
    echo "{\"t_min\": 0.05, \"t_max\": 1.0, \"weighting\": \"elbo\", \"complementary\": true, \"samples\": 2, \"confidence\": $1}"
}
for v in $VARIANTS; do
    case $v in
        clover) model='{}'; extra='' ;;
        causal) model='{"gdn_block_mixing": "causal"}'; extra='' ;;
        noconv) model='{"gdn_right_conv": false}'; extra='' ;;
        nocalib) model='{"gdn_block_calibration": false}'; extra='' ;;
        conf*) model='{}'; extra=", \"masking\": $(masking "${v#conf}")" ;;
        *) echo "ablation.sh: unknown variant $v" >&2; exit 2 ;;
    esac
    if [ ! -f "$W/$v/train.DONE" ]; then
        mkdir -p "$W/$v"
        echo "{\"train\": {\"steps\": $STEPS, \"lr\": $LR, \"warmup\": 20, \"eval_every\": $STEPS, \"ckpt_every\": 50$extra}, \"model\": $model}" > "$W/$v.json"
        OMP_NUM_THREADS=1 $PY -m clover train --recipe airspace --init-from "$BASE" --config "$W/$v.json" \
            --out "$W/$v/run" --export "$W/$v/export" --resume --threads 1 --no-progress >> "$W/$v.train.log" 2>&1
        touch "$W/$v/train.DONE"
    fi
    for b in 16 32 64; do
        [ -f "$W/$v.b$b.json" ] && continue
        OMP_NUM_THREADS=1 $PY benchmarks/compare_models.py --model "$v=$W/$v/export" --n "$N" --policy default \
            --block-size $b --threads 1 --json "$W/$v.b$b.json" > "$W/$v.b$b.log" 2>&1
    done
done
$PY - "$W" $VARIANTS <<'PY' | tee "$W/ablation.md"
import json, sys
from pathlib import Path
w, variants = Path(sys.argv[1]), sys.argv[2:]
print("| variant | validation loss | block 16: exact, TPF | block 32: exact, TPF | block 64: exact, TPF |")
print("| --- | --- | --- | --- | --- |")
for v in variants:
    log = [json.loads(x) for x in (w / v / "run" / "train_log.jsonl").read_text().splitlines() if '"eval"' in x]
    cells = []
    for b in (16, 32, 64):
        r = json.loads((w / f"{v}.b{b}.json").read_text())["figures"][v]["validation"]
        cells.append(f"{100 * r['exact']:.0f} %, {r['tpf']:.2f}")
    print(f"| {v} | {log[-1]['eval']['val_loss']:.3f} | " + " | ".join(cells) + " |")
PY
