import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from clover.model import CloverForBlockDiffusion, preset
from clover.model.io import CheckpointError
from clover.train.objective import MaskingConfig, block_loss, build_batch, sample_mask
from clover.train.trainer import TrainConfig, Trainer
from tests.train.copy_task import copy_source


def _model(seed=0):
    torch.manual_seed(seed)
    return CloverForBlockDiffusion(preset("tiny", block_size=4, shift_logits=False))


def test_masking_statistics_match_configured_rates():
    cfg = MaskingConfig(t_min=0.2, t_max=0.6, complementary=False)
    target = torch.ones(4000, 8, dtype=torch.bool)
    target[:, :2] = False  # prompt never masked
    mask, t = sample_mask(target, 4, cfg, torch.Generator().manual_seed(0))
    assert not mask[:, :2].any()
    assert 0.2 <= t.min() and t.max() <= 0.6
    assert abs(mask[:, 2:].float().mean().item() - 0.4) < 0.01  # E[t] = 0.4
    assert torch.equal(t[:, 0], t[:, 3]) and not torch.equal(t[:, 0], t[:, 4])  # one rate per block
    comp = build_batch(
        torch.ones(10, 8, dtype=torch.long),
        target[:10],
        target[:10] | True,
        0,
        4,
        MaskingConfig(),
        torch.Generator().manual_seed(1),
    )
    m1, m2 = comp["mask"]
    assert torch.equal(m1 ^ m2, target[:10]) and not (m1 & m2).any()  # complementary covers each target once
    assert torch.equal(comp["x0"], torch.ones(10, 8, dtype=torch.long))  # one clean stream for both views


def test_block_loss_equals_the_full_forward_loss():
    """The fast training call (only blocks with masks, one clean stream for all views) gives the
    same loss as running the full-sequence forward once per view."""
    m = _model().double()
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 60, (3, 13), generator=g)
    valid = torch.ones(3, 13, dtype=torch.bool)
    valid[2, 9:] = False
    target = valid.clone()
    target[:, :5] = False  # prompt
    cfg = MaskingConfig(samples=2, complementary=True)
    batch = build_batch(x0, target, valid, m.config.mask_token_id, 4, cfg, g)
    assert batch["xt"].shape == (4, 3, 13)
    loss, _, _ = block_loss(m, batch, 4, cfg)
    ref = 0.0
    for v in range(4):
        logits = m.forward_train(x0, batch["xt"][v], 4, valid).logits
        mk = batch["mask"][v]
        ce = torch.nn.functional.cross_entropy(logits[mk], x0[mk], reduction="none")
        ref = ref + (ce * batch["weight"][v][mk]).sum()
    ref = ref / (target.sum() * 4)
    assert abs(loss.item() - ref.item()) < 1e-10


def test_the_confidence_term_is_the_entropy_of_right_guesses_and_sharpens_them():
    from clover.train.objective import confidence_term

    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [1.0, 1.0, 1.0]], requires_grad=True)
    y = torch.tensor([0, 2, 1])  # right, wrong, a tie (argmax 0: wrong)
    p = logits[0].softmax(-1)
    assert torch.allclose(confidence_term(logits, y), -(p * p.log()).sum())
    confidence_term(logits, y).backward()
    assert logits.grad[1:].abs().max() == 0  # wrong guesses get no push
    assert logits.grad[0, 0] < 0  # descending the term raises the right guess's logit
    m = _model().double()
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 60, (2, 12), generator=g)
    valid = torch.ones(2, 12, dtype=torch.bool)
    target = valid.clone()
    target[:, :4] = False
    plain, sure = MaskingConfig(samples=1), MaskingConfig(samples=1, confidence=0.5)
    batch = build_batch(x0, target, valid, m.config.mask_token_id, 4, plain, g)
    base, ce, out = block_loss(m, batch, 4, plain)
    with_term, _, _ = block_loss(m, batch, 4, sure)
    nb_logits = out.logits.double()
    from clover.train.objective import loss_normalizer, noisy_blocks

    nb = noisy_blocks(batch, 4)
    extra = 0.5 * confidence_term(nb_logits, nb["y"][nb["mask"]]) / loss_normalizer(batch, plain)
    assert abs(with_term.item() - base.item() - extra.item()) < 1e-10
    assert block_loss(m, batch, 4, sure, train=False)[0].item() == base.item()  # validation leaves it out
    with pytest.raises(ValueError, match="confidence"):
        MaskingConfig(confidence=-1)


def test_a_batch_with_nothing_to_predict_has_zero_loss():
    """Every answer past max_len (a long conversation cut): no masked position; the training call
    still runs (router statistics, one block) and the loss is 0 with a gradient path."""
    m = _model()
    x0 = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(0))
    valid, target = torch.ones(2, 12, dtype=torch.bool), torch.zeros(2, 12, dtype=torch.bool)
    cfg = MaskingConfig(samples=1)
    batch = build_batch(x0, target, valid, m.config.mask_token_id, 4, cfg, torch.Generator().manual_seed(1))
    loss, ce, out = block_loss(m, batch, 4, cfg)
    assert loss.item() == 0 and ce.numel() == 0 and out.router_stats is not None
    loss.backward()


def test_loss_decreases_on_a_micro_run():
    cfg = TrainConfig(steps=60, lr=3e-3, warmup=5, block_size=4, log_every=1000, eval_every=10**9)
    tr = Trainer(_model(), copy_source(vocab=12), cfg, None)  # a small value range: learnable in 60 steps
    hist = tr.fit(progress=False)
    first = sum(h["loss"] for h in hist[:10]) / 10
    last = sum(h["loss"] for h in hist[-10:]) / 10
    assert last < 0.8 * first, (first, last)


@pytest.mark.parametrize("ablation", [{}, {"gdn_block_mixing": "causal"}], ids=["clover", "causal-gdn"])
def test_resume_is_bit_exact(tmp_path, ablation):
    """Also with an ablation switch that leaves parameters without gradients (causal GDN mixing:
    the right-context conv and the memory slot), whose optimizer state is then empty."""

    def model(seed=0):
        torch.manual_seed(seed)
        return CloverForBlockDiffusion(preset("tiny", block_size=4, shift_logits=False, **ablation))

    cfg = TrainConfig(steps=12, lr=3e-3, warmup=2, block_size=4, ckpt_every=6, log_every=1000, eval_every=10**9)
    full = Trainer(model(), copy_source(), cfg, tmp_path / "a").fit(progress=False)
    Trainer(model(), copy_source(), cfg, tmp_path / "b").fit(progress=False, until=6)  # killed at step 6
    tr = Trainer(model(seed=123), copy_source(), cfg, tmp_path / "b")  # different init: resume must overwrite it
    assert tr.resume() and tr.step == 6
    rest = tr.fit(progress=False)
    assert [h["loss"] for h in full[6:]] == [h["loss"] for h in rest]


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# how a crash, or a disk that lost what was not flushed, leaves the newest checkpoint
DAMAGE = {
    "weights cut mid-save": lambda ck: _cut(ck / "model.safetensors"),
    "optimizer cut mid-save": lambda ck: _cut(ck / "optimizer.safetensors"),
    "state.json never written": lambda ck: (ck / "state.json").unlink(),
    "weights header garbled": lambda ck: (ck / "model.safetensors").write_bytes(b"\xff" * 64),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_falls_back_past_a_damaged_checkpoint(tmp_path, capsys, damage):
    """A run stopped at step 8 whose newest checkpoint (step 8) was then damaged resumes from the
    one before it (step 4), says so in one line, and ends with the weights of a run never
    stopped, bit for bit; a half-written step directory of a later save is ignored."""

    def model(seed=0):
        torch.manual_seed(seed)
        return CloverForBlockDiffusion(preset("tiny", block_size=4, shift_logits=False))

    cfg = TrainConfig(steps=12, lr=3e-3, warmup=2, block_size=4, ckpt_every=4, log_every=1000, eval_every=10**9)
    full = Trainer(model(), copy_source(), cfg, tmp_path / "a")
    full.fit(progress=False)
    Trainer(model(), copy_source(), cfg, tmp_path / "b").fit(progress=False, until=8)
    run = tmp_path / "b"
    assert (run / "latest").read_text() == "step-00000008"
    DAMAGE[damage](run / "step-00000008")
    (run / ".step-00000012.tmp").mkdir()  # a later save killed before its rename
    capsys.readouterr()
    tr = Trainer(model(seed=123), copy_source(), cfg, run)
    assert tr.resume() and tr.step == 4
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "step-00000008" in said[0] and said[0].endswith("resuming from step-00000004")
    tr.fit(progress=False)
    got, want = tr.model.state_dict(), full.model.state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_resume_with_every_checkpoint_damaged_is_an_error(tmp_path):
    cfg = TrainConfig(steps=4, lr=3e-3, warmup=2, block_size=4, ckpt_every=2, log_every=1000, eval_every=10**9)
    Trainer(_model(), copy_source(), cfg, tmp_path).fit(progress=False)
    for ck in tmp_path.glob("step-*"):
        _cut(ck / "model.safetensors")
    with pytest.raises(CheckpointError, match="no intact checkpoint"):
        Trainer(_model(), copy_source(), cfg, tmp_path).resume()


def test_prefetch_workers_give_the_same_losses():
    """Batches built ahead by worker processes are the source's own: the same losses, bit for bit."""
    cfg = TrainConfig(steps=6, lr=3e-3, warmup=2, block_size=4, log_every=1000, eval_every=10**9)
    plain = Trainer(_model(), copy_source(), cfg, None).fit(progress=False)
    ahead = Trainer(_model(), copy_source(), cfg, None).fit(progress=False, workers=2)
    assert [h["loss"] for h in plain] == [h["loss"] for h in ahead]


def test_time_budget_fits_the_schedule_and_ends_with_a_checkpoint(tmp_path, monkeypatch):
    """--time-budget: after the timed steps the schedule's length becomes what fits in the time
    left (at most the steps asked for); past the budget the run ends at once, with its checkpoint."""
    import clover.train.trainer as trainer_mod

    clock = iter(range(0, 10**6, 10))  # every reading of the clock: 10 s later
    monkeypatch.setattr(trainer_mod.time, "perf_counter", lambda: next(clock))
    cfg = TrainConfig(steps=10**6, lr=3e-3, warmup=2, block_size=4, log_every=1000, eval_every=10**9)
    hist = Trainer(_model(), copy_source(), cfg, tmp_path).fit(progress=False, time_budget=600)
    assert cfg.steps == len(hist) < 60  # 10 s per step: far fewer than asked
    assert (tmp_path / "latest").read_text().endswith(f"{cfg.steps:08d}")
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["steps"] for r in log if "time_budget" in r][-1] == cfg.steps
    assert cfg.lr_at(cfg.steps - 1) < 0.2 * cfg.lr  # the cosine decayed within the budget


def test_corrupt_or_mismatched_checkpoint_is_refused(tmp_path):
    cfg = TrainConfig(steps=2, warmup=1, block_size=4, ckpt_every=2, log_every=1000, eval_every=10**9)
    Trainer(_model(), copy_source(), cfg, tmp_path).fit(progress=False)
    other = CloverForBlockDiffusion(preset("tiny", block_size=4, hidden_size=48))
    with pytest.raises(CheckpointError, match="does not fit|differs"):
        Trainer(other, copy_source(), cfg, tmp_path).resume()
    ck = tmp_path / (tmp_path / "latest").read_text()
    (ck / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="no intact checkpoint .*step-00000002: model.safetensors"):
        Trainer(_model(), copy_source(), cfg, tmp_path).resume()


@pytest.mark.timeout(300)
def _worker(tmp_path, name, procs, *args):
    """Run tests/train/fsdp_worker.py in 1 process or under torchrun; returns its losses."""
    script = Path(__file__).with_name("fsdp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    cmd = [sys.executable, str(script)]
    if procs > 1:
        # --standalone: torchrun picks a free port itself (a port found here and released could
        # be taken by another process before torchrun binds it)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"]
        cmd += [str(script)]
    out = tmp_path / f"{name}.json"
    r = subprocess.run(cmd + [str(out), *map(str, args)], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def _close(a, b):
    return all(abs(x - y) < 1e-4 * max(1.0, abs(x)) for x, y in zip(a, b))


def test_two_process_fsdp_matches_one_process(tmp_path):
    a = _worker(tmp_path, "one", 1)
    b = _worker(tmp_path, "two", 2)
    assert len(a) == len(b) == 5 and _close(a, b), (a, b)


def test_fsdp_checkpoints_resume_on_any_number_of_processes(tmp_path):
    """A 2-process FSDP2 run killed at step 3 leaves a full checkpoint: it resumes under FSDP2,
    and in one process, with the losses of the uninterrupted run."""
    full = _worker(tmp_path, "full", 1)
    run = tmp_path / "run"
    first = _worker(tmp_path, "first", 2, run, 3)
    assert (run / "latest").read_text() == "step-00000003"
    from clover.model.io import load_model

    load_model(run / "step-00000003")  # the step directory is a model directory, weights consolidated
    shutil.copytree(run, tmp_path / "copy")
    rest_two = _worker(tmp_path, "rest2", 2, run)
    rest_one = _worker(tmp_path, "rest1", 1, tmp_path / "copy")
    assert len(first) == 3 and len(rest_two) == len(rest_one) == 2
    assert _close(full, first + rest_two) and _close(full, first + rest_one), (full, first, rest_two, rest_one)


def test_length_groups_give_the_same_step():
    """Splitting the batch into length-sorted groups changes the padding, not the update."""
    from clover.train.trainer import length_groups

    cfg = TrainConfig(steps=3, lr=3e-3, warmup=1, block_size=4, log_every=1000, eval_every=10**9)
    src = copy_source()

    def ragged(step):  # rows of different lengths, padding at the end
        b = src(step)
        for i in range(b["x0"].shape[0]):
            b["valid"][i, b["x0"].shape[1] - i :] = False
            b["target"][i] &= b["valid"][i]
        return b

    parts = length_groups(
        build_batch(
            **{k: v for k, v in ragged(0).items()},
            mask_id=1,
            block_size=4,
            cfg=MaskingConfig(),
            generator=torch.Generator().manual_seed(0),
        ),
        3,
    )
    assert len(parts) == 3 and all(bool(p["valid"][:, -1].any()) for p in parts)  # each cut to its longest
    one = Trainer(_model(), ragged, cfg, None).fit(progress=False)
    cfg.micro_batches = 3
    three = Trainer(_model(), ragged, cfg, None).fit(progress=False)
    for a, b in zip(one, three):
        assert abs(a["loss"] - b["loss"]) < 1e-5 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-4


def test_each_training_sequence_has_one_answer_filled_with_eos_to_its_block_end():
    import random

    from clover.airspace.tools import AIRSPACE_TOOLS
    from clover.data.tokenizer import CloverTokenizer
    from clover.train.recipes import encode_example

    tok = CloverTokenizer.load(Path(__file__).parents[2] / "clover" / "assets" / "default")
    call = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "recall_drone", "arguments": {"drone_id": "D-7"}}}],
    }
    ex = {
        "tools": AIRSPACE_TOOLS,
        "messages": [
            {"role": "user", "content": "recall drone 7"},
            call,
            {"role": "tool", "content": "returning"},
            {"role": "assistant", "content": "D-7 is returning."},
        ],
    }
    seen = set()
    for seed in range(8):
        ids, tgt = encode_example(tok, ex, 512, 32, random.Random(seed))
        assert len(ids) % 32 == 0 and tgt[-1]
        first = tgt.index(True)
        assert all(tgt[first:])  # one contiguous answer, at the end
        answer = tok.decode(ids[first:])
        assert answer.count("<|im_end|>") == 1 and answer.endswith("<|endoftext|>")
        seen.add("returning" in tok.decode(ids))  # the tool result is history only for the second answer
    assert seen == {True, False}
