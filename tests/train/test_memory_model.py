"""The per-rank memory model (clover/train/memory_model.py): exact parameter counts, measured
activations that behave as the model says, and the sums it reports."""

import torch

from clover.model import CloverForBlockDiffusion, preset
from clover.model.config import ATTN, GDN
from clover.train.memory_model import activation_terms, estimate, measure_layer_activations, parameter_counts


def test_parameter_counts_match_the_built_model():
    config = preset("tiny")
    counts = parameter_counts(config)
    model = CloverForBlockDiffusion(config)
    assert counts["total"] == model.num_parameters()["total_params"]
    assert counts["layers"] == [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    assert counts["root"] == counts["total"] - sum(counts["layers"])


def test_activations_are_linear_in_tokens_for_gdn_and_fit_attention():
    config = preset("tiny", block_size=8)
    terms = activation_terms(config, torch.float32, tokens=(32, 64))
    for kind in (GDN, ATTN):
        lin, quad = terms[kind]
        measured = measure_layer_activations(config, kind, 128, torch.float32)
        predicted = lin * 128 + quad * 128 * 128
        assert abs(predicted - measured) / measured < 0.1, (kind, predicted, measured)
    assert terms[GDN][1] == 0.0
    # bf16 activations take about half the bytes of fp32 (the mixer's fp32 internals stay fp32)
    half = measure_layer_activations(config, GDN, 64, torch.bfloat16)
    assert half < measure_layer_activations(config, GDN, 64, torch.float32)


def test_estimate_shards_state_and_checkpointing_cuts_activations():
    config = preset("small")
    terms = activation_terms(config, torch.bfloat16)
    one = estimate(config, 1, 256, False, terms=terms)
    two = estimate(config, 2, 256, False, terms=terms)
    P = parameter_counts(config)["total"]
    assert one.params == 4 * P and one.optimizer == 8 * P
    assert two.params == 4 * -(-P // 2)
    assert one.activations == two.activations  # per rank: same tokens per rank
    ck = estimate(config, 2, 256, True, terms=terms)
    assert ck.activations < two.activations / 2
    assert ck.peak == sum(v for k, v in ck.to_dict().items() if k not in ("world", "peak"))
