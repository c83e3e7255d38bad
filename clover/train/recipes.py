"""Training recipes. ``airspace`` trains the bundled default model from scratch on CPU."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch

from clover.data.chat import render_segments
from clover.data.corpus import example
from clover.data.decisions import decision_examples
from clover.data.tokenizer import CloverTokenizer
from clover.model import CloverConfig
from clover.train.objective import MaskingConfig
from clover.train.trainer import TrainConfig


@dataclass
class AirspaceRecipe:
    model: dict = field(
        default_factory=lambda: dict(
            hidden_size=128,
            num_hidden_layers=4,
            layer_types=None,  # None: from full_attention_interval
            full_attention_interval=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=32,
            linear_value_head_dim=32,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=128,
            max_position_embeddings=4096,
            # every head dimension rotates: with head_dim 32, Qwen's 25 % leaves 8 dims and the
            # model cannot copy by position (synthetic copy task, 200 steps: loss 3.80 with
            # 25 % / theta 1e5, 0.03 with 100 % / theta 1e4; see the training issue's notes)
            partial_rotary_factor=1.0,
            rope_theta=10_000.0,
            shift_logits=False,
            block_size=32,
            max_block_size=64,
        )
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=7_000,
            lr=2e-3,
            warmup=200,
            block_size=32,
            eval_every=250,
            ckpt_every=100,
            log_every=10,
            micro_batches=4,
            # 4 noisy views per sequence (2 masks + complements) share one clean stream: the
            # prompt (tool list, message) is most of each sequence, the answer a block or two
            masking=MaskingConfig(t_min=0.05, t_max=1.0, weighting="elbo", complementary=True, samples=2),
        )
    )
    batch_size: int = 16
    max_len: int = 512
    decision_frac: float = 0.2
    curriculum_steps: int = 600  # single-action messages only before this step
    tokenizer_vocab: int = 2048

    def data_fields(self) -> dict:
        """The recipe's own scalar fields (batch size, decision share, curriculum, vocabulary):
        what ``--config``'s ``data`` section sets and ``training.json`` records."""
        return {k: v for k, v in self.__dict__.items() if k not in ("train", "model")}

    def model_config(self, tok: CloverTokenizer) -> CloverConfig:
        return CloverConfig(
            vocab_size=tok.vocab_size,
            mask_token_id=tok.mask_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            extra={"recipe": "airspace"},
            **self.model,
        )


def encode_example(
    tok: CloverTokenizer, ex: dict, max_len: int, block_size: int, rng: random.Random | None = None
) -> tuple[list[int], list[bool]]:
    """One training sequence with exactly one answer: an assistant turn (the last, or one drawn
    with ``rng``) is the target, earlier turns are history, later ones are cut off.

    The answer's last block is filled to its end with EOS (``pad``) targets. At inference the
    whole active block is masked, so the model must learn to close the answer and fill the
    rest with EOS; without the fill every training block would end where the answer ends and
    the block's length alone would tell the model where to stop (a cue decoding never has).
    Nothing after the answer shares its block either, so in-block attention never sees the
    conversation's future.
    """
    msgs = ex["messages"]
    turns = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    if turns:
        msgs = msgs[: (rng.choice(turns) if rng else turns[-1]) + 1]
    segs = render_segments(msgs, ex.get("tools"))
    last = max((i for i, (_, is_answer) in enumerate(segs) if is_answer), default=None)
    if last is not None:
        segs = [(text, i == last) for i, (text, _) in enumerate(segs[: last + 1])]
    ids, tgt = tok.encode_segments(segs)
    if last is not None:
        fill = -len(ids) % block_size
        ids, tgt = ids + [tok.pad_token_id] * fill, tgt + [True] * fill
    return ids[:max_len], tgt[:max_len]


def collate(rows: list[tuple[list[int], list[bool]]], pad_id: int) -> dict[str, torch.Tensor]:
    T = max(len(r[0]) for r in rows)
    x0 = torch.full((len(rows), T), pad_id, dtype=torch.long)
    target = torch.zeros(len(rows), T, dtype=torch.bool)
    valid = torch.zeros(len(rows), T, dtype=torch.bool)
    for i, (ids, tg) in enumerate(rows):
        x0[i, : len(ids)] = torch.tensor(ids)
        target[i, : len(ids)] = torch.tensor(tg)
        valid[i, : len(ids)] = True
    return {"x0": x0, "target": target, "valid": valid}


def airspace_source(tok: CloverTokenizer, recipe: AirspaceRecipe, split: str = "train", seed: int = 0):
    """step → batch, a pure function of (seed, step): resumable and identical on every rank."""

    def source(step: int) -> dict[str, torch.Tensor]:
        rng = random.Random(f"airspace-{split}-{seed}-{step}")
        max_actions = 1 if step < recipe.curriculum_steps else 5
        rows = []
        for _ in range(recipe.batch_size):
            if rng.random() < recipe.decision_frac:
                ex = decision_examples(split, 1, seed=rng.randrange(1 << 30))[0]
            else:
                ex = example(rng, split, max_actions)
            rows.append(encode_example(tok, ex, recipe.max_len, recipe.train.block_size, rng))
        return collate(rows, tok.pad_token_id)

    return source


ROLES = ("system", "developer", "user", "assistant", "tool")


def read_chat_jsonl(path: str | Path) -> list[dict]:
    """Chat examples in OpenAI's fine-tuning format: one ``{"messages": [...], "tools": [...]}``
    per line (``tools`` optional), each with at least one assistant message to learn. Every
    problem is a ValueError naming the line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
            msgs = ex.get("messages") if isinstance(ex, dict) else None
            if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
                raise ValueError(f'{where}: expected {{"messages": [{{"role": ..., "content": ...}}, ...]}}')
            bad = [m.get("role") for m in msgs if m.get("role") not in ROLES]
            if bad:
                raise ValueError(f"{where}: unknown role {bad[0]!r}; roles are {', '.join(ROLES)}")
            if not any(m["role"] == "assistant" for m in msgs):
                raise ValueError(f"{where}: no assistant message (nothing to learn)")
            tools = ex.get("tools")
            if tools is not None and not isinstance(tools, list):
                raise ValueError(f"{where}: tools must be a list of OpenAI tool definitions")
            out.append({"messages": msgs, "tools": tools or None})
    if not out:
        raise ValueError(f"{path}: no examples")
    return out


def chat_source(tok: CloverTokenizer, examples: list[dict], recipe: AirspaceRecipe, seed: int = 0):
    """step → batch of ``recipe.batch_size`` examples drawn from ``examples``, a pure function of
    (seed, step) like ``airspace_source``; each example's target is one of its assistant turns."""

    def source(step: int) -> dict[str, torch.Tensor]:
        rng = random.Random(f"chat-{seed}-{step}")
        rows = [
            encode_example(tok, rng.choice(examples), recipe.max_len, recipe.train.block_size, rng)
            for _ in range(recipe.batch_size)
        ]
        return collate(rows, tok.pad_token_id)

    return source


RECIPES = {"airspace": AirspaceRecipe}
