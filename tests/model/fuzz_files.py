"""Corrupted model files for the fuzz test (test_file_fuzz.py), and the worker process that loads
each of them.

``gguf_cases`` and ``checkpoint_cases`` write the files: the bundled model exported to GGUF (f32),
or its checkpoint directory (config.json + model.safetensors + tokenizer), each cut at several
offsets, with a structural byte of its header flipped, or rewritten with one thing wrong (a
tensor's type or shape, a tensor missing or extra, a config field wrong or missing, config and
weights that disagree). Each case is ``{"name", "path"}``; every one must be refused.

``python -m tests.model.fuzz_files CASES.json`` loads each case as ``clover serve`` and ``clover
generate`` do (``clover.cli.main``), in this one process, and prints one JSON line per case;
before each it prints ``{"start": name}``, so that a process killed by an abort names the case.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"


# --- GGUF ---------------------------------------------------------------------------------------


def _gguf_parts(config, src: Path) -> dict[str, np.ndarray]:
    import torch

    from clover.export.gguf import gguf_tensors
    from clover.model.io import load_model

    with torch.no_grad():
        return gguf_tensors(config, load_model(src, "cpu", torch.float32).state_dict())


def write_gguf(out: Path, config, tensors: dict, patch=None, src: Path = BUNDLED) -> Path:
    """A GGUF file as ``clover export gguf`` writes it (f32), from ``tensors`` (name → array,
    written in the array's dtype), its metadata changed by ``patch(kv)`` first (kv: the writer's
    key → GGUFValue dict)."""
    from gguf import GGUFWriter

    from clover.export.gguf import ARCH, _metadata, _tokenizer

    w = GGUFWriter(out, ARCH)
    _metadata(w, config, src, "f32")
    _tokenizer(w, config, src)
    if patch is not None:
        patch(w.kv_data[0])
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _offsets(path: Path) -> dict[str, int]:
    """Byte offsets of the header's structural fields in a GGUF file (gguf's reader parses it)."""
    from gguf import GGUFReader

    r = GGUFReader(path)
    base = r.data.ctypes.data

    def at(part) -> int:
        return part.ctypes.data - base

    f = r.fields
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    norm = next(t for t in r.tensors if t.name == "output_norm.weight")
    # a tensor info's parts: name length, name, n_dims, dims, type, offset
    return {
        "magic": 0,
        "version": 4,
        "tensor_count_high": 8 + 7,
        "kv_count": 16,
        "block_count_type": at(f["clover.block_count"].parts[2]),
        "block_count_value": at(f["clover.block_count"].parts[3]) + 3,
        "vocab_size_key_name": at(f["clover.vocab_size"].parts[1]) + 8,
        "config_length_high": at(f["clover.config"].parts[3]) + 7,
        "config_json_brace": at(f["clover.config"].parts[4]),
        "token_embd_dim": at(emb.field.parts[3]),
        "output_norm_type": at(norm.field.parts[4]),
        "output_norm_offset": at(norm.field.parts[5]) + 2,
        "token_embd_n_dims": at(emb.field.parts[2]),
        "data_start": r.data_offset,
    }


def gguf_cases(d: Path) -> list[dict]:
    from clover.model.config import CloverConfig

    config = CloverConfig.load(BUNDLED / "config.json")
    base = _gguf_parts(config, BUNDLED)
    cases: list[dict] = []

    def case(name: str, path: Path) -> None:
        cases.append({"name": name, "path": str(path)})

    good = write_gguf(d / "good.gguf", config, base)
    raw = good.read_bytes()
    off = _offsets(good)
    for at in (0, 3, 8, 24, 1000, off["data_start"] - 10, off["data_start"] + 100, len(raw) // 2, len(raw) - 1):
        p = d / f"cut-{at}.gguf"
        p.write_bytes(raw[:at])
        case(f"gguf truncated at byte {at}", p)
    for what, at in off.items():
        if what == "data_start":
            continue
        b = bytearray(raw)
        b[at] ^= 0xFF
        p = d / f"flip-{what}.gguf"
        p.write_bytes(bytes(b))
        case(f"gguf header byte flipped: {what}", p)

    def variant(name: str, tensors=None, patch=None, cfg=config) -> None:
        p = write_gguf(
            d / (name.replace(" ", "-").replace("/", "-") + ".gguf"), cfg, base if tensors is None else tensors, patch
        )
        case(f"gguf {name}", p)

    def with_tensor(name: str, array) -> dict:
        return {**base, name: array}

    def without(name: str) -> dict:
        return {k: v for k, v in base.items() if k != name}

    def json_config(text: str):
        from gguf import GGUFValue, GGUFValueType

        return lambda kv: kv.__setitem__("clover.config", GGUFValue(text, GGUFValueType.STRING))

    def set_kv(key: str, value, kind: str):
        from gguf import GGUFValue, GGUFValueType

        return lambda kv: kv.__setitem__(key, GGUFValue(value, GGUFValueType[kind]))

    cfg = config.to_dict()
    variant(
        "norm stored as f16", with_tensor("blk.0.attn_norm.weight", base["blk.0.attn_norm.weight"].astype(np.float16))
    )
    variant("embedding stored as i32", with_tensor("token_embd.weight", base["token_embd.weight"].astype(np.int32)))
    variant("ssm_a stored as f64", with_tensor("blk.0.ssm_a", base["blk.0.ssm_a"].astype(np.float64)))
    variant(
        "router stored as f16",
        with_tensor("blk.1.ffn_gate_inp.weight", base["blk.1.ffn_gate_inp.weight"].astype(np.float16)),
    )
    variant("embedding one row short", with_tensor("token_embd.weight", base["token_embd.weight"][:-1]))
    variant("norm one longer", with_tensor("output_norm.weight", np.ones(config.hidden_size + 1, np.float32)))
    variant("one expert short", with_tensor("blk.2.ffn_down_exps.weight", base["blk.2.ffn_down_exps.weight"][:-1]))
    variant("output missing", without("output.weight"))
    variant("ssm_a missing", without("blk.0.ssm_a"))
    variant("extra tensor", with_tensor("blk.0.extra.weight", np.ones(4, np.float32)))
    variant("extra layer", with_tensor("blk.6.attn_norm.weight", np.ones(config.hidden_size, np.float32)))
    variant("config not JSON", patch=json_config("{not json"))
    variant("config a list", patch=json_config("[1, 2]"))
    variant("config field missing", patch=json_config(json.dumps({k: v for k, v in cfg.items() if k != "hidden_size"})))
    variant("config field wrong kind", patch=json_config(json.dumps({**cfg, "num_hidden_layers": "six"})))
    variant("config field unknown", patch=json_config(json.dumps({**cfg, "hiden_size": 128})))
    variant(
        "config vocab differs from keys", patch=json_config(json.dumps({**cfg, "vocab_size": cfg["vocab_size"] + 1}))
    )
    variant(
        "config layer types differ", patch=json_config(json.dumps({**cfg, "layer_types": cfg["layer_types"][::-1]}))
    )
    variant("config missing", patch=lambda kv: kv.pop("clover.config"))
    variant("key missing", patch=lambda kv: kv.pop("clover.block_count"))
    variant("key of wrong type", patch=set_kv("clover.vocab_size", "1767", "STRING"))
    variant("architecture llama", patch=set_kv("general.architecture", "llama", "STRING"))
    variant("version 2", patch=set_kv("clover.gguf_version", 2, "UINT32"))
    variant("block size 0", patch=set_kv("clover.block_size", 0, "UINT32"))
    variant("mask id past vocab", patch=set_kv("clover.mask_token_id", 5000, "UINT32"))
    variant("eps NaN", patch=set_kv("clover.attention.layer_norm_rms_epsilon", float("nan"), "FLOAT32"))
    variant("tokenizer corrupt", patch=set_kv("tokenizer.huggingface.json", "{", "STRING"))
    wide = config.replace(hidden_size=256)  # keys and config agree with each other, not with the weights
    variant("config and keys wider than weights", cfg=wide)
    return cases


# --- Clover checkpoints (config.json + safetensors) ----------------------------------------------


def checkpoint_cases(d: Path) -> list[dict]:
    import torch
    from safetensors.torch import load_file, save_file

    cases: list[dict] = []
    state = load_file(BUNDLED / "model.safetensors")
    cfg = json.loads((BUNDLED / "config.json").read_text())

    def checkpoint(name: str, weights: dict | bytes | None = None, config=None) -> None:
        p = d / name.replace(" ", "-")
        shutil.copytree(BUNDLED, p)
        if isinstance(weights, bytes):
            (p / "model.safetensors").write_bytes(weights)
        elif isinstance(weights, dict):
            save_file(weights, p / "model.safetensors")
        if config is not None:
            (p / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
        cases.append({"name": f"checkpoint {name}", "path": str(p)})

    raw = (BUNDLED / "model.safetensors").read_bytes()
    header = 8 + int.from_bytes(raw[:8], "little")
    for at in (0, 4, 7, 8, 100, header - 1, header + 50, len(raw) // 2, len(raw) - 1):
        checkpoint(f"truncated at byte {at}", raw[:at])
    for at in (0, 7, 8, 9, 40, header - 1):  # the length field and the JSON header
        b = bytearray(raw)
        b[at] ^= 0xFF
        checkpoint(f"header byte {at} flipped", bytes(b))
    some = "model.layers.0.input_layernorm.weight"
    checkpoint("norm stored as int32", {**state, some: state[some].to(torch.int32)})
    checkpoint("norm stored as bool", {**state, some: state[some] > 0})
    checkpoint(
        "embedding one row short", {**state, "model.embed_tokens.weight": state["model.embed_tokens.weight"][:-1]}
    )
    checkpoint("norm missing", {k: v for k, v in state.items() if k != some})
    checkpoint("extra tensor", {**state, "model.extra.weight": torch.ones(3)})
    checkpoint("config not JSON", config="{nope")
    checkpoint("config a list", config="[]")
    checkpoint("config field missing", config={k: v for k, v in cfg.items() if k != "hidden_size"})
    checkpoint("config field wrong kind", config={**cfg, "num_hidden_layers": "six"})
    checkpoint("config field negative", config={**cfg, "num_attention_heads": -4})
    checkpoint("config field unknown", config={**cfg, "hiden_size": 128})
    checkpoint("config wider than weights", config={**cfg, "hidden_size": 256})
    checkpoint(
        "config fewer layers than weights",
        config={**cfg, "num_hidden_layers": 5, "layer_types": cfg["layer_types"][:5]},
    )
    checkpoint("config missing", config=None)
    (d / "config-missing" / "config.json").unlink()
    checkpoint("weights missing")
    (d / "weights-missing" / "model.safetensors").unlink()
    checkpoint("tokenizer corrupt")
    (d / "tokenizer-corrupt" / "tokenizer.json").write_text("{")
    return cases


# --- the worker -----------------------------------------------------------------------------------


def _run_cli(argv: list[str]) -> tuple[int, str]:
    """``clover.cli.main(argv)`` → (exit code, what it wrote to stderr)."""
    import contextlib
    import io

    from clover.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
            if isinstance(e.code, str):
                err.write(e.code)
        except BaseException as e:
            import traceback

            err.write("Traceback (uncaught)\n" + "".join(traceback.format_exception(e)))
            code = 1
    return code, err.getvalue()


def check_case(path: str) -> dict:
    """Load ``path`` as the server does (the engine, in-process); when that fails, as ``clover
    serve`` and ``clover generate`` do (their exit codes and stderr)."""
    from clover.api.loading import load_engine

    out: dict = {}
    try:
        load_engine(path, threads=1)
        out["loaded"] = True  # the file was accepted: the test fails it (serve would start)
        return out
    except Exception as e:
        out["error_type"] = type(e).__name__
        out["error_bases"] = [c.__name__ for c in type(e).__mro__]
        out["error"] = str(e)
    out["serve_code"], out["serve_err"] = _run_cli(["serve", path, "--port", "0", "--threads", "1"])
    out["generate_code"], out["generate_err"] = _run_cli(
        ["generate", "hi", "--model", path, "--threads", "1", "--max-tokens", "2"]
    )
    return out


def worker(cases_file: str) -> None:
    import torch

    torch.set_num_threads(1)
    for c in json.loads(Path(cases_file).read_text()):
        print(json.dumps({"start": c["name"]}), flush=True)
        print(json.dumps({"case": c["name"], **check_case(c["path"])}), flush=True)


if __name__ == "__main__":
    worker(sys.argv[1])
