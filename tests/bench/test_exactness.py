from pathlib import Path

import torch

from clover.bench.exactness import perturbed_tiny, rel_err
from clover.convert.qwen import NEW_PARAMS
from clover.model import CloverForBlockDiffusion, preset


def test_perturbed_tiny_moves_every_clover_parameter_and_norm():
    """A runtime that drops or misreads one of Clover's own parameters, or a norm, must show in
    the logits: none of them keeps its starting value."""
    torch.manual_seed(4)
    fresh = dict(CloverForBlockDiffusion(preset("tiny", num_experts=0, intermediate_size=48)).named_parameters())
    moved = dict(perturbed_tiny(4, num_experts=0, intermediate_size=48).named_parameters())
    checked = [n for n in moved if n.rsplit(".", 1)[-1] in NEW_PARAMS or n.endswith("norm.weight")]
    assert {n.rsplit(".", 1)[-1] for n in checked} >= set(NEW_PARAMS)
    assert any("linear_attn.norm" in n for n in checked)
    for n in checked:
        assert not torch.allclose(moved[n], fresh[n]), n
    others = [n for n in moved if n not in checked]
    assert others and all(torch.equal(moved[n], fresh[n]) for n in others)


def test_rel_err_is_relative_to_the_reference_and_masked():
    ref = torch.tensor([[2.0, -4.0], [1.0, 0.5]])
    got = ref + torch.tensor([[0.0, 0.4], [8.0, 0.0]])
    assert rel_err(got, ref) == 2.0  # 8 / 4
    assert abs(rel_err(got, ref, torch.tensor([1, 0])) - 0.1) < 1e-7  # the first row alone: 0.4 / 4


def test_every_check_on_a_random_model_perturbs_it_one_way():
    """The comparisons of runtimes and code paths on random models (tests, benchmarks, the GPU
    check) perturb them with ``perturb``: no file keeps its own copy of the perturbation, which
    would leave γ, ρ or the in-block scale at their starting values unnoticed."""
    root = Path(__file__).parents[2]
    own = {"clover/bench/exactness.py", "clover/model/model.py", "clover/train/fsdp.py"}  # the perturbation, the inits
    needle = '"conv_right", "mem_key", "mem_bias"'
    own.add(Path(__file__).relative_to(root).as_posix())  # the needle itself
    copies = [
        p.relative_to(root).as_posix()
        for folder in ("clover", "tests", "benchmarks", "integrations")
        for p in (root / folder).rglob("*.py")
        if needle in p.read_text(encoding="utf-8")
    ]
    assert sorted(set(copies) - own) == []
