"""Training at scale: the model built sharded from the meta device, bf16 mixed precision,
activation checkpointing, ``--init-from`` streamed into the shards and sharded (DCP)
checkpoints, in one process and under ``torchrun`` (gloo on CPU)."""

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
    from clover.train.sharded_checkpoint import is_sharded_checkpoint

    full = _worker(tmp_path, "full", 2, "--dtype", "bfloat16", "--ac")["losses"]
    run = tmp_path / "run"
    first = _worker(tmp_path, "first", 2, "--dtype", "bfloat16", "--ac", "--ckpt", run, "--until", 3)["losses"]
    step = run / "step-00000003"
    assert (run / "latest").read_text() == step.name and is_sharded_checkpoint(step)
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
    r = _train("--out", tmp_path / "run", "--steps", 1, "--init-from", BUNDLED, "--export", tmp_path / "exp",
               "--dtype", "bfloat16", "--activation-checkpointing")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "run" / "step-00000001" / "optimizer").is_dir()
    assert (tmp_path / "exp" / "model.safetensors.index.json").exists()
    r = _train("--out", tmp_path / "run", "--steps", 2, "--resume")
    assert r.returncode == 0 and "resumed from step 1" in r.stdout, r.stderr[-2000:]
    r = _train("--out", tmp_path / "bad", "--steps", 1, "--dtype", "float16")
    assert r.returncode != 0 and "--dtype" in r.stderr and "invalid choice" in r.stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for flag in (["--dtype", "bfloat16"], ["--activation-checkpointing"]):
        cmd = [sys.executable, "-m", "clover", "train", "--recipe", "airspace-ar", "--out", str(tmp_path / "ar"),
               "--steps", "1", *flag]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode != 0 and flag[0] in r.stderr and "autoregressive recipe" in r.stderr, r.stderr[-1000:]
