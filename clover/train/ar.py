"""The autoregressive base: a Qwen3.5-MoE causal LM (transformers' ``Qwen3_5MoeForCausalLM``)
trained with a next-token loss on the airspace corpus, saved as a Hugging Face checkpoint.

This is the first half of the way Clover models are made: an AR model learns language and
copying cheaply, ``clover convert`` turns it into a Clover checkpoint, and ``clover train
--init-from`` adapts it to block diffusion. The same AR model, kept as it is, is the twin every
quality and speed figure is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from clover.data.tokenizer import CloverTokenizer
from clover.train.recipes import AirspaceRecipe
from clover.train.trainer import KindCE, TrainConfig, Trainer, length_groups

ARCHITECTURE = "Qwen3_5MoeForCausalLM"


@dataclass
class AirspaceArRecipe(AirspaceRecipe):
    """The airspace corpus (the same mix the diffusion recipe draws) for a next-token model.
    ``model`` holds ``Qwen3_5MoeTextConfig`` fields."""

    model: dict = field(
        default_factory=lambda: dict(
            hidden_size=128,
            num_hidden_layers=8,
            layer_types=None,  # None: from full_attention_interval
            full_attention_interval=4,  # three GDN layers to one attention layer, as Qwen3.5
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=32,
            linear_value_head_dim=32,
            linear_conv_kernel_dim=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=128,
            max_position_embeddings=4096,
            partial_rotary_factor=1.0,  # every head dimension rotates (a small head_dim copies by position)
            rope_theta=10_000.0,
            router_aux_loss_coef=0.001,
        )
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=3_000, lr=2e-3, warmup=100, block_size=1, eval_every=200, ckpt_every=50, log_every=10,
            micro_batches=4,
        )
    )  # fmt: skip
    batch_size: int = 32
    max_len: int = 1024
    decision_frac: float = 0.3
    toolless_frac: float = 0.1
    multiturn_frac: float = 0.25
    curriculum_steps: int = 0

    def hf_config(self, tok: CloverTokenizer):
        from transformers import Qwen3_5MoeTextConfig

        cfg = Qwen3_5MoeTextConfig(
            vocab_size=tok.vocab_size,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            bos_token_id=None,
            tie_word_embeddings=False,
            **self.model,
        )
        cfg.architectures = [ARCHITECTURE]
        return cfg


def build_model(config):
    from transformers import Qwen3_5MoeForCausalLM

    return Qwen3_5MoeForCausalLM(config)


def next_token_loss(model, part: dict[str, torch.Tensor], normalizer: float):
    """Cross-entropy of each target token given the tokens before it, summed and divided by
    ``normalizer`` (the global batch's target count), with the MoE balance loss.

    part: ``x0`` [B, T] ids, ``target`` [B, T] bool (assistant answers). Rows are right-padded;
    the model is causal, so padding never reaches a real token. Returns (loss, aux, per-token ce)."""
    out = model(input_ids=part["x0"], output_router_logits=True, use_cache=False)
    pick = part["target"][:, 1:]  # token i+1 is predicted by the logit at i
    ce = F.cross_entropy(out.logits[:, :-1][pick].float(), part["x0"][:, 1:][pick], reduction="none")
    return ce.sum() / normalizer, out.aux_loss, ce.detach()


class ArTrainer(Trainer):
    """``Trainer`` with the next-token objective: the same steps, schedule, checkpoints and FSDP2."""

    def train_step(self, step: int, data: dict[str, torch.Tensor] | None = None) -> dict:
        cfg, model = self.cfg, self.model
        for g in self.opt.param_groups:
            g["lr"] = cfg.lr_at(step)
        data = self.source(step) if data is None else data
        batch = {k: v.to(self.device) for k, v in data.items()}
        norm = max(1, int(batch["target"][:, 1:].sum()))  # over the global batch: ranks agree
        local = {k: v[self.rank :: self.world] for k, v in batch.items()}
        groups = max(1, min(cfg.micro_batches, batch["x0"].shape[0] // self.world))
        loss = aux = 0.0
        parts = length_groups(local, groups)
        for part in parts:
            part_loss, part_aux, _ = next_token_loss(model, part, norm)
            loss, aux = loss + part_loss, aux + part_aux / len(parts)
        if self.world > 1:
            loss = loss * self.world  # FSDP averages gradients over ranks; the loss is a global sum
        return {**self._update(step, loss, aux, data), "targets": norm}


def evaluate_ar(model, batches: list[dict], tok: CloverTokenizer) -> dict:
    """Mean next-token cross-entropy of the validation batches' answer tokens, and by kind
    (``digit``, ``word``, ``markup``, ``end``, ``other``): copying shows in digits and words."""
    kinds = KindCE(tok)
    was = model.training
    model.eval()
    with torch.no_grad():
        for b in batches:
            b = {k: v.to(next(model.parameters()).device) for k, v in b.items()}
            kinds.add(b["x0"][:, 1:][b["target"][:, 1:]], next_token_loss(model, b, 1.0)[2])
    model.train(was)
    return {"val_loss": kinds.mean(), "val_ce": kinds.by_kind()}
