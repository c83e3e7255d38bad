"""What ``clover bench train-memory`` measures (its flags and table are
``clover.commands.bench_train``): peak memory per rank of one training step at 1 and 2 processes.

A model whose parameters dominate memory (``MODEL``: hidden 1024, 8 layers, 32 experts, ~250 M
parameters, ~1 GB in fp32) is written once as the warm-start source; then ``clover train`` runs
one step under ``torchrun`` (gloo on CPU) with every scale feature on: the model built sharded
from the meta device, ``--init-from`` streamed into the shards, bf16 mixed precision, activation
checkpointing, and the sharded (DCP) checkpoint at the end. Each rank reports its peak resident
set (``VmHWM``) and, as its own figure, the one it had after importing torch and clover, before
training (nothing is subtracted from the peak). With fp32 weights, gradients and AdamW moments
sharded, a rank at 2 processes should peak at <= 0.6x the 1-process peak. What does not shrink
with more ranks (the interpreter and libraries, ~0.3 GB; one layer's gathered weights and
gradients; the validation pass at the end) is why the model is this large: at ~600 MB of
parameters the ratio measured 0.61.

``python -m clover.bench.train_memory OUT SPEC``: the per-rank wrapper around ``clover train``
(``clover.train.run.train`` on the ``RunSpec`` that the JSON file ``SPEC`` holds) that the
benchmark launches; ``train_flags`` gives the same run as ``clover train``'s flags.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clover.data import default_model_dir

# params + grads + AdamW moments dominate: wide experts, a small batch of short sequences
SHAPE = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "num_experts_per_tok",
)
# the medium preset's attention and GDN (``SHAPE``, filled in by ``_model``) with twice the
# experts at half the width
MODEL = {
    "layer_types": None,
    "num_experts": 32,
    "moe_intermediate_size": 256,
    "shared_expert_intermediate_size": 512,
}
RUN = {"train": {"micro_batches": 1, "warmup": 1}, "data": {"batch_size": 2, "max_len": 256, "curriculum_steps": 0}}
# every scale feature on: bf16 mixed precision (the model built sharded from the meta device) and checkpointing
SCALE = {"dtype": "bfloat16", "activation_checkpointing": True}
TARGET = 0.6  # per-rank peak at 2 processes over the 1-process peak
MMAP_THRESHOLD = 1 << 16


def _model() -> dict:
    """``MODEL`` over the medium preset's ``SHAPE``."""
    from clover.model.config import PRESETS  # deferred: clover.model loads torch, not needed by clover --help

    return {**{k: PRESETS["medium"][k] for k in SHAPE}, **MODEL}


def _hwm() -> int:
    """This process's peak resident set in bytes (``VmHWM``; ru_maxrss would carry the peak of
    the process that started it across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _source(out: Path):
    """The warm-start source: the bundled model's config and tokenizer, ``MODEL``'s shape,
    random weights. Returns its parameter bytes and config."""
    import torch  # deferred: torch, not for clover --help

    from clover.model import CloverConfig, CloverForBlockDiffusion  # deferred: loads torch, not for clover --help
    from clover.model.io import load_config, save_model  # deferred: loads torch, not for clover --help

    bundled = default_model_dir()
    config = CloverConfig.from_dict({**load_config(bundled).to_dict(), **_model()})
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(config)
    save_model(model, out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(bundled / f, out / f)
    return sum(p.numel() * p.element_size() for p in model.parameters()), config


def _predicted(config, worlds: list[int]) -> dict[int, int]:
    """The memory model's per-rank bytes of the step (clover/train/memory_model.py): the batch's
    clean tokens split over the ranks, CPU attention kernels, checkpointing on as in ``SCALE``."""
    import torch  # deferred: torch, not for clover --help

    from clover.train.memory_model import activation_terms, estimate  # deferred: loads torch, not for clover --help

    terms = activation_terms(config, torch.bfloat16)
    tokens = RUN["data"]["batch_size"] * RUN["data"]["max_len"]
    return {w: estimate(config, w, tokens // w, True, gpu_attention=False, terms=terms).peak for w in worlds}


def run_spec(work: Path, src: Path, world: int) -> dict:
    """The ``clover.train.setup.RunSpec`` fields of the step at ``world`` processes: one step of
    the airspace recipe from ``src`` with ``RUN`` and ``SCALE``, its run in ``work``."""
    spec = {"out": str(work / f"run-{world}"), "recipe": "airspace", "config": str(work / "run.json"), "steps": 1}
    return {**spec, "init_from": str(src), **SCALE, "progress": False}


def train_flags(spec: dict) -> list[str]:
    """``clover train``'s flags for a ``RunSpec``'s fields (a field at its default gives none)."""
    flags = []
    for name, value in spec.items():
        flag = "--" + name.replace("_", "-")
        if name == "progress":
            flags += [] if value else ["--no-progress"]
        elif value is True:
            flags.append(flag)
        elif value not in (None, False):
            flags += [flag, str(value)]
    return flags


def _launch(work: Path, src: Path, world: int, mmap_threshold: int) -> tuple[list[dict], float, list[str]]:
    """One ``clover train`` step under torchrun with ``world`` processes; each rank's figures."""
    out = work / f"rss-{world}"
    spec = run_spec(work, src, world)
    (work / f"spec-{world}.json").write_text(json.dumps(spec))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={world}",
        "-m",
        "clover.bench.train_memory",
        str(out),
        str(work / f"spec-{world}.json"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    prefix = ["OMP_NUM_THREADS=1"]
    if mmap_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
        prefix.append(f"MALLOC_MMAP_THRESHOLD_={mmap_threshold}")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"the {world}-process run failed:\n{r.stderr[-3000:]}")
    ranks = [json.loads(Path(f"{out}.{k}").read_text()) for k in range(world)]
    command = [*prefix, "torchrun", "--standalone", f"--nproc_per_node={world}", "-m", "clover", "train"]
    return ranks, wall, [*command, *train_flags(spec)]


def measure_train_memory(worlds: list[int], work_dir: str | None = None, mmap_threshold: int = MMAP_THRESHOLD) -> dict:
    """One training step at each of ``worlds`` processes (in ``work_dir``, default a temporary
    directory) → the figures as the JSON holds them: each rank's baseline and peak resident set,
    the memory model's estimate, wall times and commands, and the 2-over-1 ratio against
    ``TARGET`` when both were run. A run that fails: a RuntimeError with its stderr's end."""
    with tempfile.TemporaryDirectory(prefix="clover-train-memory-") as tmp:
        work = Path(work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / "run.json").write_text(json.dumps(RUN))
        param_bytes, config = _source(work / "source")
        figs = {w: _launch(work, work / "source", w, mmap_threshold) for w in worlds}
    peak = {str(w): [r["peak_rss_bytes"] for r in figs[w][0]] for w in worlds}
    model = _predicted(config, worlds)
    base = {str(w): [r["baseline_rss_bytes"] for r in figs[w][0]] for w in worlds}
    res = {
        "preset": "train-memory: hidden 1024, 8 layers (6 GDN + 2 attention), 32 experts of 256, top-2",
        "model": _model(),
        "flags": train_flags(SCALE),
        "param_bytes": param_bytes,
        "world_sizes": worlds,
        "peak_rss_bytes": peak,
        "baseline_rss_bytes": base,
        "memory_model_bytes": {str(w): model[w] for w in worlds},  # above the baseline
        "malloc_mmap_threshold": mmap_threshold or None,
        "wall_s": {str(w): round(figs[w][1], 1) for w in worlds},
        "commands": {str(w): " ".join(figs[w][2]) for w in worlds},
    }
    if 1 in worlds and 2 in worlds:
        ratio = max(peak["2"]) / peak["1"][0]
        res |= {"ratio_2_over_1": round(ratio, 3), "target": TARGET, "target_met": ratio <= TARGET}
    return res


def worker(out: str, spec_file: str) -> int:
    """Run ``clover train`` (the ``RunSpec`` in ``spec_file``) in this rank, then write its peak
    resident set and its baseline to ``OUT.<rank>``."""
    # the baseline: the modules a rank imports before its step
    import clover.train.fsdp
    import clover.train.sharded_checkpoint  # noqa: F401

    fields = json.loads(Path(spec_file).read_text())
    baseline = _hwm()
    from clover.train.run import train  # after the baseline, where `clover train` imports it
    from clover.train.setup import RunSpec

    code = train(RunSpec(**fields))
    rank = int(os.environ.get("RANK", "0"))
    Path(f"{out}.{rank}").write_text(json.dumps({"baseline_rss_bytes": baseline, "peak_rss_bytes": _hwm()}))
    return code


if __name__ == "__main__":
    sys.exit(worker(*sys.argv[1:3]))
