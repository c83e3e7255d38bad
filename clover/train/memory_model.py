"""Per-rank training memory under FSDP2: what a run of a given shape needs on each GPU.

Static state is counted exactly from the model built on the meta device (no memory): sharded
fp32 master weights, their fp32 gradients and AdamW's two fp32 moments, each 1/world of the
whole. On top come the tensors that live only while a layer runs: the layer's weights gathered
in the compute dtype (the current layer and the one prefetched), its full gradient before the
reduce-scatter (compute dtype, then fp32 for the reduction), the root's embedding and head,
which FSDP2 keeps gathered from forward to backward, and the logits of the scored positions.

Activations are measured, not guessed: one decoder layer of each type is run forward on the
CPU at the run's shape under ``torch.autograd.graph.saved_tensors_hooks``, and the bytes of
every tensor autograd keeps for backward (weights excluded, shared storages counted once) are
added up. Two terms come out: bytes linear in the tokens, and the attention probabilities
that PyTorch's math attention kernel keeps (``[heads, T, 2T]``); GPU kernels (flash,
memory-efficient) keep only a row statistic instead, so ``estimate(gpu_attention=True)``
leaves that term out. With activation checkpointing a layer keeps only its inputs, and one
layer's activations exist at a time (its recomputation during backward).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from clover.model import CloverForBlockDiffusion
from clover.model.config import ATTN, CloverConfig
from clover.model.layers import RotaryEmbedding
from clover.model.model import DecoderLayer

GIB = 1 << 30


@dataclass
class MemoryEstimate:
    """Per-rank bytes; ``peak`` is their sum (the transient parts all coexist at the worst point:
    the last layer's backward with the logits' gradient still alive)."""

    world: int
    params: int  # fp32 master weights, this rank's shards
    grads: int  # fp32 gradients, this rank's shards
    optimizer: int  # AdamW exp_avg + exp_avg_sq, fp32
    gathered: int  # weights and gradients of the layers in flight, root weights kept gathered
    activations: int  # saved for backward over all layers (with checkpointing: inputs + one layer)
    logits: int  # scored positions' logits: compute dtype, fp32 copy, fp32 gradient

    @property
    def peak(self) -> int:
        return self.params + self.grads + self.optimizer + self.gathered + self.activations + self.logits

    def to_dict(self) -> dict:
        return {**asdict(self), "peak": self.peak}


def parameter_counts(config: CloverConfig) -> dict:
    """Exact parameter counts from a meta-device build: ``total``, ``root`` (embedding, head,
    final norm) and ``layers`` (one count per decoder layer)."""
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config)
    layers = [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return {"total": total, "root": total - sum(layers), "layers": layers}


def _saved_bytes(fn, exclude: set[int]) -> int:
    """Bytes of the tensors autograd saves while ``fn()`` runs (storages counted once; storages in
    ``exclude``, the weights, left out)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        s = t.untyped_storage()
        if s.data_ptr() not in exclude:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def measure_layer_activations(
    config: CloverConfig, layer_type: str, tokens: int, dtype: torch.dtype = torch.bfloat16
) -> int:
    """Saved-for-backward bytes of one decoder layer of ``layer_type`` on one sequence of
    ``tokens`` clean tokens with every block also in the noisy stream (the pretraining case:
    ``tokens`` noisy tokens more), in ``dtype``, measured on the CPU."""
    bs = config.block_size
    T = -(-tokens // bs) * bs
    nb = T // bs
    torch.manual_seed(0)
    layer = DecoderLayer(config, layer_type).to(dtype)
    for p in layer.parameters():  # the constructor's empty tensors: any finite values will do
        with torch.no_grad():
            p.normal_(0, config.initializer_range)
    weights = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    rope = RotaryEmbedding(config)
    hc = torch.randn(1, T, config.hidden_size, dtype=dtype, requires_grad=True)
    hn = torch.randn(nb, bs, config.hidden_size, dtype=dtype, requires_grad=True)
    pos = torch.arange(T)
    rope_c = rope(pos[None], dtype)
    rope_n = rope(pos.reshape(nb, bs), dtype)
    valid = torch.ones(1, T, dtype=torch.bool)
    noisy = (hn, rope_n, torch.ones(nb, bs, dtype=torch.bool), torch.zeros(nb, dtype=torch.long), torch.arange(nb))
    return _saved_bytes(lambda: layer(hc, rope_c, valid, bs, noisy), weights)


def activation_terms(config: CloverConfig, dtype: torch.dtype = torch.bfloat16, tokens: tuple[int, int] = (64, 128)):
    """Per layer type, (bytes per token, bytes per token²) from two measured lengths. The
    quadratic term is the math attention kernel's probabilities; it is zero for GDN layers."""
    out = {}
    for t in sorted(set(config.layer_types)):
        a, b = (measure_layer_activations(config, t, n, dtype) for n in tokens)
        n1, n2 = tokens
        if t == ATTN:  # a = α n1 + γ n1², b = α n2 + γ n2²
            quad = (b * n1 - a * n2) / (n1 * n2 * (n2 - n1))
            lin = (a - quad * n1 * n1) / n1
        else:
            quad, lin = 0.0, b / n2
        out[t] = (max(lin, 0.0), max(quad, 0.0))
    return out


def estimate(
    config: CloverConfig,
    world: int,
    tokens_per_rank: int,
    activation_checkpointing: bool,
    dtype: torch.dtype = torch.bfloat16,
    masked_fraction: float = 0.5,
    gpu_attention: bool = True,
    terms: dict | None = None,
) -> MemoryEstimate:
    """Per-rank bytes of one training step: ``tokens_per_rank`` clean tokens per rank (as many
    noisy ones, every block scored), a ``masked_fraction`` of the noisy ones carrying a logit.
    ``terms``: ``activation_terms``' result, measured here when not given."""
    counts = parameter_counts(config)
    P, R, big = counts["total"], counts["root"], max(counts["layers"])
    el = torch.finfo(dtype).bits // 8
    fp32 = 4
    shard = -(-P // world)
    # forward: the current layer's weights and the prefetched next; backward adds the layer's
    # gradient in the compute dtype and its fp32 copy for the reduce-scatter
    per_layer = 2 * big * el + big * el + big * fp32
    root = R * el + R * el + R * fp32  # gathered root weights, their gradient, its fp32 copy
    terms = terms if terms is not None else activation_terms(config, dtype)
    T = tokens_per_rank
    per_type = {t: lin * T + (0.0 if gpu_attention else quad * T * T) for t, (lin, quad) in terms.items()}
    layer_acts = [per_type[t] for t in config.layer_types]
    if activation_checkpointing:
        inputs = 2 * T * config.hidden_size * el  # clean and noisy streams at each layer's input
        acts = len(layer_acts) * inputs + max(layer_acts)
    else:
        acts = sum(layer_acts)
    scored = int(T * masked_fraction)
    logits = scored * config.vocab_size * (el + fp32 + fp32)
    return MemoryEstimate(
        world=world,
        params=shard * fp32,
        grads=shard * fp32,
        optimizer=2 * shard * fp32,
        gathered=int(per_layer + root),
        activations=int(acts),
        logits=int(logits),
    )
