"""The model card (``README.md``) of an exported folder: what the model is and how to load,
decode and fine-tune it with transformers."""

from __future__ import annotations

from pathlib import Path

import torch

from clover.export.hf_modeling.generation_clover import DEFAULT_POLICY, DEFAULT_THRESHOLD
from clover.model.config import CloverConfig
from clover.model.model import CloverForBlockDiffusion


def model_card(config: CloverConfig, src: Path, stops: list[int]) -> str:
    """The card's Markdown for a model of ``config`` exported from ``src``, stopping at ``stops``."""
    with torch.device("meta"):
        counts = CloverForBlockDiffusion(config).num_parameters()
    ffn = (
        f"{config.num_experts} experts, {config.num_experts_per_tok} active per token, plus a shared expert"
        if config.num_experts
        else f"dense SwiGLU, width {config.intermediate_size}"
    )
    pattern = config.layer_pattern
    shift = (
        "token i is predicted at position i-1 (the autoregressive base's way); `forward` returns the "
        "logits already moved to the token they predict"
        if config.shift_logits
        else "token i is predicted at position i"
    )
    return CARD.format(
        config=config,
        src=src,
        pattern=pattern,
        ffn=ffn,
        counts=counts,
        shift=shift,
        stops=stops,
        DEFAULT_POLICY=DEFAULT_POLICY,
        DEFAULT_THRESHOLD=DEFAULT_THRESHOLD,
    )


# the card, filled by model_card (str.format fields: the config, the counts, the decoding defaults)
CARD = """---
library_name: transformers
tags:
- clover
- block-diffusion
- custom_code
---

# Clover block-diffusion model

A Clover block-diffusion language model, exported by `clover export hf` from `{src.name}`. It writes text
in blocks of {config.block_size} tokens (any block size up to {config.max_block_size} works): inside
the block being written every position starts as the mask token (id {config.mask_token_id}) and a few
denoising passes fill them in parallel; a finished block is committed into a cache that later
blocks read.

| | |
|---|---|
| layers | {config.num_hidden_layers} (`{pattern}`: G = Gated DeltaNet mixer, A = block-causal attention) |
| hidden size | {config.hidden_size} |
| feed-forward | {ffn} |
| parameters | {counts[total_params]:,} ({counts[active_params]:,} active per token) |
| vocabulary | {config.vocab_size} |
| prediction | {shift} |

The modeling code (`configuration_clover.py`, `modeling_clover.py` with `layers_clover.py` and
`gdn_clover.py`, `generation_clover.py`) needs torch and transformers only; it is plain PyTorch,
written for correctness rather than speed.

## Load and generate

```python
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

path = "PATH_OR_REPO_ID"
tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=torch.float32)
messages = [{{"role": "user", "content": "Hello!"}}]
ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
out = model.generate(ids["input_ids"], max_new_tokens=128)
print(tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
```

`generate(input_ids, attention_mask=None, max_new_tokens=None, block_size=None, policy="{DEFAULT_POLICY}",
threshold={DEFAULT_THRESHOLD}, steps_per_block=None, eos_token_id=None, pad_token_id=None)` decodes greedily:

- `policy`: which masked positions a pass commits (default `{DEFAULT_POLICY}`). `prefix`: left to
  right, the leftmost open position and then each next one while its probability is at least
  `threshold`; `threshold`: every position whose probability is at least `threshold`, and at least
  the most confident one; `fixed`:
  `steps_per_block` passes per block (default `block_size // 4`), the most confident positions
  first; `ar`: one position per pass, left to right (autoregressive decoding of the same model).
- `block_size`: tokens per block (default {config.block_size}, at most {config.max_block_size}).
- `eos_token_id`: the stop tokens (default {stops}, from `generation_config.json`). The stop token
  that ends a row is kept in its output, and shorter rows are padded with `pad_token_id`.
- `max_new_tokens`: default 256 (or `max_length` minus the prompt length).

Rows of a batch (padded on either side, marked by `attention_mask`) decode one after another, each
exactly as it would alone. Sampling and beam search are not supported.

## Logits and fine-tuning

`model(input_ids, attention_mask=None, noisy_input_ids=None, labels=None, block_size=None)` is the
training forward: the clean tokens `input_ids` supply the history, and each block of
`noisy_input_ids` (the same text with some tokens replaced by the mask token; default the clean
text) is read against the clean blocks before it and bidirectionally within itself. The logits are
aligned so that row i predicts token i of the text (no shift is left to do); `labels` (the target
per position, -100 where no loss) give the mean cross-entropy. Padding (attention mask 0) must come
at the end of each row.

A LoRA fine-tuning step with PEFT:

```python
from peft import LoraConfig, get_peft_model

model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj", "in_proj_qkv", "out_proj"]))
x0 = ids["input_ids"]
noisy = x0.masked_fill(torch.rand(x0.shape) < 0.5, model.config.mask_token_id)
labels = x0.masked_fill(noisy != model.config.mask_token_id, -100)
loss = model(input_ids=x0, noisy_input_ids=noisy, labels=labels).loss
loss.backward()
```

A fine-tuned model saved with `save_pretrained` (LoRA merged) converts back into a Clover checkpoint
with `clover convert --from DIR --out CLOVER_DIR`.
"""
