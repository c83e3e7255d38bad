import torch

from clover.model import CloverForBlockDiffusion, preset

# a tiny shape every layer of which the CPU kernels take (int4: output rows a multiple of 16,
# groups of 32): hidden 64, expert and shared-expert width 32
KERNEL_SHAPE = dict(hidden_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32)


def kernel_model(seed=0, **over):
    """A small fp32 model (default init scale, so bf16 activations stay well conditioned) with
    its Clover-only parameters perturbed, as tests/model/helpers.make_model does."""
    torch.manual_seed(seed)
    m = CloverForBlockDiffusion(preset("tiny", **{**KERNEL_SHAPE, **over})).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if any(k in n for k in ("conv_right", "mem_key", "mem_bias", "norm.weight")):
                p.normal_(0, 0.3)
    return m


def rel(a, b) -> float:
    """Relative RMS difference."""
    return ((a - b).float().pow(2).mean().sqrt() / b.float().pow(2).mean().sqrt()).item()
