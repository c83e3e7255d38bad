"""The configuration of a Clover block-diffusion model for Hugging Face transformers.

Shipped beside exported weights by ``clover export hf`` and loaded with ``trust_remote_code``;
it needs transformers only. ``FIELDS`` names every setting the modeling code implements, with
Clover's defaults, and ``GDN_BLOCK_MIXINGS`` the block mixings it runs: ``clover export hf``
reads both as literals (without importing this file) and refuses a model that needs anything else.
"""

from __future__ import annotations

from transformers import PretrainedConfig

FIELDS = {
    "vocab_size": 248320,
    "hidden_size": 2048,
    "num_hidden_layers": 40,
    "layer_types": None,  # None: 3 GDN layers then 1 attention layer, repeated
    "full_attention_interval": 4,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "max_position_embeddings": 262144,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000000.0,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 256,  # 0: every layer has a dense SwiGLU feed-forward instead of experts
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "router_aux_loss_coef": 0.001,
    "intermediate_size": 0,  # the dense feed-forward's width, used when num_experts = 0
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
    "mask_token_id": 0,
    "shift_logits": True,  # logit i-1 predicts token i (a converted AR base); False: logit i predicts token i
    "block_size": 32,  # default decoding block size
    "max_block_size": 128,  # largest block the model accepts
    "gdn_block_mixing": "bidirectional",  # "causal": the block runs the causal delta rule
    "gdn_right_conv": True,  # the right-context convolution branch inside the block
    "gdn_block_calibration": True,  # the gamma_h * ln n term of the memory logit
    "quantization": None,  # only full-precision weights are exported
    "extra": None,  # free-form provenance (conversion source, training recipe)
}
GDN_BLOCK_MIXINGS = ("bidirectional", "causal")
GDN, ATTN = "linear_attention", "full_attention"


class CloverConfig(PretrainedConfig):
    """Clover's own config fields (``FIELDS``) on top of transformers' common ones."""

    model_type = "clover"

    def __init__(self, **kwargs):
        values = {name: kwargs.pop(name, default) for name, default in FIELDS.items()}
        super().__init__(**kwargs)
        for name, value in values.items():  # after the base class, which sets some of these names itself
            setattr(self, name, list(value) if isinstance(value, list) else value)
        if self.layer_types is None:
            n = self.full_attention_interval
            self.layer_types = [ATTN if (i + 1) % n == 0 else GDN for i in range(self.num_hidden_layers)]
        problems = []
        if len(self.layer_types) != self.num_hidden_layers or set(self.layer_types) - {GDN, ATTN}:
            problems.append(f"layer_types must be {self.num_hidden_layers} of {GDN!r} / {ATTN!r}")
        if self.gdn_block_mixing not in GDN_BLOCK_MIXINGS:
            problems.append(f"gdn_block_mixing must be one of {list(GDN_BLOCK_MIXINGS)}")
        if self.quantization is not None:
            problems.append("quantized weights are not supported here (export a full-precision checkpoint)")
        if self.block_size > self.max_block_size:
            problems.append(f"block_size {self.block_size} exceeds max_block_size {self.max_block_size}")
        if problems:
            raise ValueError("invalid Clover config: " + "; ".join(problems))

    @property
    def eos_ids(self) -> list[int]:
        e = self.eos_token_id
        return [] if e is None else [e] if isinstance(e, int) else list(e)
