"""Parameter counts of the Qwen presets, Clover's against the transformers language model of the
same shape, as a table (``clover.bench.presets``; computed on the meta device, not measured).

    python benchmarks/preset_params.py [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

from clover.bench import print_table, write_json
from clover.bench.presets import FAMILY, preset_counts
from clover.bench.results import Recorder
from clover.model import preset


def feed_forward(c) -> str:
    if c.num_experts:
        return f"{c.num_experts} experts, {c.num_experts_per_tok} active"
    return f"dense {c.intermediate_size}" + (", head tied" if c.tie_word_embeddings else "")


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the result file here")
    a = ap.parse_args()
    rows, figures = [], {}
    for name in FAMILY:
        c, n = preset(name), preset_counts(name)
        figures[name] = n
        rows.append(
            [
                f"`{name}`",
                c.num_hidden_layers,
                c.hidden_size,
                feed_forward(c),
                f"{n['clover']:,}",
                f"{n['transformers']:,}",
                f"{n['clover_only']:,}",
            ]
        )
    print_table(
        rec,
        "Qwen presets: parameters of Clover's model and of the transformers language model (with its head)",
        ["preset", "layers", "hidden", "feed-forward", "Clover parameters", "transformers", "Clover's own"],
        rows,
    )
    write_json(rec, a.json, figures)


if __name__ == "__main__":
    main()
