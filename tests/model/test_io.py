import json
import subprocess
import sys

import pytest
import torch

from clover.model.io import CheckpointError, load_model, save_model
from tests.model.helpers import make_model


def test_save_load_round_trip_identical_logits(tmp_path):
    m = make_model().float()
    x = torch.randint(0, 96, (2, 20))
    save_model(m, tmp_path / "ck")
    m2 = load_model(tmp_path / "ck")
    assert torch.equal(m.forward_train(x, x).logits, m2.forward_train(x, x).logits)


def test_sharded_round_trip(tmp_path):
    m = make_model().float()
    save_model(m, tmp_path / "ck", max_shard_bytes=20_000)
    assert (tmp_path / "ck" / "model.safetensors.index.json").exists()
    assert len(list((tmp_path / "ck").glob("model-*.safetensors"))) > 1
    m2 = load_model(tmp_path / "ck")
    for (k, a), b in zip(m.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k


def test_truncated_file_gives_clear_error(tmp_path):
    save_model(make_model().float(), tmp_path / "ck")
    f = tmp_path / "ck" / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_model(tmp_path / "ck")


def test_config_that_does_not_fit_is_refused(tmp_path):
    save_model(make_model().float(), tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    cfg["hidden_size"] = 48
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="shape or dtype mismatches"):
        load_model(tmp_path / "ck")
    cfg["hidden_size"] = -1
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="hidden_size must be a positive integer"):
        load_model(tmp_path / "ck")


def test_missing_dir_and_bad_block_size(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        load_model(tmp_path)
    m = make_model()
    for bad in (0, -3, 10_000):
        with pytest.raises(ValueError, match="block_size"):
            m.step(m.new_cache(1), denoise=torch.zeros(1, 4, dtype=torch.long), block_size=bad)


def test_cli_info_full_preset_counts():
    out = subprocess.run(
        [sys.executable, "-m", "clover", "info", "--preset", "qwen3.6-35b-a3b", "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    d = json.loads(out)
    assert 34e9 < d["total_params"] < 36.5e9, d["total_params"]
    assert 2.8e9 < d["active_params"] < 3.8e9, d["active_params"]
    assert d["layer_types"].count("full_attention") == 10 and len(d["layer_types"]) == 40


def test_a_cached_hugging_face_repo_id_loads_and_an_uncached_one_says_how_to_fetch_it(tmp_path, monkeypatch):
    """``org/name`` resolves through the local Hugging Face cache only (its documented layout:
    models--org--name/refs/main names the snapshot folder); nothing is downloaded."""
    pytest.importorskip("huggingface_hub")
    m = make_model()
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--tiny-clover"
    save_model(m, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = load_model("acme/tiny-clover")
    assert torch.equal(loaded.lm_head.weight, m.lm_head.weight)
    with pytest.raises(CheckpointError, match="hf download acme/other"):
        load_model("acme/other")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme" / "tiny-clover").mkdir(parents=True)  # a local folder of that name wins (and has no config)
    with pytest.raises(CheckpointError, match="no config.json"):
        load_model("acme/tiny-clover")
