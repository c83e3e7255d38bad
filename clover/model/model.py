"""The Clover block-diffusion model: embeddings, hybrid GDN/attention layers with MoE or dense FFNs, head.

Two ways to run, sharing every weight and layer:

* ``forward_blocks(x0, valid, xt, rows, blks)`` (the training call) and its full-sequence
  form ``forward_train(x0, xt)``: clean stream x0 and noisy stream xt (docs/architecture.md,
  "Training objective") → logits aligned so that row i predicts token i, for the noisy blocks;
* ``prefill`` / ``step``: the incremental API of the engine (docs/architecture.md, "The engine
  contract"). ``step`` takes clean blocks to commit and/or one block to denoise; denoising only
  reads the cache.

The invariant tying them together: for any inputs, ``forward_train`` logits of block b equal
``step(denoise=block b)`` logits after committing the clean prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from clover.model.attention import Attention, row_groups
from clover.model.cache import AttnCache, ModelCache, prefill_blocks
from clover.model.compiled import compile_pass
from clover.model.config import ATTN, CloverConfig
from clover.model.gdn import GatedDeltaNetMixer
from clover.model.layers import RMSNorm, RotaryEmbedding, balance_loss, feed_forward


class DecoderLayer(nn.Module):
    def __init__(self, config: CloverConfig, layer_type: str):
        super().__init__()
        self.layer_type = layer_type
        if layer_type == ATTN:
            self.self_attn = Attention(config)
        else:
            self.linear_attn = GatedDeltaNetMixer(config)
        self.mlp = feed_forward(config)  # MoE, or dense (num_experts = 0): the same call
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def _ffn(self, h: torch.Tensor, real: torch.Tensor | None = None, stats: bool = True):
        """``h`` plus the feed-forward of its norm → (out, routing stats, None if not ``stats``)."""
        y, st = self.mlp(self.post_attention_layernorm(h), real, stats=stats)
        return h + y, st

    def forward(self, hc, rope, valid, block_size, noisy=None):
        """The training call (named ``forward`` so FSDP2 gathers this layer's weights around it).

        Clean stream ``hc [B, T, H]``; ``noisy`` = (hn ``[N, bs, H]``, rope_n, valid_n, rows, blks)
        or None. Returns (clean, noisy or None, routing stats)."""
        xc = self.input_layernorm(hc)
        if noisy is None:
            xn = side = None
        else:
            hn, rope_n, valid_n, rows, blks = noisy
            xn = self.input_layernorm(hn)
        if self.layer_type == ATTN:
            side = None if noisy is None else (xn, rope_n, valid_n, rows, blks)
            yc, yn = self.self_attn.forward_train(xc, rope, valid, block_size, side)
        else:
            side = None if noisy is None else (xn, valid_n, rows, blks)
            yc, yn = self.linear_attn.forward_train(xc, valid, block_size, side)
        B, T, H = hc.shape
        if noisy is None:
            h, stats = self._ffn(hc + yc, valid)
            return h, None, stats
        rc, rn = hc + yc, hn + yn
        both = torch.cat([rc.reshape(-1, H), rn.reshape(-1, H)])  # one feed-forward call for both streams
        y, stats = self.mlp(self.post_attention_layernorm(both), torch.cat([valid.reshape(-1), valid_n.reshape(-1)]))
        # residuals added per stream: fresh tensors, not views of one (FSDP2 warns on views)
        return rc + y[: B * T].reshape(B, T, H), rn + y[B * T :].reshape(hn.shape), stats

    def forward_step(self, h, rope, cache, lengths, n_commit, block_size, top=None, same=None, groups=None):
        """One decoding pass of this layer (``CloverForBlockDiffusion.step``); ``top``, ``same`` and
        ``groups`` as in ``Attention.forward_step``."""
        x = self.input_layernorm(h)
        if self.layer_type == ATTN:
            y = self.self_attn.forward_step(x, rope, cache, lengths, n_commit, block_size, top, same, groups)
        else:
            y = self.linear_attn.forward_step(x, cache, n_commit, block_size)
        return self._ffn(h + y, stats=False)[0]  # decoding: no balance loss, no routing statistics


class CloverBackbone(nn.Module):
    def __init__(self, config: CloverConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, t) for t in config.layer_types)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)


@dataclass
class TrainOutput:
    logits: torch.Tensor | None  # [B, T, V], row i predicts token i (None if return_hidden)
    hidden: torch.Tensor  # [B, T, H] the final-norm hidden state that row i's logit comes from
    aux_loss: torch.Tensor  # MoE load-balancing loss, averaged over layers (0 for a dense model)
    router_stats: torch.Tensor  # [layers, 2, E] summed routing statistics (for data-parallel aux; E = 0 if dense)


class CloverForBlockDiffusion(nn.Module):
    def __init__(self, config: CloverConfig):
        super().__init__()
        self.config = config
        self.compiled_pass = None  # _pass through torch.compile (compile_passes)
        self.model = CloverBackbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.reset_parameters()

    # -- init ------------------------------------------------------------------------------
    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.initializer_range
        for name, p in self.named_parameters():
            if p.is_meta:
                continue
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith(("layernorm.weight", "norm.weight", "q_norm.weight", "k_norm.weight")):
                if "linear_attn.norm" in name:
                    p.fill_(1.0)  # gated norm: plain weight
                else:
                    p.zero_()  # zero-centred RMSNorm
            elif leaf in ("conv_right", "mem_key", "mem_bias"):
                p.zero_()
            elif leaf in ("attn_scale", "mem_gamma", "mem_scale", "dt_bias", "A_log"):
                pass  # set by the mixer's constructor
            elif "conv1d" in name:
                nn.init.normal_(p, 0.0, 0.5)
            else:
                nn.init.normal_(p, 0.0, std)

    # -- shared pieces ---------------------------------------------------------------------
    def _rope(self, positions: torch.Tensor, dtype: torch.dtype):
        return self.model.rotary_emb(positions, dtype)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden ``[..., H]`` → logits ``[..., V]``."""
        return self.lm_head(h)

    def _check_tokens(self, ids: torch.Tensor) -> None:
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size):
            raise ValueError(
                f"token ids must lie in [0, {self.config.vocab_size}), got range [{int(ids.min())}, {int(ids.max())}]"
            )

    # -- training forward ------------------------------------------------------------------
    def forward_blocks(
        self,
        x0: torch.Tensor,
        valid: torch.Tensor | None,
        xt: torch.Tensor,
        rows: torch.Tensor,
        blks: torch.Tensor,
        block_size: int | None = None,
        logits_at: torch.Tensor | None = None,
        return_hidden: bool = False,
    ) -> TrainOutput:
        """The training forward (docs/architecture.md, "Training objective"): the clean stream over
        whole sequences and the noisy stream as a set of blocks.

        x0 ``[B, T]`` clean tokens (positions 0..T-1), valid ``[B, T]`` bool (padding only at
        the end; None = all real). xt ``[N, bs]``: N noisy blocks, block ``blks[n]`` of row
        ``rows[n]`` (a row may appear several times: several masks sharing one clean stream).
        Only blocks that carry loss need to be given: a block left out costs nothing, and a
        block whose noisy tokens equal its clean ones would give the clean stream's output.
        Returns outputs ``[N, bs, ·]`` (row i of a block predicts its token i), or the logits
        ``[M, V]`` at the True entries of ``logits_at [N, bs]`` (no logits if return_hidden).
        """
        bs = self.config.check_block_size(self.config.block_size if block_size is None else block_size)
        self._check_tokens(x0)
        self._check_tokens(xt)
        B, T = x0.shape
        N = xt.shape[0]
        if xt.shape[1] != bs or rows.shape != (N,) or blks.shape != (N,):
            raise ValueError(f"noisy blocks must be [N, {bs}] with rows/blks [N]; got {tuple(xt.shape)}")
        if valid is None:
            valid = torch.ones(B, T, dtype=torch.bool, device=x0.device)
        nb = -(-T // bs)
        if N and (int(blks.min()) < 0 or int(blks.max()) >= nb or int(rows.min()) < 0 or int(rows.max()) >= B):
            raise ValueError(f"noisy block indices out of range (rows < {B}, blocks < {nb})")
        pad = nb * bs - T  # whole blocks; the padding is invalid, so a ragged last block keeps n real tokens
        x0 = F.pad(x0, (0, pad), value=self.config.pad_token_id or 0)
        valid = F.pad(valid, (0, pad))
        valid_n = valid.reshape(B, nb, bs)[rows, blks]  # [N, bs]
        emb = self.model.embed_tokens
        hc, hn = emb(x0), emb(xt)
        rope = self._rope(torch.arange(nb * bs, device=x0.device)[None].expand(B, -1), hc.dtype)
        rope_n = self._rope(blks[:, None] * bs + torch.arange(bs, device=x0.device), hc.dtype)
        stats = []
        for layer in self.model.layers:
            hc, hn, st = layer(hc, rope, valid, bs, (hn, rope_n, valid_n, rows, blks))
            stats.append(st)
        hc, hn = self.model.norm(hc), self.model.norm(hn)
        if self.config.shift_logits:
            # row i reads position i-1: the noisy stream inside the block, the clean stream at
            # the block start (rule 4: the first token of block b comes from block b-1's commit)
            prev = hc[rows, (blks * bs - 1).clamp(min=0)] * (blks > 0)[:, None].to(hc.dtype)  # [N, H]
            hidden = torch.cat([prev[:, None], hn[:, :-1]], 1)
        else:
            hidden = hn
        if return_hidden:
            logits = None
        else:
            logits = self.head(hidden[logits_at] if logits_at is not None else hidden)
        k = self.config.num_experts_per_tok
        aux = torch.stack([balance_loss(st, k) for st in stats]).mean()
        return TrainOutput(logits, hidden, aux, torch.stack(stats))

    def forward_train(
        self,
        x0: torch.Tensor,
        xt: torch.Tensor,
        block_size: int | None = None,
        valid: torch.Tensor | None = None,
        return_hidden: bool = False,
    ) -> TrainOutput:
        """Full-sequence form: x0, xt ``[B, T]`` clean and noisy tokens, every block noisy.
        Returns row-i-predicts-token-i outputs ``[B, T, ·]`` (logits None if return_hidden)."""
        bs = self.config.check_block_size(self.config.block_size if block_size is None else block_size)
        B, T = x0.shape
        nb = -(-T // bs)
        xt_blocks = F.pad(xt, (0, nb * bs - T), value=self.config.pad_token_id or 0).reshape(B * nb, bs)
        rows = torch.arange(B, device=x0.device).repeat_interleave(nb)
        blks = torch.arange(nb, device=x0.device).repeat(B)
        out = self.forward_blocks(x0, valid, xt_blocks, rows, blks, bs, return_hidden=return_hidden)
        hidden = out.hidden.reshape(B, nb * bs, -1)[:, :T]
        logits = None if return_hidden else out.logits.reshape(B, nb * bs, -1)[:, :T]
        return TrainOutput(logits, hidden, out.aux_loss, out.router_stats)

    def forward(self, *args, **kwargs) -> TrainOutput:
        """``forward_blocks`` (so data-parallel wrappers such as FSDP2 hook the training call)."""
        return self.forward_blocks(*args, **kwargs)

    # -- incremental API -------------------------------------------------------------------
    def new_cache(self, batch: int = 1, capacity: int = 0) -> ModelCache:
        """An empty cache; ``capacity`` attention slots per row allocated up front (it grows past them)."""
        p = self.model.embed_tokens.weight
        return ModelCache.empty(self.config, batch, p.device, p.dtype, capacity)

    def step(
        self,
        cache: ModelCache,
        commit: torch.Tensor | None = None,
        denoise: torch.Tensor | None = None,
        block_size: int | None = None,
    ) -> torch.Tensor | None:
        """One forward over ``commit [B, n_c]`` (clean, complete blocks, written to ``cache``)
        followed by ``denoise [B, n_d]`` (one block, read-only). Both start where the cache ends.

        Returns the denoise block's logits ``[B, n_d, V]`` aligned so row i predicts token i,
        or None when nothing is denoised. Committing with denoise=None is a plain commit;
        both at once is the fused commit + first denoise pass of the next block.
        """
        bs = self.config.check_block_size(self.config.block_size if block_size is None else block_size)
        parts = [t for t in (commit, denoise) if t is not None]
        if not parts:
            raise ValueError("step needs tokens to commit or to denoise")
        x = torch.cat(parts, 1)
        self._check_tokens(x)
        n_c = 0 if commit is None else commit.shape[1]
        n_d = 0 if denoise is None else denoise.shape[1]
        if n_c % bs and n_d:
            raise ValueError(f"commit of {n_c} tokens is not whole blocks of {bs}; cannot denoise after it")
        if n_d > bs:
            raise ValueError(f"denoise block of {n_d} tokens exceeds block size {bs}")
        lengths = cache.lengths.tolist()  # the pass's one read of the device
        if any(n % bs for n in lengths):
            raise ValueError(f"cache lengths {lengths} are not block boundaries of {bs}")
        top, same = max(lengths, default=0), len(set(lengths)) <= 1
        for c in cache.layers:
            if isinstance(c, AttnCache):
                c.reserve(top + x.shape[1])  # the pass writes in place and never grows a cache
        # the compiled pass (``compile_passes``) takes the decoding passes, at most one block
        # committed; longer commits (prompts) run eager rather than compiling a shape per length
        if self.compiled_pass is not None and n_c <= bs:
            return self.compiled_pass(self, cache, x, n_c, n_d, bs, top, same)
        groups = None if same else row_groups(lengths, x.shape[1], x.device)
        return CloverForBlockDiffusion._pass(self, cache, x, n_c, n_d, bs, top, same, groups)

    def _pass(
        self, cache: ModelCache, x, n_c: int, n_d: int, bs: int, top: int, same: bool, groups=None
    ) -> torch.Tensor | None:
        """``step``'s forward once its checks are done: no host sync, the attention caches already
        large enough. ``top`` = max(cache.lengths), ``same`` = all lengths equal, ``groups`` rows
        that attend apart (``attention.row_groups``)."""
        T = x.shape[1]
        h = self.model.embed_tokens(x)
        pos = cache.lengths[:, None] + torch.arange(T, device=x.device)
        rope = self._rope(pos, h.dtype)
        for layer, c in zip(self.model.layers, cache.layers):
            h = layer.forward_step(h, rope, c, cache.lengths, n_c, bs, top, same, groups)
        h = self.model.norm(h)
        if n_c:
            cache.lengths = cache.lengths + n_c
            if self.config.shift_logits:
                cache.last_logits = self.head(h[:, n_c - 1])
        if not n_d:
            return None
        raw = self.head(h[:, n_c:])
        if not self.config.shift_logits:
            return raw
        first = cache.last_logits if cache.last_logits is not None else torch.zeros_like(raw[:, 0])
        return torch.cat([first[:, None].to(raw.dtype), raw[:, :-1]], 1)

    def compile_passes(self, enabled: bool = True, mode: str | None = None, backend: str = "inductor") -> None:
        """Decoding passes (``step`` with at most one block committed) through ``torch.compile``
        (``clover.model.compiled``); ``enabled=False`` goes back to eager. ``mode`` and ``backend``
        are torch.compile's (mode "reduce-overhead": CUDA graphs)."""
        self.compiled_pass = compile_pass(CloverForBlockDiffusion._pass, mode, backend) if enabled else None

    def prefill(
        self, prompt: torch.Tensor, block_size: int | None = None, cache: ModelCache | None = None
    ) -> tuple[ModelCache, torch.Tensor]:
        """Commit the prompt's complete blocks (rule 1). ``prompt [B, P]`` (equal lengths).

        Returns the cache and the prompt's tail ``[B, P mod bs]``, which lives inside the first
        generation block.
        """
        return prefill_blocks(self, prompt, block_size, cache)

    def num_parameters(self) -> dict:
        """Total and per-token active parameter counts (embeddings included, head counted once if tied)."""
        c = self.config
        total = sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())
        expert = 3 * c.hidden_size * c.moe_intermediate_size
        inactive = c.num_hidden_layers * max(c.num_experts - c.num_experts_per_tok, 0) * expert  # dense: 0
        return {"total_params": total, "active_params": total - inactive}
