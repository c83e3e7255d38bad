"""The autoregressive base: a Qwen3.5-MoE causal LM (transformers' ``Qwen3_5MoeForCausalLM``)
trained with a next-token loss on a recipe's corpus (``Recipe.autoregressive``), saved as a Hugging
Face checkpoint.

This is the first half of the way Clover models are made: an AR model learns language and
copying cheaply, ``clover convert`` turns it into a Clover checkpoint, and ``clover train
--init-from`` adapts it to block diffusion. The same AR model, kept as it is, is the twin every
quality and speed figure is measured against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from clover.data.tokenizer import CloverTokenizer
from clover.train.trainer import KindCE, Trainer, length_groups

ARCHITECTURE = "Qwen3_5MoeForCausalLM"


def hf_config(tok: CloverTokenizer, fields: dict):
    """A ``Qwen3_5MoeTextConfig`` of ``fields`` (a recipe's ``model``) for ``tok``'s vocabulary."""
    from transformers import Qwen3_5MoeTextConfig  # deferred: transformers is a test/optional dependency

    cfg = Qwen3_5MoeTextConfig(
        vocab_size=tok.vocab_size,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
        **fields,
    )
    cfg.architectures = [ARCHITECTURE]
    return cfg


def build_model(config):
    from transformers import Qwen3_5MoeForCausalLM  # optional: transformers (a test dependency)

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
