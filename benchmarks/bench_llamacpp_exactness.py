"""The llama.cpp back end at f32 against the PyTorch model: the largest relative logit error
(max |llama.cpp − PyTorch| over max |PyTorch|) of any pass in a run of blocks, per model and
block size, and after a long history committed in one pass.

    python benchmarks/bench_llamacpp_exactness.py [--blocks 6] [--history 100] [--threads 1] [--json PATH]

Each run is ``clover.bench.llamacpp.max_rel_logit_err``: per block a denoise pass and a fused
commit + denoise pass, a plain commit after the second block, a ragged block at the end. The
models: the bundled one, and random ``tiny`` models whose Clover parameters and norms are drawn
far from their starting values (``clover.bench.exactness.perturbed_tiny``), one MoE with the 3:1
GDN/attention layout, partial rotary and ``shift_logits``, one with a dense feed-forward. The tests
(tests/llamacpp/test_exactness.py) hold the same runs to 1e-4. Needs ``make llama-cpp``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

from clover.backends.llamacpp import LlamaCppModel, available
from clover.bench import print_table, set_threads, write_json
from clover.bench.exactness import perturbed_tiny
from clover.bench.llamacpp import f32_gguf, long_history_err, max_rel_logit_err
from clover.bench.results import Recorder
from clover.data import default_model_dir
from clover.export.gguf import export_gguf
from clover.model.io import load_model

# (the table's name for it, how to make it, the block sizes run)
RANDOM = (
    (
        "random tiny, MoE, 3:1 GDN/attention (8 layers), rotary 0.25, shift_logits",
        lambda: perturbed_tiny(1, num_hidden_layers=8, shift_logits=True, partial_rotary_factor=0.25),
        (32, 8, 5),
    ),
    (
        "random tiny, dense feed-forward, rotary 0.5",
        lambda: perturbed_tiny(2, num_experts=0, intermediate_size=48, shift_logits=False, partial_rotary_factor=0.5),
        (32, 8, 5),
    ),
)


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=6, help="blocks per run")
    p.add_argument("--history", type=int, default=100, help="blocks of history committed in one pass (0: skip)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for both runtimes")
    p.add_argument("--json", metavar="PATH", help="write the result file here")
    a = p.parse_args()
    if (reason := available()) is not None:
        raise SystemExit(f"bench_llamacpp_exactness: {reason}")
    set_threads(a.threads)
    rows, figures = [], {"blocks": a.blocks, "max_rel_logit_err": {}}
    with tempfile.TemporaryDirectory(prefix="clover-exactness-") as d:
        work = Path(d)
        bundled = load_model(default_model_dir(), "cpu", torch.float32).eval()
        path = export_gguf(default_model_dir(), work / "bundled.gguf", "f32").out
        c = bundled.config
        name = f"bundled ({c.layer_pattern}, MoE {c.num_experts} experts, rotary {c.partial_rotary_factor:g})"
        cases = [(name, bundled, path, (32, 16, 64))]
        for i, (label, make, sizes) in enumerate(RANDOM):
            (work / str(i)).mkdir()
            model = make()
            cases.append((label, model, f32_gguf(model, work / str(i)), sizes))
        for label, model, gguf, sizes in cases:
            lm = LlamaCppModel(str(gguf), threads=a.threads)
            for B in sizes:
                err = max_rel_logit_err(model, lm, B, a.blocks)
                figures["max_rel_logit_err"].setdefault(label, {})[B] = err
                rows.append([label, B, f"{a.blocks} blocks", f"{err:.1e}"])
            if model is bundled and a.history:
                err = long_history_err(model, lm, 32, a.history)
                figures["history_rel_logit_err"] = err
                rows.append([label, 32, f"{a.history * 32:,} tokens of history in one pass", f"{err:.1e}"])
    print_table(
        rec,
        "llama.cpp at f32 against PyTorch: the largest relative logit error of any pass",
        ["model", "block size", "run", "max relative error"],
        rows,
        ["max |llama.cpp − PyTorch| over max |PyTorch|; the tests' bound is 1e-4"],
    )
    write_json(rec, a.json, figures)


if __name__ == "__main__":
    main()
