"""Weight and cache sizes of a preset at bf16, int8 and int4, against 16 and 24 GiB GPUs, as a
table: what ``clover info --preset P --bits B --context N`` computes from the config, one row per
precision (computed, not measured: activations, the CUDA context and framework overhead are not
counted).

    python benchmarks/quant_sizes.py [--preset qwen3.6-35b-a3b] [--context 8192] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

from clover.bench import print_table, write_json
from clover.bench.results import Recorder
from clover.commands.info import GPUS_GIB, memory_fit
from clover.model.config import preset
from clover.model.quant import DEFAULT_GROUP_SIZE

GIB = 2**30


def fit(g: dict, layers: int) -> str:
    """One GPU's cell: yes, or how far over and how many layers' routed experts would stay on the host."""
    if g["fits"]:
        return "yes"
    host = f" ({g['host_layers']} of {layers} layers' experts on the host)" if g["host_layers"] else ""
    return f"no: {g['over_bytes'] / GIB:.1f} GiB over{host}"


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen3.6-35b-a3b")
    ap.add_argument("--context", type=int, default=8192, help="tokens of one sequence's decoding cache")
    ap.add_argument("--json", metavar="PATH", help="write the result file here")
    a = ap.parse_args()
    config = preset(a.preset)
    rows, figures = [], {"preset": a.preset, "context": a.context, "by_bits": {}}
    for bits in (16, 8, 4):
        m = memory_fit(config, bits, None, a.context)
        figures["by_bits"][bits] = m
        g = DEFAULT_GROUP_SIZE.get(bits)
        name = "bf16" if bits == 16 else f"int{bits} ({'per row' if not g else f'groups of {g}'})"
        rows.append(
            [
                name,
                f"{m['weight_bytes'] / GIB:.1f} GiB",
                f"{m['expert_bytes'] / GIB:.1f} GiB",
                f"{m['cache_bytes'] / GIB:.2f} GiB",
                *(fit(m["gpus"][f"{gib}GiB"], config.num_hidden_layers) for gib in GPUS_GIB),
            ]
        )
    print_table(
        rec,
        f"{a.preset}, {a.context:,} tokens of context, batch 1: weights (quantized ones with their scales, "
        "the rest bf16) and the decoding cache",
        ["precision", "weights", "of which routed experts", "cache", *(f"{gib} GiB" for gib in GPUS_GIB)],
        rows,
    )
    write_json(rec, a.json, figures)


if __name__ == "__main__":
    main()
