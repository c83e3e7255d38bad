"""Loading streams: tensors go one by one onto the device in the asked dtype, and the CPU never
holds the whole checkpoint a second time."""

import json
import subprocess
import sys

import pytest
import torch

from clover.model import CloverForBlockDiffusion, preset
from clover.model.io import CheckpointError, load_model, save_model
from clover.model.quant import quantize_model
from tests.model.helpers import make_model


def test_bf16_load_gives_bf16_weights_and_fp32_rope(tmp_path):
    m = make_model().float()
    save_model(m, tmp_path / "ck")
    b = load_model(tmp_path / "ck", dtype=torch.bfloat16)
    assert {p.dtype for p in b.parameters()} == {torch.bfloat16}
    assert b.model.rotary_emb.inv_freq.dtype == torch.float32  # bf16 frequencies would shift long positions
    assert not any(t.is_meta for t in [*b.parameters(), *b.buffers()])
    twin = make_model().to(torch.bfloat16)  # the same weights rounded in memory
    twin.model.rotary_emb.inv_freq = m.model.rotary_emb.inv_freq
    x = torch.randint(0, 96, (1, 16))
    assert torch.equal(b.forward_train(x, x).logits, twin.forward_train(x, x).logits)


def test_a_file_reopened_for_every_tensor_loads_the_same_weights(tmp_path, monkeypatch):
    """Tensors read through a handle that was dropped since (the read window) stay valid."""
    import clover.model.io as io

    m = make_model().float()
    save_model(m, tmp_path / "ck", max_shard_bytes=30_000)
    monkeypatch.setattr(io, "READ_WINDOW", 1)
    b = load_model(tmp_path / "ck")
    for (k, x), y in zip(m.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), k
    x = torch.randint(0, 96, (2, 12))
    assert torch.equal(m.forward_train(x, x).logits, b.forward_train(x, x).logits)


def test_tied_embeddings_stay_tied(tmp_path):
    torch.manual_seed(0)
    m = CloverForBlockDiffusion(preset("tiny", tie_word_embeddings=True)).eval()
    save_model(m, tmp_path / "ck")
    b = load_model(tmp_path / "ck", dtype=torch.float64)
    assert b.lm_head.weight is b.model.embed_tokens.weight and b.lm_head.weight.dtype == torch.float64


def test_quantized_keeps_integer_weights_and_refuses_a_gpu(tmp_path):
    m = quantize_model(make_model().float(), 8)
    save_model(m, tmp_path / "q")
    b = load_model(tmp_path / "q", dtype=torch.bfloat16)
    qw = b.get_submodule("model.layers.0.linear_attn.in_proj_qkv")
    assert qw.stored_qweight().dtype == torch.int8 and qw.scales.dtype == torch.bfloat16
    assert b.model.embed_tokens.weight.dtype == torch.bfloat16
    with pytest.raises(CheckpointError, match="runs on the CPU only"):
        load_model(tmp_path / "q", device="cuda")  # refused from the config, before any tensor is read


def test_bad_shard_index_is_a_checkpoint_error(tmp_path):
    save_model(make_model().float(), tmp_path / "ck", max_shard_bytes=20_000)
    (tmp_path / "ck" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": []}))
    with pytest.raises(CheckpointError, match="unreadable shard index"):
        load_model(tmp_path / "ck")


# a fresh process: load a ~260 MiB fp32 checkpoint as bf16 and report the peak resident memory
# above what it held before (the kernel's peak counter reset to the current size); measured:
# the bf16 model + 57 MiB, against the bf16 model + the whole fp32 file without the read window
_SCRIPT = """
import json, sys, torch
def status():
    return {l.split(":")[0]: int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith("Vm")}
from clover.model.io import load_model
load_model(sys.argv[2], dtype=torch.bfloat16)  # first-use costs (lazy kernels, allocator pools) before counting
before = status()["VmRSS"]
open("/proc/self/clear_refs", "w").write("5")
m = load_model(sys.argv[1], dtype=torch.bfloat16)
peak = status()["VmHWM"]
print(json.dumps({"extra": peak - before, "dtypes": sorted({str(p.dtype) for p in m.parameters()}),
                  "bytes": sum(p.numel() * p.element_size() for p in m.parameters())}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_bf16_load_never_holds_the_fp32_checkpoint(tmp_path):
    cfg = preset(
        "small",
        vocab_size=8192,
        hidden_size=512,
        num_experts=8,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
    )
    with torch.device("meta"):
        m = CloverForBlockDiffusion(cfg)
    m.to_empty(device="cpu")
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.02)
    total = sum(p.numel() * 4 for p in m.parameters())
    largest = max(p.numel() * 4 for p in m.parameters())
    save_model(m, tmp_path / "ck")
    del m
    save_model(make_model().float(), tmp_path / "tiny")
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "ck"), str(tmp_path / "tiny")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["dtypes"] == ["torch.bfloat16"] and d["bytes"] == total // 2
    print(f"\nload {total / 2**20:.0f} MiB fp32 as bf16: peak extra RSS {d['extra'] / 2**20:.0f} MiB")
    # The bf16 model itself, one read window of the file (io.READ_WINDOW) and a tensor or two in
    # flight; reading the checkpoint whole first (then converting) needs more than fp32 + bf16.
    from clover.model.io import READ_WINDOW

    assert d["extra"] < total // 2 + READ_WINDOW + 2 * largest + (16 << 20)
    assert d["extra"] < total
