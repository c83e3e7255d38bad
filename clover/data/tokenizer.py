"""Byte-level BPE tokenizer trained with the ``tokenizers`` library, shaped for copying.

* digits are one token each;
* spaces and punctuation are their own pre-tokens, so a name is the same tokens in the
  operator's message (`` Alpha``) and inside JSON (``"Alpha``);
* frequent JSON fragments and tool names are single (added) tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|mask|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
]


def json_fragments(tools: list[dict]) -> list[str]:
    # whole key fragments including the separator before them: added tokens match leftmost
    # first, so a generic '", "' must not exist or it would split every key
    frags = ['{"name": "', '", "arguments": {', '"}}', "}}", '"}']
    for t in tools:
        fn = t["function"]
        frags.append(fn["name"])
        for p in fn["parameters"]["properties"]:
            frags += [f'"{p}": "', f'"{p}": ', f'", "{p}": "', f'", "{p}": ', f', "{p}": "', f', "{p}": ']
    return list(dict.fromkeys(frags))


def train_tokenizer(texts: list[str], vocab_size: int = 2048, extra_tokens: list[str] | None = None) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d|[A-Za-z]+|\s|[^\sA-Za-z\d]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    if extra_tokens:
        tok.add_tokens(extra_tokens)
    return tok


class CloverTokenizer:
    """A thin wrapper: ids ↔ text, and the special ids Clover needs."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self.mask_token_id = self._find("<|mask|>", "[MASK]", "<mask>")
        self.eos_token_id = self._find("<|im_end|>", "<|endoftext|>", "</s>")
        self.pad_token_id = self._find("<|endoftext|>", "<pad>") or self.eos_token_id

    def _find(self, *names: str) -> int | None:
        for n in names:
            i = self.tok.token_to_id(n)
            if i is not None:
                return i
        return None

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special)

    def token_to_id(self, t: str) -> int | None:
        return self.tok.token_to_id(t)

    def id_to_token(self, i: int) -> str | None:
        return self.tok.id_to_token(i)

    def encode_segments(self, segments: list[tuple[str, bool]]) -> tuple[list[int], list[bool]]:
        """Tokenise (text, is_target) segments separately → ids and per-token target flags."""
        ids, tgt = [], []
        for text, is_t in segments:
            e = self.encode(text)
            ids += e
            tgt += [is_t] * len(e)
        return ids, tgt

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.tok.save(str(d / "tokenizer.json"))
        (d / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "eos_token": "<|im_end|>",
                    "pad_token": "<|endoftext|>",
                    "mask_token": "<|mask|>",
                    "additional_special_tokens": SPECIAL,
                },
                indent=1,
            )
        )

    @classmethod
    def load(cls, directory: str | Path) -> CloverTokenizer:
        f = Path(directory) / "tokenizer.json"
        if not f.exists():
            raise FileNotFoundError(f"{directory}: no tokenizer.json")
        return cls(Tokenizer.from_file(str(f)))

    from_pretrained = load


def build_default_tokenizer(vocab_size: int = 2048, n_texts: int = 6000, seed: int = 0) -> CloverTokenizer:
    """Train the default model's tokenizer on rendered training chats (a few seconds)."""
    from clover.data.chat import render
    from clover.data.corpus import generate
    from clover.data.decisions import decision_examples
    from clover.data.tools import AIRSPACE_TOOLS

    exs = generate("train", n_texts, seed=seed) + decision_examples("train", n_texts // 6, seed=seed)
    texts = [render(e["messages"], e["tools"]) for e in exs]
    return CloverTokenizer(train_tokenizer(texts, vocab_size, json_fragments(AIRSPACE_TOOLS)))
