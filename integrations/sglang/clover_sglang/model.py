"""Clover as an SGLang model: ``CloverForCausalLM``, the architecture ``clover export hf`` writes.

SGLang's diffusion path (``--dllm-algorithm``) runs every request one block at a time: each
forward holds exactly one block per request, ``[B·bs]`` tokens at positions ``p0 .. p0+bs-1`` of
its request (``p0`` a block boundary), after the request's committed history. A block still
holding a mask token is being denoised; a block without one is being committed (a prompt block,
or a generated block after its last position was chosen: SGLang runs one more forward on it so
its keys and values land in the KV pool).

The history lives where each kind of layer keeps it:

* attention: keys and values in SGLang's paged KV pool, through ``RadixAttention`` with
  ``AttentionType.ENCODER_ONLY`` (every token of the block sees the whole history and the whole
  block: Clover's block-causal rule, since the history holds complete blocks only). A denoise
  pass writes its keys and values into the block's own slots, past the committed history; the
  commit forward overwrites them with the final ones.
* GDN: the recurrent state and conv tail in ``GDNStatePool`` (``clover_sglang.state``), keyed by
  SGLang's request slot. A denoise pass reads it; only a commit forward advances it.

Tensor parallel (``--tp-size N``): each rank builds Clover's modules for its share of the heads
and expert widths and sums the row-parallel outputs over SGLang's tensor-parallel group
(``clover_sglang.sharding``); its KV pool and GDN pool hold its own heads only.

The math is Clover's own modules (``clover.model``): the same layers, norms, GDN mixer (memory
slot, calibration, right conv), MoE or dense feed-forward and head as Clover's engine runs, so
the logits are the engine's up to the attention kernel's rounding.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path

import torch
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from torch import nn

from clover.model.cache import GDNCache
from clover.model.config import ATTN, CloverConfig
from clover.model.model import CloverBackbone
from clover_sglang.sharding import TensorParallel, parallelize
from clover_sglang.state import GDNStatePool


def clover_config(hf_config) -> CloverConfig:
    """Clover's typed config: the folder's own ``config.json`` (SGLang's copy of the config object
    is not the file: its model setup rewrites fields such as ``moe_intermediate_size``), or the
    config object when it names no folder."""
    fields = {f.name for f in dataclasses.fields(CloverConfig)}
    path = Path(getattr(hf_config, "_name_or_path", "") or ".") / "config.json"
    src = json.loads(path.read_text()) if path.is_file() else hf_config.to_dict()
    d = {k: v for k, v in src.items() if k in fields}
    d["model_type"] = "clover"
    return CloverConfig.from_dict(d)


def parallel_rank() -> tuple[int, int]:
    """This process's (rank, size) in SGLang's tensor-parallel group; (0, 1) when SGLang has
    published no parallel layout (the model built outside a server). Refuses the layouts the
    plugin does not implement."""
    from sglang.srt.runtime_context import get_parallel

    p = get_parallel()
    try:
        rank, size, pp, attn_tp, ep = p.tp_rank, p.tp_size, p.pp_size, p.attn_tp_size, p.moe_ep_size
    except (ValueError, RuntimeError):  # nothing published
        return 0, 1
    if pp != 1:
        raise NotImplementedError(f"clover-sglang does not run pipeline parallel (got --pp-size {pp})")
    if attn_tp != size:
        raise NotImplementedError(
            "clover-sglang shards attention over the whole tensor-parallel group: no --enable-dp-attention"
        )
    if ep != 1:
        raise NotImplementedError(
            f"clover-sglang splits each expert's width over the tensor-parallel group: leave --ep-size at 1 (got {ep})"
        )
    return rank, size


class CloverForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = "", **_):
        super().__init__()
        if quant_config is not None:
            raise NotImplementedError("clover-sglang serves full-precision Clover checkpoints only")
        rank, size = parallel_rank()
        # this rank's share of the model (clover_sglang.sharding): heads and expert widths split,
        # the rest replicated; self.cfg is that share's config
        self.tp = TensorParallel(clover_config(config), rank, size)
        self.cfg = self.tp.local
        self.config = config
        self.model = CloverBackbone(self.cfg)
        self.lm_head = nn.Linear(self.cfg.hidden_size, self.cfg.vocab_size, bias=False)
        if self.cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        c = self.cfg
        self.attn = nn.ModuleDict(
            {
                str(i): RadixAttention(
                    c.num_attention_heads,
                    c.head_dim,
                    c.head_dim**-0.5,
                    num_kv_heads=c.num_key_value_heads,
                    layer_id=i,
                    attn_type=AttentionType.ENCODER_ONLY,
                    prefix=f"{prefix}attn.{i}",
                )
                for i, t in enumerate(c.layer_types)
                if t == ATTN
            }
        )
        self.state = GDNStatePool(self.cfg)  # this rank's GDN heads only
        if size > 1:
            from sglang.srt.distributed import tensor_model_parallel_all_reduce

            parallelize(self, tensor_model_parallel_all_reduce)

    # -- loading ------------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Weights under their Clover names (``clover export hf``), whole; every one must be present.
        Each rank keeps its share (``TensorParallel.shard``)."""
        params = dict(self.named_parameters())
        seen = set()
        for name, w in weights:
            if name not in params:
                raise KeyError(f"{name}: not a Clover parameter (is this a `clover export hf` folder?)")
            p = params[name]
            w = self.tp.shard(name, w)
            if p.shape != w.shape:
                raise ValueError(f"{name}: checkpoint shape {tuple(w.shape)}, model {tuple(p.shape)}")
            with torch.no_grad():
                p.copy_(w.to(p.dtype))
            seen.add(name)
        missing = sorted(set(params) - seen - ({"lm_head.weight"} if self.cfg.tie_word_embeddings else set()))
        if missing:
            raise KeyError(f"checkpoint lacks {len(missing)} Clover parameters, e.g. {missing[:3]}")

    # -- a forward ----------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch, **_):
        """One block per request → ``full_logits [B·bs, V]``, row i predicting token i of its block."""
        if not forward_batch.forward_mode.is_dllm_extend():
            raise RuntimeError(
                "Clover is a block-diffusion model: serve it with --dllm-algorithm (e.g. CloverPrefix); "
                f"got a {forward_batch.forward_mode.name} forward"
            )
        B = forward_batch.batch_size
        T = input_ids.numel() // B
        lens = forward_batch.extend_seq_lens_cpu
        if input_ids.numel() != B * T or (lens is not None and any(n != T for n in lens)):
            raise RuntimeError(f"expected one block per request, got extend lengths {lens}")
        ids = input_ids.view(B, T)
        pos = positions.view(B, T)
        masked = ids == self.cfg.mask_token_id
        if forward_batch.dllm_prompt_mask is not None:  # literal mask ids in a prompt are text
            masked &= ~forward_batch.dllm_prompt_mask.view(B, T)
        commit = ~masked.any(1)  # [B] a clean block: this forward commits it
        start = pos[:, 0]
        rows = self.state.rows(forward_batch.req_pool_indices, start.tolist(), T, self.lm_head.weight.dtype)
        h = self.model.embed_tokens(ids)
        rope = self.model.rotary_emb(pos, h.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer.input_layernorm(h)
            if layer.layer_type == ATTN:
                y = self._attention(layer.self_attn, self.attn[str(i)], x, rope, forward_batch)
            else:
                y = self._gdn(layer.linear_attn, rows.layers[i], x, commit, T)
            h = layer._ffn(h + y, stats=False)[0]
        h = self.model.norm(h)
        if self.cfg.shift_logits:  # row i reads position i-1; row 0 the last committed position
            last = h[:, -1]
            h = torch.cat([rows.last_hidden[:, None].to(h.dtype), h[:, :-1]], 1)
            rows.last_hidden = torch.where(commit[:, None], last.to(rows.last_hidden.dtype), rows.last_hidden)
        self.state.store(rows, commit, T)
        logits = self.lm_head(h).reshape(B * T, -1)
        return LogitsProcessorOutput(full_logits=logits, next_token_logits=None)

    @staticmethod
    def _attention(attn, radix: RadixAttention, x, rope, forward_batch) -> torch.Tensor:
        """Clover's gated attention with SGLang's KV pool and attention backend. x ``[B, T, H]``."""
        B, T, _ = x.shape
        q, gate, k, v = attn._project(x, rope)  # q [B, nh, T, D], gate [B, T, nh·D], k/v [B, T, nkv, D]
        o = radix(q.transpose(1, 2).reshape(B * T, -1), k.reshape(B * T, -1), v.reshape(B * T, -1), forward_batch)
        return attn.o_proj(o.view(B, T, -1) * torch.sigmoid(gate))

    @staticmethod
    def _gdn(mixer, cache, x, commit, block_size: int) -> torch.Tensor:
        """Clover's GDN mixer over one block per row from each row's state: committing rows advance
        their state (in ``cache``, the rows' copy), denoising rows only read it."""
        out = torch.empty_like(x)
        for sel, n_commit in ((commit, block_size), (~commit, 0)):
            idx = sel.nonzero()[:, 0]
            if not len(idx):
                continue
            sub = GDNCache(cache.S[idx], cache.tail[idx])
            out[idx] = mixer.forward_step(x[idx], sub, n_commit, block_size)
            if n_commit:
                cache.S[idx], cache.tail[idx] = sub.S, sub.tail
        return out


EntryClass = CloverForCausalLM
