"""The SGLang plugin (entry point ``sglang.srt.plugins: clover``): what SGLang needs to serve Clover.

SGLang runs ``register`` in every process it starts (launcher, scheduler, detokenizer) before
it reads the model. It:

* registers ``CloverForCausalLM`` (``clover_sglang.model``) in SGLang's model registry, and
  transformers' config class for ``model_type: clover``, so no ``--trust-remote-code`` is needed;
* registers the tool-call parser ``clover`` (``clover_sglang.tool_calls``: Clover's markup,
  streamed as whole calls);
* adds the Clover algorithms (``clover_sglang.algorithms``) to SGLang's dLLM algorithm table;
* teaches SGLang's dLLM config that ``CloverForCausalLM`` is a diffusion model. SGLang keeps the
  block size and mask id of the architectures it knows in a table inside
  ``DllmConfig.from_server_args``; for a Clover folder the wrapped function takes them from the
  model's own ``config.json`` (``block_size``, ``mask_token_id``) and fills the algorithm's
  ``stop_token_ids`` from its EOS ids; every other model goes to SGLang's own function.
"""

from __future__ import annotations

import json
from pathlib import Path

ARCHITECTURE = "CloverForCausalLM"


def clover_folder(model_path: str) -> dict | None:
    """The ``config.json`` of a local Clover folder, else None (any other model)."""
    p = Path(model_path) / "config.json"
    if not p.is_file():
        return None
    config = json.loads(p.read_text())
    return config if ARCHITECTURE in (config.get("architectures") or []) else None


def stop_token_ids(model_path: str, config: dict) -> list[int]:
    """The ids Clover's engine stops at: the config's EOS ids and those of generation_config.json."""
    ids = set()
    gen = Path(model_path) / "generation_config.json"
    for src in (config, json.loads(gen.read_text()) if gen.is_file() else {}):
        e = src.get("eos_token_id")
        ids |= set([] if e is None else [e] if isinstance(e, int) else e)
    return sorted(ids)


def dllm_config(server_args, original):
    """``DllmConfig.from_server_args`` for Clover folders (``original`` for every other model)."""
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.dllm.algorithm import get_algorithm_cls
    from sglang.srt.dllm.config import DllmConfig

    cfg = resolving_view(server_args)
    config = clover_folder(cfg.model_path) if cfg.dllm_algorithm is not None else None
    if config is None:
        return original(server_args)
    algo = get_algorithm_cls(cfg.dllm_algorithm)
    if algo.supported_architectures and ARCHITECTURE not in algo.supported_architectures:
        raise ValueError(f"{cfg.dllm_algorithm} does not run {ARCHITECTURE}: use CloverPrefix, CloverThreshold, ...")
    algorithm_config = {}
    if cfg.dllm_algorithm_config is not None:
        import yaml

        algorithm_config = yaml.safe_load(Path(cfg.dllm_algorithm_config).read_text()) or {}
        if not isinstance(algorithm_config, dict):
            raise ValueError("the dLLM algorithm config must be a YAML mapping")
    block_size = int(algorithm_config.get("block_size", config.get("block_size", 32)))
    if not 0 < block_size <= config.get("max_block_size", block_size):
        raise ValueError(f"block_size {block_size} outside 1..{config.get('max_block_size')} for this model")
    algorithm_config.setdefault("stop_token_ids", stop_token_ids(cfg.model_path, config))
    return DllmConfig(
        algorithm=cfg.dllm_algorithm,
        algorithm_config=algorithm_config,
        block_size=block_size,
        mask_id=int(config["mask_token_id"]),
        max_running_requests=1 if cfg.max_running_requests is None else cfg.max_running_requests,
        first_done_first_out_mode=cfg.dllm_fdfo,
        requires_separate_context_encoding=False,
    )


def register() -> None:
    from sglang.srt.dllm import algorithm as dllm_algorithms
    from sglang.srt.dllm.config import DllmConfig
    from sglang.srt.models.registry import ModelRegistry
    from transformers import AutoConfig

    from clover.export.hf_modeling.configuration_clover import CloverConfig
    from clover_sglang.algorithms import ALGORITHMS
    from clover_sglang.model import CloverForCausalLM
    from clover_sglang.tool_calls import register as register_tool_call_parser

    try:
        AutoConfig.register("clover", CloverConfig)
    except ValueError:  # registered already (a second call in the same process)
        pass
    ModelRegistry.models[ARCHITECTURE] = CloverForCausalLM
    register_tool_call_parser()
    for cls in ALGORITHMS:
        dllm_algorithms.algo_name_to_cls[cls.__name__] = cls
    if not getattr(DllmConfig.from_server_args, "clover", False):
        original = DllmConfig.from_server_args

        def from_server_args(server_args):
            return dllm_config(server_args, original)

        from_server_args.clover = True
        DllmConfig.from_server_args = staticmethod(from_server_args)
