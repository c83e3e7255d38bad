"""The GDN ablation switches of CloverConfig (``gdn_block_mixing``, ``gdn_right_conv``,
``gdn_block_calibration``): validated, off by default, and each does what it says.
The exactness invariant over the variants is in test_invariant.py."""

import json

import pytest
import torch

from clover.model import GDN, CloverConfig, ConfigError
from clover.model.gdn import GatedDeltaNetMixer
from clover.model.io import load_model, save_model
from clover.ops.delta_rule import delta_rule_recurrent
from tests.model.helpers import incremental_logits, make_model, noisy

FIELDS = ("gdn_block_mixing", "gdn_right_conv", "gdn_block_calibration")
DEFAULTS = dict(gdn_block_mixing="bidirectional", gdn_right_conv=True, gdn_block_calibration=True)
CLOVER_PARAMS = ("conv_right", "attn_scale", "mem_key", "mem_bias", "mem_gamma", "mem_scale")


def _outputs(m, bs=4):
    """Training-forward logits ``[2, 14, V]`` and the engine's denoise logits per block."""
    g = torch.Generator().manual_seed(1)
    x0 = torch.randint(0, 96, (2, 14), generator=g)
    xt = noisy(x0, m.config.mask_token_id, 3)
    return m.forward_train(x0, xt, bs).logits, incremental_logits(m, x0, xt, 3, bs)


def _same(a, b) -> bool:
    return torch.equal(a[0], b[0]) and a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def test_config_refuses_bad_values_by_name():
    with pytest.raises(
        ConfigError, match=r"gdn_block_mixing must be one of \['bidirectional', 'causal'\], got 'bidir'"
    ):
        CloverConfig(gdn_block_mixing="bidir")
    with pytest.raises(ConfigError, match="gdn_right_conv must be true or false, got 'false'"):
        CloverConfig(gdn_right_conv="false")
    with pytest.raises(ConfigError, match="gdn_block_calibration must be true or false, got 0"):
        CloverConfig.from_dict({"gdn_block_calibration": 0})
    assert CloverConfig(gdn_block_mixing="causal").gdn_block_mixing == "causal"


def test_defaults_are_the_clover_design():
    assert {k: getattr(CloverConfig(), k) for k in FIELDS} == DEFAULTS
    assert _same(_outputs(make_model()), _outputs(make_model(**DEFAULTS)))


def test_a_config_without_the_fields_loads_with_the_defaults(tmp_path):
    m = make_model().float()
    save_model(m, tmp_path / "ck")
    new = load_model(tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    old = {k: v for k, v in cfg.items() if k not in FIELDS}  # as written before the switches existed
    (tmp_path / "ck" / "config.json").write_text(json.dumps(old))
    assert CloverConfig.from_dict(old) == m.config
    loaded = load_model(tmp_path / "ck")
    assert {k: getattr(loaded.config, k) for k in FIELDS} == DEFAULTS
    assert _same(_outputs(new), _outputs(loaded))


@pytest.mark.parametrize(
    ("over", "unused"),
    [
        (dict(gdn_block_mixing="causal"), CLOVER_PARAMS),
        (dict(gdn_right_conv=False), ("conv_right",)),
        (dict(gdn_block_calibration=False), ("mem_gamma",)),
    ],
)
def test_parameters_a_variant_does_not_use_never_reach_its_outputs(over, unused):
    def perturbed(**cfg):
        m = make_model(**cfg)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.rsplit(".", 1)[-1] in unused:
                    p.add_(torch.randn_like(p))
        return m

    assert _same(_outputs(make_model(**over)), _outputs(perturbed(**over)))
    a, b = _outputs(make_model())[0], _outputs(perturbed())[0]
    assert (a - b).abs().max() > 1e-4  # the default model does use them


def test_causal_block_is_qwen_gdn_from_the_state_before_it():
    """Causal mixing: the clean stream is Qwen3.5's GDN over the sequence, and a noisy block is
    Qwen3.5's GDN over (its row's clean prefix, the noisy block)."""
    torch.manual_seed(0)
    mix = GatedDeltaNetMixer(make_model(gdn_block_mixing="causal").config).double()
    with torch.no_grad():
        for name in CLOVER_PARAMS:
            getattr(mix, name).normal_()
    H = mix.in_proj_z.in_features
    xc, xn = torch.randn(2, 12, H, dtype=torch.float64), torch.randn(1, 4, H, dtype=torch.float64)
    valid = torch.ones(2, 12, dtype=torch.bool)
    yc, yn = mix.forward_train(xc, valid, 4, (xn, valid[:1, :4], torch.tensor([1]), torch.tensor([1])))

    def qwen(x):  # HF-style causal conv + silu, token-by-token delta rule, gated norm, out_proj
        u = mix.in_proj_qkv(x).transpose(1, 2)
        feat = torch.nn.functional.silu(mix.conv1d(u)[..., : x.shape[1]]).transpose(1, 2)
        q, k, v = mix._heads(feat)
        g, beta = mix._gates(x)
        return mix._out(delta_rule_recurrent(q, k, v, g, beta)[0], x)

    assert torch.allclose(yc, qwen(xc), atol=1e-12)
    assert torch.allclose(yn, qwen(torch.cat([xc[1:, :4], xn], 1))[:, 4:], atol=1e-12)


def test_causal_mixing_makes_an_all_gdn_model_causal_inside_the_block():
    for mixing, causal in (("bidirectional", False), ("causal", True)):
        m = make_model(shift=False, block_size=4, layer_types=[GDN] * 4, gdn_block_mixing=mixing)
        x = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(2))
        xt = noisy(x, m.config.mask_token_id, 0, seed=3)
        a = m.forward_train(x, xt, 4).logits
        x2, xt2 = x.clone(), xt.clone()
        x2[:, 10], xt2[:, 10] = 7, 7  # a token of block 2
        b = m.forward_train(x2, xt2, 4).logits
        assert torch.allclose(a[:, :8], b[:, :8], atol=1e-12)  # earlier blocks never move
        moved = (a[:, 8:10] - b[:, 8:10]).abs().max()  # earlier positions of the same block
        assert moved < 1e-12 if causal else moved > 1e-6


def test_train_config_model_section_sets_the_switches():
    from clover.airspace.recipes import AirspaceRecipe
    from clover.train.setup import apply_overrides

    recipe = AirspaceRecipe()
    assert {k: recipe.model[k] for k in FIELDS} == DEFAULTS
    over = dict(gdn_block_mixing="causal", gdn_right_conv=False, gdn_block_calibration=False)
    apply_overrides(recipe, {"model": over}, "cfg.json")
    assert {k: getattr(CloverConfig(**recipe.model), k) for k in FIELDS} == over
    with pytest.raises(ConfigError, match="gdn_block_mixing must be one of"):
        CloverConfig(**{**recipe.model, "gdn_block_mixing": "sideways"})
