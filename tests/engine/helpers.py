import torch

from clover.bench.exactness import perturb
from clover.engine import SamplingParams
from clover.model import CloverForBlockDiffusion, preset


def peaky_model(shift=True, seed=0, eos=5, scale=16.0, dtype=torch.float64, **over):
    """A tiny random model (fp64 so no decision sits on a rounding tie) whose head is scaled up,
    so the threshold policy commits several tokens per pass and EOS shows up now and then."""
    torch.manual_seed(seed)
    cfg = preset("tiny", shift_logits=shift, eos_token_id=eos, initializer_range=0.2, **over)
    m = perturb(CloverForBlockDiffusion(cfg).to(dtype).eval())
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)
    return m


def mixed_params(n, max_tokens=lambda i: 5 + (3 * i) % 17):
    """``n`` requests' sampling parameters, every policy, both block sizes and some sampled rows."""
    policies = ["threshold", "fixed", "ar", "edit"]
    return [
        SamplingParams(
            max_tokens=max_tokens(i),
            block_size=(4, 8)[i % 2],
            policy=policies[i % 4],
            threshold=0.6 + 0.1 * (i % 3),
            temperature=0.9 if i % 5 == 4 else 0.0,
            seed=i,
        )
        for i in range(n)
    ]


def prompts(lengths, seed=0, vocab=96):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


class CharTokenizer:
    """Token i decodes to a fixed 1-2 letter string; id 7 is the tokenizer's own EOS."""

    eos_token_id = 7

    def piece(self, i: int) -> str:
        return chr(97 + i % 26) + ("" if i < 26 else chr(65 + i // 26))

    def decode(self, ids: list[int]) -> str:
        return "".join(self.piece(i) for i in ids)

    def encode(self, text: str) -> list[int]:
        return [ord(c) - 97 for c in text]
