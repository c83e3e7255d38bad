"""A quantized model: save/load round trip, the exactness invariant (training forward == cached
decoding) and the engine, each against the model's own dequantized full-precision twin."""

import pytest
import torch

from clover.engine import Engine, SamplingParams
from clover.model import quant as Q
from clover.model.io import load_model, save_model
from tests.engine.helpers import peaky_model, prompts
from tests.engine.reference import reference_decode
from tests.model.helpers import incremental_logits, make_model, noisy
from tests.quant.helpers import kernel_model, rel


@pytest.mark.parametrize("bits,group", [(8, 0), (8, 32), (4, 32)])
def test_round_trip_quantize_save_load_same_outputs(tmp_path, bits, group):
    m = Q.quantize_model(kernel_model(), bits, group)
    save_model(m, tmp_path / "q")
    m2 = load_model(tmp_path / "q")
    assert m2.config.quantization == m.config.quantization
    assert m2.config.quantization["scheme"] == {8: "symmetric", 4: "asymmetric"}[bits]
    x = torch.randint(0, 96, (2, 20))
    assert torch.equal(m.forward_train(x, x).logits, m2.forward_train(x, x).logits)
    c1, c2 = m.new_cache(2), m2.new_cache(2)
    assert torch.equal(
        m.step(c1, commit=x[:, :8], denoise=x[:, 8:16]), m2.step(c2, commit=x[:, :8], denoise=x[:, 8:16])
    )
    for (k, a), (k2, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert k == k2 and a.dtype == b.dtype and torch.equal(a, b), k
    # sharded too
    save_model(m, tmp_path / "s", max_shard_bytes=20_000)
    assert len(list((tmp_path / "s").glob("model-*.safetensors"))) > 1
    assert torch.equal(load_model(tmp_path / "s").forward_train(x, x).logits, m2.forward_train(x, x).logits)


def _invariant_err(model, L=37, P=5, B=2):
    bs = model.config.block_size
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 96, (B, L), generator=g)
    xt = noisy(x0, model.config.mask_token_id, P)
    ref = model.forward_train(x0, xt, bs).logits
    errs = []
    for b, lg in incremental_logits(model, x0, xt, P, bs).items():
        s = b * bs
        lo = 1 if (model.config.shift_logits and s == 0) else 0
        errs.append(((lg[:, lo:] - ref[:, s : s + lg.shape[1]][:, lo:]).abs().max() / ref.abs().max()).item())
    return max(errs)


@pytest.mark.parametrize("bits,group", [(8, 0), (4, 32)])
@pytest.mark.parametrize("bs", [1, 4, 8])
def test_fp64_quantized_model_keeps_the_exactness_invariant(bits, group, bs):
    """In fp64 every quantized layer runs its reference: the invariant holds to rounding, as for
    a full-precision model (tests/model/test_invariant.py)."""
    m = Q.quantize_model(make_model(block_size=bs).float(), bits, group).double()
    assert _invariant_err(m) < 1e-10


@pytest.mark.parametrize("bits,group", [(8, 0), (8, 32), (4, 32)])
def test_kernel_path_training_forward_matches_cached_decoding(bits, group):
    """With the kernels (bf16 activations) the two ways to run agree to bf16 rounding."""
    m = Q.quantize_model(kernel_model(), bits, group)
    assert _invariant_err(m) < 2e-2


@pytest.mark.parametrize("bits,group", [(8, 0), (4, 32)])
def test_quantized_model_equals_its_dequantized_twin(bits, group):
    m = Q.quantize_model(kernel_model(), bits, group)
    twin = Q.dequantize_model(m)
    assert twin.config.quantization is None
    x = torch.randint(0, 96, (2, 32))
    a, b = m.forward_train(x, x).logits, twin.forward_train(x, x).logits
    assert rel(a, b) < 2e-2  # the kernels' bf16 activations
    with Q.reference_only():  # the reference path is the twin's arithmetic
        assert rel(m.forward_train(x, x).logits, b) < 1e-5
    # and the twin is the full-precision model up to the quantization error
    assert rel(b, kernel_model().forward_train(x, x).logits) < (0.05 if bits == 8 else 0.3)


@pytest.mark.parametrize("policy", ["threshold", "ar", "edit"])
def test_engine_on_a_quantized_model_equals_its_reference_decoder_and_its_twin(policy):
    model = peaky_model().float()
    Q.quantize_model(model, 4, 32)
    model = model.double()  # fp64: no decision sits on a rounding tie
    twin = Q.dequantize_model(model, torch.float64)
    ps = prompts([3, 8, 13])
    params = SamplingParams(max_tokens=21, policy=policy, threshold=0.8)
    outs = Engine(model).generate_batch(ps, params)
    twin_outs = Engine(twin, max_batch_size=3).generate_batch(ps, params)
    assert sum(len(o.token_ids) for o in outs) > 10
    for p, out, t in zip(ps, outs, twin_outs):
        ref, reason = reference_decode(model, p, params)
        assert out.token_ids == ref == t.token_ids and out.finish_reason == reason


def test_kernel_path_decoding_is_batch_invariant():
    m = Q.quantize_model(kernel_model(eos_token_id=5), 4, 32)
    with torch.no_grad():
        m.lm_head.weight.mul_(40)
    ps = prompts([3, 8, 13, 5], seed=2)
    params = SamplingParams(max_tokens=16, threshold=0.8)
    alone = [Engine(m).generate(p, params).token_ids for p in ps]
    together = [o.token_ids for o in Engine(m, max_batch_size=4).generate_batch(ps, params)]
    assert alone == together
