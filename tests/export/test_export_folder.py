"""What ``clover export hf`` writes and refuses, and the modeling files it ships (no transformers
run here)."""

from __future__ import annotations

import ast
import dataclasses
import json
import stat
from pathlib import Path

import pytest

from clover.cli import main
from clover.export import ExportError, export_hf, export_problems
from clover.export.hf_folder import AUTO_MAP, HF_MODELING, MODELING_FILES, modeling_literal
from clover.model.config import CloverConfig


def test_folder_layout(bundled_export):
    out = bundled_export["export"]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "clover" and config["auto_map"] == AUTO_MAP
    assert config["architectures"] == ["CloverForCausalLM"] and config["dtype"] == "float32"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(bundled_export["model"].state_dict())
    assert all((out / f).exists() for f in set(index["weight_map"].values()))
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [0, 2]
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "README.md"):
        assert (out / name).exists(), name
    for name in MODELING_FILES:  # copied verbatim
        assert (out / name).read_bytes() == (HF_MODELING / name).read_bytes()
    card = (out / "README.md").read_text()
    from clover.engine.policies import DEFAULT_POLICY

    assert "trust_remote_code=True" in card and f'policy="{DEFAULT_POLICY}"' in card and "LoraConfig" in card


def test_cli_shards_and_json(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["export", "hf", "--out", str(tmp_path / "hf"), "--max-shard-gb", "0.002", "--json"])
    assert e.value.code == 0
    report = json.loads(capsys.readouterr().out)
    shards = [f for f in report["files"] if f.startswith("model-")]
    assert len(shards) > 1 and all((tmp_path / "hf" / f).exists() for f in shards)
    # readable by others like every other file written there (safetensors itself writes 0600)
    modes = {f: stat.S_IMODE((tmp_path / "hf" / f).stat().st_mode) for f in report["files"]}
    assert all(modes[f] == 0o644 for f in shards), modes


def test_modeling_files_import_only_torch_and_transformers():
    allowed = {"__future__", "math", "dataclasses", "importlib", "torch", "transformers"}
    for name in MODELING_FILES:
        tree = ast.parse((HF_MODELING / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed, (name, roots)


def test_fields_are_clovers_defaults():
    """The modeling config knows every Clover config field, with Clover's default."""
    fields = modeling_literal("FIELDS")
    ours = {f.name: f for f in dataclasses.fields(CloverConfig) if f.name != "model_type"}
    assert set(fields) == set(ours)
    for name, f in ours.items():
        if name not in ("extra", "quantization"):
            assert fields[name] == f.default, name
    assert modeling_literal("GDN_BLOCK_MIXINGS") == ("bidirectional", "causal")


def _checkpoint(tmp_path: Path, **changes) -> Path:
    from clover.data import default_model_dir

    d = tmp_path / "ckpt"
    d.mkdir()
    config = json.loads((default_model_dir() / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, **changes}))
    return d


def test_quantized_checkpoint_is_refused(tmp_path, capsys):
    q = {"bits": 8, "group_size": 0, "scheme": "symmetric", "modules": []}
    src = _checkpoint(tmp_path, quantization=q)
    with pytest.raises(SystemExit) as e:
        main(["export", "hf", "--model", str(src), "--out", str(tmp_path / "hf")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "quantized checkpoint (int8)" in err
    assert not (tmp_path / "hf").exists()


def test_unimplemented_feature_is_refused(tmp_path, monkeypatch):
    fields = {k: v for k, v in modeling_literal("FIELDS").items() if k != "gdn_right_conv"}

    def literal(name):
        return fields if name == "FIELDS" else ("bidirectional",)

    monkeypatch.setattr("clover.export.hf_folder.modeling_literal", literal)
    config = CloverConfig.load(_checkpoint(tmp_path, gdn_block_mixing="causal") / "config.json")
    problems = export_problems(config)
    assert any("['gdn_right_conv']" in p for p in problems) and any("gdn_block_mixing='causal'" in p for p in problems)
    with pytest.raises(ExportError, match="does not implement"):
        export_hf(tmp_path / "ckpt", tmp_path / "hf")


def test_generate_defaults_are_the_engines():
    """The exported ``generate`` decodes with Clover's default policy and threshold, and knows
    every policy it is compared on."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD
    from clover.export.hf_modeling import generation_clover as g

    assert (g.DEFAULT_POLICY, g.DEFAULT_THRESHOLD) == (DEFAULT_POLICY, DEFAULT_THRESHOLD)
    assert {DEFAULT_POLICY, "threshold", "prefix", "ar", "fixed"} <= set(g.POLICIES)
