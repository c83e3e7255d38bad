import pytest

pytest.importorskip("transformers.models.qwen3_5_moe", reason="needs transformers with qwen3_5_moe")


@pytest.fixture(scope="session")
def hf_models():
    from tests.convert.helpers import hf_model

    return {
        "text": hf_model("text"),
        "vl": hf_model("vl", seed=1),
        "dense": hf_model("dense", seed=2),
        "dense_vl": hf_model("dense_vl", seed=3),
        "next": hf_model("next", seed=4),
    }


@pytest.fixture(scope="session")
def sources(hf_models, tmp_path_factory):
    """Source checkpoint directories: per-expert multi-shard text, per-expert vision+text, packed text + MTP;
    dense text (sharded), dense vision+text + MTP, Qwen3-Next (fused GDN projections)."""
    import torch

    from tests.convert.helpers import save_hf, save_packed

    root = tmp_path_factory.mktemp("hf")
    mtp = {"mtp.fc.weight": torch.randn(32, 64), "mtp.layers.0.input_layernorm.weight": torch.randn(32)}
    return {
        "text": save_hf(hf_models["text"], root / "text", max_shard_size="20KB"),
        "vl": save_hf(hf_models["vl"], root / "vl"),
        "packed": save_packed(hf_models["text"], root / "packed", extra=mtp),
        "dense": save_hf(hf_models["dense"], root / "dense", max_shard_size="20KB"),
        "dense_vl": save_packed(hf_models["dense_vl"], root / "dense_vl", extra=mtp),
        "next": save_hf(hf_models["next"], root / "next", max_shard_size="20KB"),
    }


@pytest.fixture(scope="session")
def converted(sources, tmp_path_factory):
    """Each source converted in fp32 (block size 4, small calibration): {name: (out_dir, report)}."""
    from clover.convert import convert

    root = tmp_path_factory.mktemp("clover")
    return {
        k: (root / k, convert(src, root / k, dtype="fp32", block_size=4, calib_seqs=2, calib_blocks=4, progress=False))
        for k, src in sources.items()
    }
