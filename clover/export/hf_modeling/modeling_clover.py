"""A Clover block-diffusion language model for Hugging Face transformers (``trust_remote_code``).

Shipped beside exported weights by ``clover export hf``; it needs torch and transformers only.
This file with layers_clover.py and gdn_clover.py is the one allowed twin of Clover's own model
code (clover/model/): it has to stand alone, so it restates the same model in plain PyTorch (no
fused kernels), with the same parameter names. Clover's export tests (tests/export/) compare its
logits and its greedy decoding with Clover's own, which keeps the two in step.

The model: a stack of decoder layers, each a token mixer and a feed-forward (a mixture of
experts, or a dense SwiGLU MLP when ``num_experts`` is 0).
A ``linear_attention`` layer is the Clover GDN mixer (history compressed into a gated-delta-rule
state ``S`` written by whole blocks; the current block mixed by a softmax over its own tokens
plus one memory slot that reads ``S``); a ``full_attention`` layer is gated grouped-query
attention, block-causal. Text is cut into blocks of ``block_size`` positions by absolute
position; a block sees every earlier block and itself in both directions.

Two ways to run it, as in Clover:

* ``forward(input_ids, noisy_input_ids=None)``: the training forward. The clean stream
  ``input_ids`` supplies the history; the noisy stream (masked copies of the blocks, by default
  the clean tokens themselves) is read block by block against it. Logits are aligned so that
  row i predicts token i (no shift is left to the caller);
* ``step(cache, commit, denoise)``: cached block decoding, what ``generate`` (generation_clover.py)
  runs: clean blocks are committed into a ``CloverCache``, one block is denoised reading it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput

from .configuration_clover import ATTN, CloverConfig
from .gdn_clover import GatedDeltaNetMixer, acc_dtype, shift
from .generation_clover import BlockDiffusionGenerationMixin
from .layers_clover import MLP, Attention, Experts, MoE, RMSNorm, Router, rope


class CloverDecoderLayer(nn.Module):
    def __init__(self, config: CloverConfig, layer_type: str):
        super().__init__()
        self.layer_type = layer_type
        if layer_type == ATTN:
            self.self_attn = Attention(config)
        else:
            self.linear_attn = GatedDeltaNetMixer(config)
        # a mixture of experts, or a dense SwiGLU feed-forward when num_experts is 0
        self.mlp = MoE(config) if config.num_experts else MLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.post_attention_layernorm(h))

    def forward(self, hc, rc, valid, block_size, hn=None, rn=None):
        """The training forward of one layer: clean ``hc [B, T, H]`` and noisy ``hn`` (or None)."""
        xc = self.input_layernorm(hc)
        xn = None if hn is None else self.input_layernorm(hn)
        if self.layer_type == ATTN:
            yc, yn = self.self_attn.forward_train(xc, rc, valid, block_size, xn, rn)
        else:
            yc, yn = self.linear_attn.forward_train(xc, valid, block_size, xn)
        return self.ffn(hc + yc), None if hn is None else self.ffn(hn + yn)

    def forward_step(self, h, r, cache: dict, n_commit: int, block_size: int) -> torch.Tensor:
        x = self.input_layernorm(h)
        if self.layer_type == ATTN:
            y = self.self_attn.forward_step(x, r, cache, n_commit, block_size)
        else:
            y = self.linear_attn.forward_step(x, cache, n_commit, block_size)
        return self.ffn(h + y)


@dataclass
class CloverCache:
    """Complete committed blocks only: per attention layer the keys and values (``k``, ``v``
    ``[B, L, nkv, D]``), per GDN layer the state ``S [B, Hv, dk, dv]`` after the last committed
    block and the conv ``tail [B, K-1, C]`` (its last K-1 clean conv inputs); ``last_logits
    [B, V]``: the clean logit at the last committed position (it predicts the next block's first
    token when ``shift_logits``)."""

    layers: list[dict]
    length: int = 0
    last_logits: torch.Tensor | None = None


class CloverPreTrainedModel(PreTrainedModel):
    config_class = CloverConfig
    base_model_prefix = "model"
    _no_split_modules = ["CloverDecoderLayer"]
    supports_gradient_checkpointing = False

    def check_block_size(self, block_size: int | None) -> int:
        bs = self.config.block_size if block_size is None else block_size
        if not isinstance(bs, int) or bs <= 0 or bs > self.config.max_block_size:
            raise ValueError(f"block_size must be an integer in [1, {self.config.max_block_size}], got {bs!r}")
        return bs

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Fresh weights (a model built from a config alone); loaded checkpoints overwrite them."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, std)
        elif isinstance(module, Experts):
            module.gate_up_proj.normal_(0.0, std)
            module.down_proj.normal_(0.0, std)
        elif isinstance(module, Router):
            module.weight.normal_(0.0, std)


class CloverModel(CloverPreTrainedModel):
    def __init__(self, config: CloverConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(CloverDecoderLayer(config, t) for t in config.layer_types)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def streams(self, input_ids, attention_mask=None, noisy_input_ids=None, block_size=None):
        """The training forward's layers: the clean stream ``input_ids [B, T]`` and the noisy one
        (``noisy_input_ids``, or None), padded to whole blocks, through every layer and the final
        norm. Returns (clean ``[B, T', H]``, noisy or None, T' = T rounded up to whole blocks)."""
        bs = self.check_block_size(block_size)
        B, T = input_ids.shape
        valid = torch.ones(B, T, dtype=torch.bool, device=input_ids.device)
        if attention_mask is not None:
            valid = attention_mask.bool()
            if bool((valid[:, 1:] & ~valid[:, :-1]).any()):
                raise ValueError("attention_mask: padding must come at the end of each row (right padding)")
        nb = -(-T // bs)
        pad = nb * bs - T  # whole blocks; the padding is not valid, so a ragged last block counts its real tokens
        fill = self.config.pad_token_id or 0
        x0, valid = F.pad(input_ids, (0, pad), value=fill), F.pad(valid, (0, pad))
        hc = self.embed_tokens(x0)
        hn = None if noisy_input_ids is None else self.embed_tokens(F.pad(noisy_input_ids, (0, pad), value=fill))
        r = rope(self.config, torch.arange(nb * bs, device=x0.device)[None].expand(B, -1), hc.dtype)
        for layer in self.layers:
            hc, hn = layer(hc, r, valid, bs, hn, r)
        return self.norm(hc), None if hn is None else self.norm(hn), nb * bs

    def forward(self, input_ids, attention_mask=None, noisy_input_ids=None, block_size=None, **kwargs):
        """The final hidden states ``[B, T, H]`` of the noisy stream (of the clean one when
        ``noisy_input_ids`` is None), position i at row i (see ``streams``)."""
        hc, hn, _ = self.streams(input_ids, attention_mask, noisy_input_ids, block_size)
        return BaseModelOutput(last_hidden_state=(hc if hn is None else hn)[:, : input_ids.shape[1]])


class CloverForCausalLM(BlockDiffusionGenerationMixin, CloverPreTrainedModel, GenerationMixin):
    """The Clover model with its LM head: ``forward`` (the training forward), ``step`` (cached
    block decoding) and ``generate`` (block diffusion, generation_clover.py, in place of
    transformers' own; ``GenerationMixin`` stays a base so the generation config is loaded)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: CloverConfig):
        super().__init__(config)
        self.model = CloverModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        noisy_input_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        block_size: int | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> CausalLMOutput | tuple:
        """The training forward. ``input_ids [B, T]``: the clean tokens (positions 0..T-1);
        ``attention_mask [B, T]``: 1 for real tokens, padding only at the end of a row (None: all
        real); ``noisy_input_ids [B, T]``: the same text with some tokens replaced by
        ``config.mask_token_id`` (None: the clean tokens). Every block of the noisy stream is read
        against the clean blocks before it and bidirectionally within itself.

        Returns logits ``[B, T, V]`` where row i predicts token i of the text (no shift left to
        do), and, with ``labels [B, T]`` (the target token per position, -100 where no loss), the
        mean cross-entropy over the positions with a target."""
        bs = self.check_block_size(block_size)
        T = input_ids.shape[1]
        hc, hn, width = self.model.streams(input_ids, attention_mask, noisy_input_ids, bs)
        hn = hc if hn is None else hn
        if self.config.shift_logits:
            # row i reads position i-1: the noisy stream inside a block, the clean stream at a block's
            # start (the first token of block b is predicted by the last clean token of block b-1)
            start = (torch.arange(width, device=hc.device) % bs == 0)[None, :, None]
            hn = torch.where(start, shift(hc, 1), shift(hn, 1))
        logits = self.lm_head(hn[:, :T])
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        if return_dict is False:
            return (logits,) if loss is None else (loss, logits)
        return CausalLMOutput(loss=loss, logits=logits)

    # -- cached block decoding --------------------------------------------------------------
    def new_cache(self, batch: int = 1) -> CloverCache:
        """An empty cache for ``batch`` rows that decode in step (equal lengths)."""
        c, p = self.config, self.lm_head.weight
        layers = []
        for t in c.layer_types:
            if t == ATTN:
                z = p.new_zeros(batch, 0, c.num_key_value_heads, c.head_dim)
                layers.append({"k": z, "v": z.clone()})
            else:
                conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim
                conv_dim += c.linear_num_value_heads * c.linear_value_head_dim
                shape = (batch, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
                S = p.new_zeros(shape, dtype=acc_dtype(p.dtype))
                layers.append({"S": S, "tail": p.new_zeros(batch, c.linear_conv_kernel_dim - 1, conv_dim)})
        return CloverCache(layers)

    @torch.no_grad()
    def step(
        self,
        cache: CloverCache,
        commit: torch.Tensor | None = None,
        denoise: torch.Tensor | None = None,
        block_size: int | None = None,
    ) -> torch.Tensor | None:
        """One forward over ``commit [B, n_c]`` (clean whole blocks, written into ``cache``) then
        ``denoise [B, n_d]`` (one block, read-only), both starting where the cache ends. Returns the
        denoise block's logits ``[B, n_d, V]`` (row i predicts token i), or None."""
        bs = self.check_block_size(block_size)
        x = torch.cat([t for t in (commit, denoise) if t is not None], 1)
        n_c = 0 if commit is None else commit.shape[1]
        n_d = x.shape[1] - n_c
        if n_c % bs or cache.length % bs or n_d > bs:
            raise ValueError(f"commit whole blocks of {bs} after whole blocks, and denoise at most one block")
        h = self.model.embed_tokens(x)
        r = rope(
            self.config, (cache.length + torch.arange(x.shape[1], device=x.device))[None].expand(len(x), -1), h.dtype
        )
        for layer, c in zip(self.model.layers, cache.layers):
            h = layer.forward_step(h, r, c, n_c, bs)
        h = self.model.norm(h)
        if n_c:
            cache.length += n_c
            if self.config.shift_logits:
                cache.last_logits = self.lm_head(h[:, n_c - 1])
        if not n_d:
            return None
        raw = self.lm_head(h[:, n_c:])
        if not self.config.shift_logits:
            return raw
        first = cache.last_logits if cache.last_logits is not None else torch.zeros_like(raw[:, 0])
        return torch.cat([first[:, None].to(raw.dtype), raw[:, :-1]], 1)
