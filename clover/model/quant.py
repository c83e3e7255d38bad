"""Weight-only quantization (docs/quantization.md): group-wise round-to-nearest int8 (symmetric)
or int4 (asymmetric) projection weights, computed with PyTorch's CPU weight-only kernels.

Quantized: attention q/k/v/o, the GDN's in_proj_qkv / in_proj_z / out_proj, the shared expert's
three projections and the packed experts (``gate_up_proj``, ``down_proj``), or a dense model's
MLP projections (``mlp.gate_proj`` / ``up_proj`` / ``down_proj``). Full precision:
embeddings and head, norms, the router, every gate (shared_expert_gate, the GDN's in_proj_a/b),
the conv and Clover's own small parameters.

A quantized weight ``W [N, K]`` (or ``[E, N, K]`` for packed experts) is stored as three tensors
that replace it (``<module>.qweight``, ``.scales``, ``.zeros``), in groups of ``g`` consecutive
inputs of one output row (``g`` = the header's group size; a whole row when it is 0 or the row is
no longer than it):

* int8: ``W = q · scale``, q int8 in [-127, 127] (``qweight`` int8 ``[N, K]``), scales bf16 ``[N, K/g]``;
* int4: ``W = (q − 8) · scale + zero``, q in [0, 15], two per byte (``qweight`` uint8
  ``[N, K/2]``, low nibble = even input column), scales and zeros bf16 ``[N, K/g]``.

The kernels (``torch.ops.aten._weight_int8pack_mm``, ``_weight_int4pack_mm_for_cpu``) take bf16
activations: a quantized layer rounds its input to bf16, multiplies with fp32 accumulation and
returns the result in the input's dtype. Where a kernel cannot run (not on CPU, fp64 inputs, an
int4 shape the kernel refuses: output rows not a multiple of 16, or a group not 32/64/128/256;
an int8 group not a multiple of 16) the layer runs its reference: dequantize, then an ordinary
matmul in the input's dtype.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from clover.model.config import QUANT_SCHEMES, CloverConfig, quantization_problems
from clover.model.model import CloverForBlockDiffusion

BITS = tuple(QUANT_SCHEMES)
DEFAULT_GROUP_SIZE = {8: 0, 4: 128}  # int8: one scale per row, the int8 kernel's own layout
INT4_KERNEL_GROUPS = (32, 64, 128, 256)
_EPS = 1e-8  # smallest scale: a constant group keeps a finite, nonzero scale
_KERNELS = [True]  # reference_only() switches the kernels off (tests)

# the Linear layers that are quantized, by their name inside a decoder layer; plus packed experts
LINEAR_SUFFIXES = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "linear_attn.in_proj_qkv",
    "linear_attn.in_proj_z",
    "linear_attn.out_proj",
    "mlp.shared_expert.gate_proj",
    "mlp.shared_expert.up_proj",
    "mlp.shared_expert.down_proj",
    "mlp.gate_proj",  # the dense feed-forward (num_experts = 0)
    "mlp.up_proj",
    "mlp.down_proj",
)
EXPERT_SUFFIXES = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


class QuantError(ValueError):
    """A quantization setting or header that cannot describe this model."""


@contextlib.contextmanager
def reference_only():
    """Within the block, every quantized layer runs its reference (dequantize, then matmul)."""
    _KERNELS.append(False)
    try:
        yield
    finally:
        _KERNELS.pop()


def _has_kernels() -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm") and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


def layer_group(in_features: int, group_size: int, name: str = "weight") -> int:
    """The group length of a layer with ``in_features`` inputs: ``group_size``, or the whole row
    when ``group_size`` is 0 or the row is no longer than it (per-channel fallback for small
    dims). A group size that does not divide a longer row is a QuantError naming the layer."""
    if group_size == 0 or in_features <= group_size:
        return in_features
    if in_features % group_size:
        raise QuantError(
            f"{name}: group size {group_size} does not divide its input dim {in_features}; "
            "pick a group size that divides every quantized layer's input dim (or 0: one group per row)"
        )
    return group_size


# -- tensors ---------------------------------------------------------------------------------
def quantize_tensor(w: torch.Tensor, bits: int, group: int) -> dict[str, torch.Tensor]:
    """Round-to-nearest quantization of ``w [..., N, K]`` in groups of ``group`` inputs →
    ``{"qweight", "scales"[, "zeros"]}`` in the stored layout (module docstring). Scales and zeros
    are rounded to bf16 first, and q is computed against the rounded values."""
    wf = w.detach().float()
    *lead, N, K = wf.shape
    if K % group:
        raise QuantError(f"group {group} does not divide the input dim {K}")
    g = wf.reshape(*lead, N, K // group, group)
    if bits == 8:
        s = (g.abs().amax(-1) / 127).clamp(min=_EPS).to(torch.bfloat16)
        q = torch.round(g / s.float()[..., None]).clamp(-127, 127).to(torch.int8)
        return {"qweight": q.reshape(*lead, N, K), "scales": s}
    if bits != 4:
        raise QuantError(f"bits must be 8 or 4, got {bits!r}")
    if K % 2:
        raise QuantError(f"int4 packs two inputs per byte: the input dim {K} must be even")
    lo, hi = g.amin(-1), g.amax(-1)
    s = ((hi - lo) / 15).clamp(min=_EPS).to(torch.bfloat16)
    z = (lo + 8 * s.float()).to(torch.bfloat16)
    q = torch.round((g - z.float()[..., None]) / s.float()[..., None] + 8).clamp(0, 15).to(torch.uint8)
    q = q.reshape(*lead, N, K)
    return {"qweight": q[..., 0::2] | (q[..., 1::2] << 4), "scales": s, "zeros": z}


def unpack_int4(qweight: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., N, K/2]`` → the 4-bit values ``[..., N, K]`` (uint8 0..15), low nibble first."""
    return torch.stack([qweight & 15, qweight >> 4], -1).reshape(*qweight.shape[:-1], -1)


def dequantize_tensor(
    qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, bits: int, dtype=torch.float32
) -> torch.Tensor:
    """The stored tensors → the weight ``[..., N, K]`` they stand for, in ``dtype``."""
    q = qweight.to(dtype) if bits == 8 else unpack_int4(qweight).to(dtype) - 8
    *lead, N, K = q.shape
    ng = scales.shape[-1]
    w = q.reshape(*lead, N, ng, K // ng) * scales.to(dtype)[..., None]
    if bits == 4:
        w = w + zeros.to(dtype)[..., None]
    return w.reshape(*lead, N, K)


# -- the modules -----------------------------------------------------------------------------
class QuantWeight(nn.Module):
    """A quantized weight ``[*lead, N, K]``: a Linear's ``[N, K]`` (``forward(x)`` = x @ Wᵀ) or
    packed experts' ``[E, N, K]`` (``linear(x, e)`` = x @ W[e]ᵀ). Buffers in the stored layout;
    ``prepare()`` builds the CPU kernels' layout and then drops the stored one when it would be a
    second copy (int4, grouped int8): ``state_dict()`` rebuilds it, bit for bit."""

    def __init__(self, shape: tuple[int, ...], bits: int, group: int, device=None):
        super().__init__()
        *lead, N, K = shape
        if bits not in BITS:
            raise QuantError(f"bits must be 8 or 4, got {bits!r}")
        if K % group:
            raise QuantError(f"group {group} does not divide the input dim {K}")
        self.lead, self.out_features, self.in_features = tuple(lead), N, K
        self.bits, self.group = bits, group
        ng = K // group
        if bits == 8:
            q = torch.empty(*lead, N, K, dtype=torch.int8, device=device)
        else:
            q = torch.empty(*lead, N, K // 2, dtype=torch.uint8, device=device)
        self.register_buffer("qweight", q)
        self.register_buffer("scales", torch.empty(*lead, N, ng, dtype=torch.bfloat16, device=device))
        if bits == 4:
            self.register_buffer("zeros", torch.empty(*lead, N, ng, dtype=torch.bfloat16, device=device))
        else:
            self.zeros = None
        self._kernel: list | None = None  # per expert (one entry for a Linear): the kernel's tensors
        self._dropped = False  # qweight lives only in the kernel layout (rebuilt by state_dict)

    @classmethod
    def from_float(cls, w: torch.Tensor, bits: int, group: int) -> QuantWeight:
        m = cls(tuple(w.shape), bits, group, device="cpu")
        for k, v in quantize_tensor(w, bits, group).items():
            setattr(m, k, v)
        return m.prepare()

    def extra_repr(self) -> str:
        return f"shape={(*self.lead, self.out_features, self.in_features)}, bits={self.bits}, group={self.group}"

    @property
    def n_weights(self) -> int:
        return self.lead[0] if self.lead else 1

    # -- kernel layout -------------------------------------------------------------------
    def kernel_ok(self) -> bool:
        """Whether the CPU kernel takes this weight (else every call runs the reference)."""
        if not _has_kernels() or self.qweight.device.type != "cpu" or self.qweight.is_meta:
            return False
        if self.bits == 4:
            return self.out_features % 16 == 0 and self.group in INT4_KERNEL_GROUPS
        # each int8 call reads G inputs; with G not a multiple of 16 its vector loop returns wrong
        # sums (measured: G = 8, 24, 40, 72) and can read past the buffer
        return self.group % 16 == 0

    def prepare(self) -> QuantWeight:
        """Build the kernel layout from the stored tensors (after loading or quantizing)."""
        if self._dropped:
            return self
        self._kernel = None
        if not self.kernel_ok():
            return self
        ng = self.in_features // self.group
        if self.bits == 8 and ng == 1:
            # the int8 kernel reads the stored tensors in place, and its vector loads may run past
            # a tensor's end: fine in a heap block, a crash at the end of a memory-mapped
            # safetensors file (seen), so the kernel gets its own copies
            self.qweight, self.scales = self.qweight.clone(), self.scales.clone()
        q = self.qweight.reshape(-1, *self.qweight.shape[-2:])
        s = self.scales.reshape(-1, self.out_features, ng)
        entries = []
        for e in range(q.shape[0]):
            if self.bits == 8 and ng == 1:
                entries.append([(q[e], s[e, :, 0])])  # views: the stored tensors are the kernel's
            elif self.bits == 8:
                G = self.group
                entries.append(
                    [(q[e, :, j * G : (j + 1) * G].contiguous(), s[e, :, j].contiguous()) for j in range(ng)]
                )
            else:
                z = self.zeros.reshape(-1, self.out_features, ng)
                vals = unpack_int4(q[e]).to(torch.int32)
                packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(vals, 1)
                sz = torch.stack([s[e], z[e]], -1).transpose(0, 1).contiguous()  # [ng, N, 2]
                entries.append((packed, sz))
        self._kernel = entries
        if not (self.bits == 8 and ng == 1):  # the kernel holds its own copy: keep only that one
            self.qweight = torch.empty(0, dtype=self.qweight.dtype)
            self._dropped = True
        return self

    def stored_qweight(self) -> torch.Tensor:
        """``qweight`` in the stored layout (rebuilt from the kernel's when it was dropped)."""
        if not self._dropped:
            return self.qweight
        out = []
        for ent in self._kernel:
            if self.bits == 8:
                out.append(torch.cat([c for c, _ in ent], 1))
            else:
                out.append(_unpack_int4_kernel(ent[0], self.out_features, self.in_features))
        q = torch.stack(out)
        return q.reshape(*self.lead, *q.shape[1:]) if self.lead else q[0]

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self._dropped:
            destination[prefix + "qweight"] = self.stored_qweight()

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        for k in ("scales", "zeros"):  # model.double() / .float(): the stored scales stay bf16
            t = getattr(self, k)
            if t is not None and t.is_floating_point() and t.dtype != torch.bfloat16:
                setattr(self, k, t.to(torch.bfloat16))
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        self._kernel, self._dropped = None, False  # prepare() again after loading
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- compute -------------------------------------------------------------------------
    def dequantize(self, dtype=torch.float32, e: int | None = None) -> torch.Tensor:
        """The weight (expert ``e``'s when given) as a float tensor."""
        q, s, z = self.stored_qweight(), self.scales, self.zeros
        if e is not None:
            q, s, z = q[e], s[e], None if z is None else z[e]
        return dequantize_tensor(q, s, z, self.bits, dtype)

    def reference(self, x: torch.Tensor, e: int | None = None) -> torch.Tensor:
        """The slow reference: dequantize, then an ordinary matmul in x's dtype."""
        return F.linear(x, self.dequantize(x.dtype, e))

    def linear(self, x: torch.Tensor, e: int | None = None) -> torch.Tensor:
        """``x [..., K]`` @ W[e]ᵀ → ``[..., N]`` with the kernel where it runs (module docstring)."""
        if (e is None) != (not self.lead):
            raise ValueError("packed experts need an expert index e; a Linear takes none")
        use = self._kernel is not None and _KERNELS[-1] and x.device.type == "cpu" and x.dtype != torch.float64
        use = use and x.numel() > 0
        if not use:
            return self.reference(x, e)
        ent = self._kernel[0 if e is None else e]
        shape = x.shape
        xb = x.reshape(-1, self.in_features).to(torch.bfloat16)
        if self.bits == 4:
            packed, sz = ent
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(xb, packed, self.group, sz)
        elif len(ent) == 1:
            y = torch.ops.aten._weight_int8pack_mm(xb, *ent[0])
        else:  # grouped int8: one kernel call per group of inputs, summed in fp32
            G = self.group
            y = torch.ops.aten._weight_int8pack_mm(xb[:, :G].contiguous(), *ent[0]).float()
            for j in range(1, len(ent)):
                y += torch.ops.aten._weight_int8pack_mm(xb[:, j * G : (j + 1) * G].contiguous(), *ent[j])
        return y.to(x.dtype).reshape(*shape[:-1], self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def nbytes(self) -> int:
        """Bytes of the stored tensors (what the checkpoint holds for this weight)."""
        n = self.out_features * self.in_features * self.bits // 8 * self.n_weights
        return n + sum(t.numel() * t.element_size() for t in (self.scales, self.zeros) if t is not None)


def _unpack_int4_kernel(packed: torch.Tensor, N: int, K: int) -> torch.Tensor:
    """The stored uint8 ``[N, K/2]`` of a weight in the CPU int4 kernel's packing: the kernel times
    identity rows, with scale 1 and zero 8 (so it returns q itself: small integers, exact)."""
    G = next(g for g in (256, 128, 64, 32) if K % g == 0)
    sz = torch.zeros(K // G, N, 2, dtype=torch.bfloat16)
    sz[..., 0], sz[..., 1] = 1, 8
    cols = []
    for i in range(0, K, 256):
        r = min(256, K - i)
        eye = torch.zeros(r, K, dtype=torch.bfloat16)
        eye[torch.arange(r), i + torch.arange(r)] = 1
        cols.append(torch.ops.aten._weight_int4pack_mm_for_cpu(eye, packed, G, sz))
    q = torch.cat(cols).t().round().to(torch.uint8)  # [N, K]
    return q[:, 0::2] | (q[:, 1::2] << 4)


class QuantExperts(nn.Module):
    """Packed experts with quantized ``gate_up_proj [E, 2I, H]`` and ``down_proj [E, H, I]``: the
    same ``run`` / ``run_all`` as ``layers.Experts``, one quantized matmul per expert."""

    def __init__(self, gate_up_proj: QuantWeight, down_proj: QuantWeight):
        super().__init__()
        self.gate_up_proj, self.down_proj = gate_up_proj, down_proj

    def run(self, e: int, h: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj.linear(h, e).chunk(2, -1)
        return self.down_proj.linear(F.silu(gate) * up, e)

    def run_all(self, h: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.run(e, h) for e in range(self.gate_up_proj.n_weights)])


# -- whole models ----------------------------------------------------------------------------
def quantizable(model) -> list[str]:
    """The names of the weights that quantization replaces, in model order: Linear modules and
    the packed experts' two tensors (the header's ``modules`` list)."""
    names = []
    for i, layer in enumerate(model.model.layers):
        mods = dict(layer.named_modules())
        for suf in LINEAR_SUFFIXES:
            if suf in mods:
                names.append(f"model.layers.{i}.{suf}")
        if "mlp.experts" in mods:
            names += [f"model.layers.{i}.{suf}" for suf in EXPERT_SUFFIXES]
    return names


def _weight_shape(model, name: str) -> tuple[int, ...]:
    owner, leaf = name.rsplit(".", 1)
    mod = model.get_submodule(owner)
    if leaf in ("gate_up_proj", "down_proj") and owner.endswith("mlp.experts"):
        t = getattr(mod, leaf)
        return tuple(t.shape) if isinstance(t, torch.Tensor) else (*t.lead, t.out_features, t.in_features)
    lin = getattr(mod, leaf)
    return (lin.out_features, lin.in_features)


def check_header(model, header: dict) -> None:
    """A quantization header against the (float) model it is to be applied to: every module it
    names must be one quantization replaces, and the group size must fit each one."""
    problems = quantization_problems(header)
    if problems:
        raise QuantError("; ".join(problems))
    allowed = set(quantizable(model))
    bad = [m for m in header["modules"] if m not in allowed]
    if bad:
        raise QuantError(f"quantization header names {len(bad)} modules this model cannot quantize (e.g. {bad[:3]})")
    if len(set(header["modules"])) != len(header["modules"]):
        raise QuantError("quantization header lists a module twice")
    listed = set(header["modules"])
    for name in header["modules"]:
        if name.endswith(EXPERT_SUFFIXES):
            pair = name.rsplit(".", 1)[0] + (".down_proj" if name.endswith("gate_up_proj") else ".gate_up_proj")
            if pair not in listed:
                raise QuantError(f"quantization header lists {name} without {pair}: a layer's experts go together")
    for name in header["modules"]:
        shape = _weight_shape(model, name)
        layer_group(shape[-1], header["group_size"], name)
        if header["bits"] == 4 and shape[-1] % 2:
            raise QuantError(f"{name}: int4 needs an even input dim, got {shape[-1]}")


def _replace(model, name: str, qw: QuantWeight) -> None:
    owner, leaf = name.rsplit(".", 1)
    if owner.endswith("mlp.experts"):  # check_header: a layer's two expert tensors go together
        moe = model.get_submodule(owner.rsplit(".", 1)[0])
        if not isinstance(moe.experts, QuantExperts):
            moe.experts = QuantExperts(qw, qw)  # the other tensor's turn comes next
        setattr(moe.experts, leaf, qw)
        return
    setattr(model.get_submodule(owner), leaf, qw)


def apply_structure(model, header: dict) -> None:
    """Swap the modules a header names for empty quantized ones (on the model's device, meta
    included), ready for ``load_state_dict``; the header is checked first."""
    check_header(model, header)
    device = model.model.embed_tokens.weight.device
    shapes = {name: _weight_shape(model, name) for name in header["modules"]}  # all before replacing
    for name, shape in shapes.items():
        group = layer_group(shape[-1], header["group_size"], name)
        _replace(model, name, QuantWeight(shape, header["bits"], group, device=device))


def make_header(bits: int, group_size: int, modules: list[str]) -> dict:
    return {"bits": bits, "group_size": group_size, "scheme": QUANT_SCHEMES[bits], "modules": list(modules)}


@torch.no_grad()
def quantize_model(model, bits: int, group_size: int | None = None, modules: list[str] | None = None):
    """Quantize a full-precision model in place (default: every quantizable weight) and record
    the header in ``model.config.quantization``. Returns the model."""
    if model.config.quantization is not None:
        raise QuantError("this model is already quantized")
    group_size = DEFAULT_GROUP_SIZE[bits] if group_size is None else group_size
    header = make_header(bits, group_size, quantizable(model) if modules is None else modules)
    check_header(model, header)
    sources = {}
    for name in header["modules"]:  # all first: replacing experts swaps their whole module
        owner, leaf = name.rsplit(".", 1)
        src = getattr(model.get_submodule(owner), leaf)
        sources[name] = src if isinstance(src, torch.Tensor) else src.weight
    for name, w in sources.items():
        group = layer_group(w.shape[-1], group_size, name)
        _replace(model, name, QuantWeight.from_float(w.detach().cpu(), bits, group))
    model.config = model.config.replace(quantization=header)
    return model


@torch.no_grad()
def dequantize_model(model, dtype=torch.float32):
    """A full-precision twin of a quantized model: a new model whose weights are the quantized
    ones dequantized (``dtype``), with no quantization header."""
    config = model.config.replace(quantization=None)
    twin = CloverForBlockDiffusion(config).to(dtype)
    state = {}
    for k, v in model.state_dict().items():
        state[k] = v
    for name in model.config.quantization["modules"]:
        qw = model.get_submodule(name)
        for k in ("qweight", "scales", "zeros"):
            state.pop(f"{name}.{k}", None)
        key = name if name.endswith(EXPERT_SUFFIXES) else f"{name}.weight"
        state[key] = qw.dequantize(dtype)
    twin.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    return twin.eval()


def prepare_model(model) -> None:
    """Build every quantized weight's kernel layout (after ``load_state_dict``)."""
    for m in model.modules():
        if isinstance(m, QuantWeight):
            m.prepare()


# -- sizes -----------------------------------------------------------------------------------
def weight_bytes(
    config: CloverConfig, bits: int | None = None, group_size: int | None = None, float_bytes: int = 4
) -> dict:
    """Bytes of a model's weights: full precision at ``float_bytes`` per parameter, or with the
    quantizable weights at ``bits`` (scales and zeros included) and the rest at ``float_bytes``.
    Computed from the config alone (a meta model): no memory, even for 35B."""
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config.replace(quantization=None))
    quant = set(quantizable(model)) if bits else set()
    group_size = DEFAULT_GROUP_SIZE.get(bits, 0) if group_size is None else group_size
    total = q_bytes = experts = 0
    seen = set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        mod = name[: -len(".weight")] if name.endswith(".weight") else name
        if mod in quant:
            *lead, N, K = p.shape
            ng = K // layer_group(K, group_size, mod)
            n = p.numel() * bits // 8 + p.numel() // K * ng * 2 * (2 if bits == 4 else 1)  # + bf16 scales, zeros
            q_bytes += n
            total += n
        else:
            n = p.numel() * float_bytes
            total += n
        if mod.endswith(EXPERT_SUFFIXES):
            experts += n
    return {"total": total, "quantized": q_bytes, "float": total - q_bytes, "experts": experts}


def cache_bytes(config: CloverConfig, context: int, batch: int = 1, dtype_bytes: int = 2) -> int:
    """Decoding cache of ``batch`` sequences at ``context`` tokens: attention keys and values of the
    attention layers, the GDN state (fp32) and conv tail of the GDN layers (clover/model/cache.py)."""
    c = config
    n_attn = sum(t == "full_attention" for t in c.layer_types)
    n_gdn = len(c.layer_types) - n_attn
    kv = 2 * c.num_key_value_heads * c.head_dim * context * dtype_bytes
    conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim
    state = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim * 4
    tail = (c.linear_conv_kernel_dim - 1) * conv_dim * dtype_bytes
    return batch * (n_attn * kv + n_gdn * (state + tail))
