from clover.bench.exactness import perturbed_tiny

# a tiny shape every layer of which the CPU kernels take (int4: output rows a multiple of 16,
# groups of 32): hidden 64, expert and shared-expert width 32
KERNEL_SHAPE = dict(hidden_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32)


def kernel_model(seed=0, **over):
    """A small fp32 model (default init scale, so bf16 activations stay well conditioned) with
    its Clover-only parameters and norms perturbed (``clover.bench.exactness.perturbed_tiny``)."""
    return perturbed_tiny(seed, **{**KERNEL_SHAPE, **over})


def rel(a, b) -> float:
    """Relative RMS difference."""
    return ((a - b).float().pow(2).mean().sqrt() / b.float().pow(2).mean().sqrt()).item()
