"""``clover train --init-from DIR --grow``: a deeper model that starts as exactly the source's function."""

import json
from pathlib import Path

import pytest
import torch

from clover.model import CloverConfig, CloverForBlockDiffusion
from clover.model.io import load_model
from clover.train.objective import MaskingConfig, block_loss, build_batch
from clover.train.warm_start import init_weights, layer_map
from tests.train.test_cli import BUNDLED, _train

G, A = "linear_attention", "full_attention"
DEEPER = [G, A, G, G, A, A]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """A 4-layer model (GGGA) of the bundled model's width and tokenizer, random weights."""
    import shutil

    from clover.model.io import save_model

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("src")
    cfg = load_model(BUNDLED).config.to_dict()
    cfg.update(num_hidden_layers=4, layer_types=[G, G, G, A])
    save_model(CloverForBlockDiffusion(CloverConfig(**cfg)), out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BUNDLED / f, out / f)
    return out


def test_layer_map_matches_the_source_layers_in_order_by_type():
    assert layer_map([G, G, G, A], DEEPER) == [0, None, 1, 2, 3, None]
    assert layer_map([G, A], [G, A]) == [0, 1]
    with pytest.raises(ValueError, match="subsequence"):
        layer_map([G, G, G, A], [A, G, G, G])


def _deeper(types):
    cfg = load_model(BUNDLED).config.to_dict()
    cfg.update(num_hidden_layers=len(types), layer_types=types)
    return CloverForBlockDiffusion(CloverConfig(**cfg))


def test_a_grown_model_computes_the_source_function_and_then_trains_its_new_layers(src):
    src_dir, src = src, load_model(src)
    grown = _deeper(DEEPER)
    assert init_weights(grown, src_dir, grow=True) == [0, None, 1, 2, 3, None]
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(10, src.config.vocab_size, (2, 80), generator=g)
    target = torch.zeros_like(x0, dtype=torch.bool)
    target[:, 40:] = True
    valid = torch.ones_like(target)
    cfg = MaskingConfig(samples=1)
    batch = build_batch(x0, target, valid, src.config.mask_token_id, 32, cfg, g)
    with torch.no_grad():
        a, _, out_a = block_loss(src, batch, 32, cfg)
        b, _, out_b = block_loss(grown, batch, 32, cfg)
    torch.testing.assert_close(out_b.logits, out_a.logits, rtol=1e-5, atol=1e-5)
    loss, _, _ = block_loss(grown, batch, 32, cfg)
    loss.backward()
    new = grown.model.layers[1]
    assert new.self_attn.o_proj.weight.grad.abs().sum() > 0  # the zeroed writers do learn
    assert new.self_attn.o_proj.weight.abs().sum() == 0


def test_grow_refuses_a_layout_that_drops_or_reorders_source_layers(src):
    with pytest.raises(SystemExit, match="--grow"):
        init_weights(_deeper([A, G, G, G]), src, grow=True)
    with pytest.raises(SystemExit, match="differs from the recipe's"):
        init_weights(_deeper(DEEPER), src)  # without --grow a deeper model is refused as before


def test_train_grow_from_the_command_line_exports_the_deeper_model(tmp_path, src):
    over = tmp_path / "deeper.json"
    over.write_text(json.dumps({"model": {"num_hidden_layers": 6, "layer_types": DEEPER}}))
    r = _train(
        "--out",
        tmp_path / "run",
        "--config",
        over,
        "--init-from",
        src,
        "--grow",
        "--steps",
        1,
        "--export",
        tmp_path / "exp",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads((Path(tmp_path) / "exp" / "training.json").read_text())
    assert record["grown_layers"] == [0, None, 1, 2, 3, None]
    assert load_model(tmp_path / "exp").config.layer_types == DEEPER
