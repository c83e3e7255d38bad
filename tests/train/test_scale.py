"""Training at scale: the model built sharded from the meta device, bf16 mixed precision,
activation checkpointing, ``--init-from`` streamed into the shards and sharded (DCP)
checkpoints, in one process and under ``torchrun`` (gloo on CPU)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from clover.model import CloverForBlockDiffusion, preset
from tests.train.test_cli import BUNDLED, _train

ROOT = Path(__file__).parents[2]


def _run(tmp_path, name, procs, *args, script="scale_worker.py"):
    """tests/train/scale_worker.py in 1 process or under torchrun; returns the path it wrote."""
    cmd = [sys.executable, str(Path(__file__).with_name(script))]
    if procs > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}", cmd[1]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = tmp_path / f"{name}.json"
    r = subprocess.run(cmd + [str(out), *map(str, args)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def _worker(tmp_path, name, procs, *args):
    return json.loads(_run(tmp_path, name, procs, *args).read_text())


def _close(a, b, tol):
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(x)) for x, y in zip(a, b))


@pytest.fixture
def group():
    """A process group of one in this process, torn down after the test."""
    import torch.distributed as dist

    from clover.train.fsdp import single_process_group

    single_process_group()
    yield
    dist.destroy_process_group()


def test_meta_init_draws_the_distribution_of_the_models_own_init(group):
    """Every parameter of the sharded meta-built model follows the rule of the model's own init:
    the same constants, the same mean and spread for the random ones; the tied head stays tied
    and the rope frequencies are rebuilt."""
    from clover.train.fsdp import build_sharded

    config = preset("small", tie_word_embeddings=True)
    torch.manual_seed(0)
    ref = dict(CloverForBlockDiffusion(config).named_parameters())
    model = build_sharded(config, torch.device("cpu"))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert torch.equal(model.model.rotary_emb.inv_freq, CloverForBlockDiffusion(config).model.rotary_emb.inv_freq)
    for name, p in model.named_parameters():
        a, b = ref[name].detach(), p.full_tensor().detach()
        assert a.shape == b.shape, name
        if bool((a == a.flatten()[0]).all()):  # a constant init: exactly the same
            assert torch.equal(a, b), name
        elif name.endswith("A_log"):  # log U[1, 16], a few values per layer
            assert 0 <= float(b.min()) and float(b.max()) <= float(torch.tensor(16.0).log()) and b.unique().numel() > 1
        else:  # normal(0, std): the same mean and spread, within 5 standard errors of two samples
            se = (2 / a.numel()) ** 0.5
            assert abs(float(a.mean() - b.mean())) < 5 * se * float(a.std()), name
            assert abs(float(b.std() / a.std()) - 1) < 5 * se, name


def test_bf16_with_checkpointing_on_two_processes_matches_one_and_no_checkpointing(tmp_path):
    """bf16 mixed precision keeps fp32 weights and optimizer state while the layers compute in
    bf16; activation checkpointing recomputes each layer (its MoE runs twice per step) and
    changes no loss; one process and two give the same run."""
    two_ac = _worker(tmp_path, "two_ac", 2, "--dtype", "bfloat16", "--ac")
    two = _worker(tmp_path, "two", 2, "--dtype", "bfloat16")
    one_ac = _worker(tmp_path, "one_ac", 1, "--dtype", "bfloat16", "--ac")
    fp32 = _worker(tmp_path, "fp32", 1)
    for r in (two_ac, two, one_ac):
        assert r["weights"] == r["moments"] == ["torch.float32"] and r["mlp_dtype"] == "torch.bfloat16"
    assert fp32["mlp_dtype"] == "torch.float32"
    assert two_ac["mlp_calls_per_step"] == one_ac["mlp_calls_per_step"] == 2 and two["mlp_calls_per_step"] == 1
    assert two_ac["losses"] == two["losses"]  # recomputation is the same arithmetic
    assert _close(one_ac["losses"], two_ac["losses"], 1e-3), (one_ac, two_ac)
    assert not _close(fp32["losses"], two["losses"], 1e-6)  # bf16 really computes in bf16
    assert _close(fp32["losses"], two["losses"], 2e-2)


def test_sharded_checkpoint_from_two_processes_resumes_in_one(tmp_path):
    """A 2-process bf16 run killed at step 3 leaves a sharded checkpoint (safetensors and JSON
    only: nothing pickled) whose directory is also a model directory; resumed in one process it
    continues with the losses of the uninterrupted run."""
    from clover.model.io import load_model
    from clover.train.layout import SHARDED, checkpoint_format

    full = _worker(tmp_path, "full", 2, "--dtype", "bfloat16", "--ac")["losses"]
    run = tmp_path / "run"
    first = _worker(tmp_path, "first", 2, "--dtype", "bfloat16", "--ac", "--ckpt", run, "--until", 3)["losses"]
    step = run / "step-00000003"
    assert (run / "latest").read_text() == step.name and checkpoint_format(None, step) == SHARDED
    files = [f for f in step.rglob("*") if f.is_file()]
    assert {f.suffix for f in files} == {".safetensors", ".json"}, files
    assert len(list((step / "optimizer").glob("shard-00002-*.safetensors"))) == 5  # rank 2's file per layer
    assert not (step / "sharded").exists()  # model shards consolidated, then dropped
    load_model(step)  # clover eval|serve --model run/step-N
    rest = _worker(tmp_path, "rest", 1, "--dtype", "bfloat16", "--ac", "--ckpt", run)["losses"]
    assert len(first) == 3 and len(rest) == 2
    assert _close(full, first + rest, 1e-3), (full, first, rest)


def test_a_plain_run_resumes_a_sharded_checkpoint(tmp_path):
    """A sharded checkpoint resumes in one process without FSDP too (DCP reshards on load)."""
    import shutil

    run = tmp_path / "run"
    full = _worker(tmp_path, "full", 2)["losses"]
    first = _worker(tmp_path, "first", 2, "--ckpt", run, "--until", 3)["losses"]
    shutil.copytree(run, tmp_path / "copy")
    rest = _worker(tmp_path, "rest", 1, "--ckpt", tmp_path / "copy", "--plain")["losses"]
    assert _close(full, first + rest, 1e-4), (full, first, rest)


@pytest.fixture(scope="module")
def big_source(tmp_path_factory) -> tuple[Path, int]:
    """A ~300 MB model directory (random weights): parameters dominate a process's memory."""
    from clover.model.io import save_model

    config = preset("small", hidden_size=512, num_hidden_layers=4, num_experts=24, moe_intermediate_size=512)
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(config)
    out = tmp_path_factory.mktemp("big")
    save_model(model, out)
    return out, sum(p.numel() * p.element_size() for p in model.parameters())


def test_init_from_streams_each_ranks_rows_only(tmp_path, big_source):
    """Streamed into 2 shards, each rank's peak memory grows by about half the model (its rows),
    never by the whole of it; in one process it grows by the whole model (the measure sees the
    weights). Every rank's rows equal the source's."""
    src, nbytes = big_source
    assert nbytes > 250e6
    _run(tmp_path, "two", 2, "--stream-from", src)
    _run(tmp_path, "one", 1, "--stream-from", src)
    two = [json.loads((tmp_path / f"two.json.{r}").read_text()) for r in (0, 1)]
    one = json.loads((tmp_path / "one.json.0").read_text())
    assert all(r["same"] for r in two) and one["same"]
    assert one["after"] - one["before"] > 0.9 * nbytes
    for r in two:
        assert r["after"] - r["before"] < 0.7 * nbytes, (r, nbytes)


def test_the_new_flags_from_the_command_line(tmp_path):
    """``--dtype bfloat16 --activation-checkpointing`` in one process: a sharded checkpoint that
    resumes in fp32; a bad --dtype and the AR recipe are refused with a clear message."""
    r = _train(
        "--out",
        tmp_path / "run",
        "--steps",
        1,
        "--init-from",
        BUNDLED,
        "--export",
        tmp_path / "exp",
        "--dtype",
        "bfloat16",
        "--activation-checkpointing",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "run" / "step-00000001" / "optimizer").is_dir()
    assert (tmp_path / "exp" / "model.safetensors.index.json").exists()
    r = _train("--out", tmp_path / "run", "--steps", 2, "--resume")
    assert r.returncode == 0 and "resumed from step 1" in r.stdout, r.stderr[-2000:]
    r = _train("--out", tmp_path / "bad", "--steps", 1, "--dtype", "float16")
    assert r.returncode != 0 and "--dtype" in r.stderr and "invalid choice" in r.stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for flag in (["--dtype", "bfloat16"], ["--activation-checkpointing"]):
        cmd = [
            sys.executable,
            "-m",
            "clover",
            "train",
            "--recipe",
            "airspace-ar",
            "--out",
            str(tmp_path / "ar"),
            "--steps",
            "1",
            *flag,
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode != 0 and flag[0] in r.stderr and "autoregressive recipe" in r.stderr, r.stderr[-1000:]


def test_a_tied_sharded_run_checkpoints_and_resumes_sharded_or_plain(group, tmp_path):
    """Tied embeddings: stored once in a sharded checkpoint; resumed into a sharded model and
    into a plain one, every weight and moment comes back and the head stays tied."""
    from clover.model.io import CheckpointError, load_model
    from clover.train.fsdp import build_sharded
    from clover.train.trainer import TrainConfig, Trainer
    from tests.train.copy_task import copy_source

    config = preset("tiny", block_size=4, shift_logits=False, tie_word_embeddings=True)
    cfg = TrainConfig(steps=2, lr=3e-3, warmup=1, block_size=4, log_every=1000, eval_every=10**9, ckpt_every=2)
    a = Trainer(build_sharded(config, torch.device("cpu")), copy_source(), cfg, tmp_path)
    a.fit(progress=False)
    step = tmp_path / "step-00000002"
    assert "lm_head.weight" not in json.loads((step / "model.safetensors.index.json").read_text())["weight_map"]
    m = load_model(step)
    assert m.lm_head.weight is m.model.embed_tokens.weight
    b = Trainer(build_sharded(config, torch.device("cpu"), seed=7), copy_source(), cfg, tmp_path)
    c = Trainer(CloverForBlockDiffusion(config), copy_source(), cfg, tmp_path)
    assert b.resume() and c.resume() and b.step == c.step == 2
    for name, p in a.model.named_parameters():
        assert torch.equal(p.full_tensor(), b.model.get_parameter(name).full_tensor()), name
        assert torch.equal(p.full_tensor(), c.model.get_parameter(name)), name
        for k, v in a.opt.state[p].items():
            assert torch.equal(v.full_tensor() if k != "step" else v, c.opt.state[c.model.get_parameter(name)][k])
    assert c.model.lm_head.weight is c.model.model.embed_tokens.weight
    assert b.model.lm_head.weight is b.model.model.embed_tokens.weight
    next((step / "optimizer").glob("*.safetensors")).write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="no intact checkpoint .*step-00000002: optimizer/shard-"):
        Trainer(CloverForBlockDiffusion(config), copy_source(), cfg, tmp_path).resume()


def test_grow_streams_into_shards_as_into_a_plain_model(group, tmp_path):
    """--grow on a sharded model: matched layers read from the source, new layers keep their
    init with zeroed residual writers; the same weights as the plain model's warm start."""
    from clover.model.io import save_model
    from clover.train.fsdp import build_sharded
    from clover.train.warm_start import init_weights

    G, A = "linear_attention", "full_attention"
    torch.manual_seed(0)
    save_model(CloverForBlockDiffusion(preset("tiny", num_hidden_layers=2, layer_types=[G, A])), tmp_path)
    deeper = preset("tiny", num_hidden_layers=3, layer_types=[G, G, A])
    sharded = build_sharded(deeper, torch.device("cpu"))
    plain = CloverForBlockDiffusion(deeper)
    assert init_weights(sharded, tmp_path, grow=True) == init_weights(plain, tmp_path, grow=True) == [0, None, 1]
    for name, p in plain.named_parameters():
        q = sharded.get_parameter(name).full_tensor()
        if name.startswith("model.layers.1."):  # new: its own init (drawn differently), writers zero
            if name.endswith(("out_proj.weight", "down_proj.weight", "experts.down_proj")):
                assert not q.any() and not p.any(), name
        else:
            assert torch.equal(p, q), name


def test_bench_train_memory_measures_a_real_step(tmp_path, monkeypatch):
    """``clover bench train-memory`` at one process on a small model: a real ``clover train`` step
    under torchrun, whose rank reports a peak resident set above its after-import baseline and
    above the bytes of the weights it held, and a checkpoint that the step really wrote."""
    from clover.bench import results, train_memory
    from clover.commands import bench_train
    from clover.model.config import PRESETS

    small = {k: PRESETS["tiny"][k] for k in train_memory.SHAPE}
    experts = {"num_experts": 4, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32}
    monkeypatch.setattr(train_memory, "MODEL", {**train_memory.MODEL, **small, **experts})
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "figures.json"
    args = argparse.Namespace(world_sizes="1", work_dir=str(tmp_path / "work"), malloc_mmap_threshold=0, json=str(out))
    assert bench_train.run(args) == 0
    res = json.loads(out.read_text())["figures"]  # a result file (clover.bench.results)
    (peak,), (base,) = res["peak_rss_bytes"]["1"], res["baseline_rss_bytes"]["1"]
    assert 0 < base < peak and peak > res["param_bytes"]
    assert res["memory_model_bytes"]["1"] > 0
    assert (tmp_path / "work" / "run-1" / "latest").read_text() == "step-00000001"
    # the command it reports is the run it made: `clover train`'s parser gives the same RunSpec
    # (as a result file writes it: local folders scrubbed, clover.bench.results.scrub)
    flags = train_memory.train_flags(train_memory.run_spec(tmp_path / "work", tmp_path / "work" / "source", 1))
    assert res["commands"]["1"].endswith(results.scrub(" ".join(["clover", "train", *flags])))


def test_train_memory_flags_are_the_run_spec_it_launches(tmp_path, monkeypatch):
    """The worker runs ``RunSpec(**run_spec(...))``; the command the benchmark reports is
    ``train_flags`` of the same fields, which ``clover train`` turns back into that RunSpec (the
    command is the run, not a description of it)."""
    import clover.train.run
    from clover.bench.train_memory import SCALE, run_spec, train_flags
    from clover.commands import train as train_cmd

    spec = run_spec(tmp_path, tmp_path / "source", 2)
    p = argparse.ArgumentParser(prog="clover")
    train_cmd.register(p.add_subparsers())
    args = p.parse_args(["train", *train_flags(spec)])
    ran = []
    monkeypatch.setattr(clover.train.run, "train", lambda s: ran.append(s) or 0)
    assert args.func(args) == 0
    assert ran == [clover.train.run.RunSpec(**spec)]
    assert train_flags(SCALE) == ["--dtype", "bfloat16", "--activation-checkpointing"]
    assert train_flags({"progress": True, "resume": False, "steps": None}) == []
