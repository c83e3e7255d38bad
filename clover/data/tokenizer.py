"""Byte-level BPE tokenizer (``tokenizers``), shaped so that a tiny model can copy cheaply.

* digits are one token each (numbers are copied digit by digit, never re-segmented);
* letter runs, each space and each punctuation mark are separate pre-tokens, so a word is the
  same tokens wherever it stands: ``Alpha`` in `` Alpha,`` (operator message) and in ``"Alpha"``
  (JSON answer) is one and the same token sequence;
* frequent whole JSON fragments (``{"name": "``, ``", "arguments": {``, ``", "radius_m": ``,
  ``"}}``), tool names and the default tools' signature lines are single added tokens, so the
  rigid parts of an answer and the repeated tools block cost few positions;
* byte-level, so any text round-trips: ``decode(encode(s)) == s``.

``CloverTokenizer`` wraps a ``tokenizers.Tokenizer`` (Clover's or a Hugging Face
``tokenizer.json``) with the ids Clover needs: mask, eos (``<|im_end|>``), pad.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from clover.data.chat import render_chat, tokenize_segments

SPECIAL_TOKENS = [
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
# ids dropped by decode(skip_special=True); the tool markup stays so tool calls can be parsed
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")
MASK_NAMES = ("<|mask|>", "<|MASK|>", "[MASK]", "<mask>", "<|mask_token|>")
# one pre-token per letter run, per digit, per whitespace char, per other char
PRE_TOKEN_PATTERN = r"\p{L}+|\p{N}|\s|[^\s\p{L}\p{N}]"


def json_fragments(tools: list[dict], extra_keys: Iterable[str] = ()) -> list[str]:
    """Whole JSON fragments as canonical ``json.dumps`` writes them: the call envelope, each key
    with the separator before it and the opening quote after it, the closers, the tool names.
    ``extra_keys``: other keys the texts carry (e.g. those of a task's tool results).

    The separator belongs to the key's fragment (``", "lat": ``) because added tokens match
    leftmost-longest: a separate ``", "`` token would split every key.
    """
    frags = ['{"name": "', '", "arguments": {', '"}}', "}}", '"}', "{}"]
    keys = [p for t in tools for p in (t.get("function", t).get("parameters") or {}).get("properties", {})]
    for k in dict.fromkeys([*keys, *extra_keys]):
        frags += [
            f'{{"{k}": "',
            f'{{"{k}": ',
            f'"{k}": "',
            f'"{k}": ',
            f'", "{k}": "',
            f'", "{k}": ',
            f', "{k}": "',
            f', "{k}": ',
        ]
    frags += [t.get("function", t)["name"] for t in tools]
    return list(dict.fromkeys(frags))


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 3072, added_tokens: list[str] | None = None, min_frequency: int = 2
) -> Tokenizer:
    """Train a byte-level BPE on ``texts`` (seconds for a few MB). ``vocab_size`` counts the special
    tokens, the 256 bytes and the merges; ``added_tokens`` come on top (ids after the BPE vocab)."""
    added_tokens = [t for t in (added_tokens or []) if t]
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # the added tokens will cover these strings, so BPE should not spend merges on them
    longest_first = sorted(added_tokens, key=len, reverse=True)

    def stripped():
        for text in texts:
            for a in longest_first:
                text = text.replace(a, "\n")
            yield text

    tok.train_from_iterator(stripped(), trainer)
    if added_tokens:
        tok.add_tokens([AddedToken(a, normalized=False, special=False) for a in added_tokens])
    return tok


def _byte_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): printable bytes stand for themselves, the others
    for U+0100 onwards in byte order. Character → byte."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    rest = [b for b in range(256) if b not in keep]
    return {chr(c): b for b, c in zip(keep + rest, keep + [256 + n for n in range(len(rest))])}


_BYTE_OF = _byte_alphabet()


def _token_str(v) -> str | None:
    return v.get("content") if isinstance(v, dict) else v if isinstance(v, str) else None


class CloverTokenizer:
    """ids ↔ text plus the special ids Clover needs.

    ``eos_token_id`` is ``<|im_end|>`` when the vocabulary has it (chat models end turns with
    it), ``eos_token_ids`` every id that should stop generation; ``mask_token_id`` is the
    diffusion ``[MASK]`` (``None`` when a Hugging Face vocabulary has none).
    """

    def __init__(
        self, tok: Tokenizer, mask_token: str | None = None, eos_token: str | None = None, pad_token: str | None = None
    ):
        self.tok = tok
        self.chat_template: str | None = None  # a Hugging Face chat template (see ``render_chat``)
        self.mask_token_id = self._first(mask_token, *MASK_NAMES)
        self.eos_token_id = self._first("<|im_end|>", eos_token, "<|endoftext|>", "</s>", "<eos>")
        self.eos_token_ids = sorted(
            {i for i in (self.eos_token_id, self._first(eos_token), self._first("<|endoftext|>")) if i is not None}
        )
        pad = self._first(pad_token, "<|endoftext|>", "<pad>", "[PAD]")
        self.pad_token_id = pad if pad is not None else self.eos_token_id
        self._control = {i for i in (self._first(t) for t in CONTROL_TOKENS) if i is not None}
        if self.mask_token_id is not None:
            self._control.add(self.mask_token_id)

    def _first(self, *names: str | None) -> int | None:
        for n in names:
            i = self.tok.token_to_id(n) if n else None
            if i is not None:
                return i
        return None

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of ``ids``; ``skip_special`` drops control tokens (eos, pad, mask, im_start) but keeps
        tool markup such as ``<tool_call>``."""
        ids = [int(i) for i in ids]
        if skip_special:
            ids = [i for i in ids if i not in self._control]
        return self.tok.decode(ids, skip_special_tokens=False)

    def encode_segments(self, segments: list[tuple[str, bool]]) -> tuple[list[int], list[bool]]:
        """(text, is_target) segments (``chat.render_segments``) → ids and one target flag per id."""
        return tokenize_segments(self.encode, segments)

    def token_bytes(self, i: int) -> bytes:
        """The exact bytes token ``i`` stands for (a byte-level token may be part of a UTF-8 character)."""
        piece = self.id_to_token(i)
        if piece is None:
            raise ValueError(f"token id {i} is outside the vocabulary")
        if int(i) not in self.tok.get_added_tokens_decoder() and all(c in _BYTE_OF for c in piece):
            return bytes(_BYTE_OF[c] for c in piece)
        return self.decode([i]).encode("utf-8")  # added tokens and non-byte-level vocabularies

    def categories(self) -> tuple[list[str], list[int]]:
        """(names, category index per token id): ``digit``, ``word`` (letters), ``markup`` (special
        and added tokens: JSON fragments, tool names, tool tags), ``end`` (EOS / pad),
        ``other`` (spaces, punctuation). For losses by kind of token (copying shows in digits, words)."""
        names = ["digit", "word", "markup", "end", "other"]
        end = set(self.eos_token_ids) | {self.pad_token_id}
        added = set(self.tok.get_added_tokens_decoder())
        cats = []
        for i in range(self.vocab_size):
            piece = self.decode([i]).strip()
            if i in end:
                cats.append(3)
            elif i in added:
                cats.append(2)
            elif piece.isdigit():
                cats.append(0)
            elif piece.isalpha():
                cats.append(1)
            else:
                cats.append(4)
        return names, cats

    def word_pieces(self) -> tuple[str, ...]:
        """The text of every vocabulary token that is a run of letters (added tokens aside), in
        id order: what training coins made-up names from (``clover.airspace.phrasing.coined_word``)."""
        added = set(self.tok.get_added_tokens_decoder())
        pieces = (self.decode([i]) for i in range(self.vocab_size) if i not in added)
        return tuple(p for p in pieces if p.isalpha())

    def token_to_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self.tok.id_to_token(int(i))

    def save(self, directory: str | Path) -> None:
        """``tokenizer.json`` + a ``tokenizer_config.json`` that transformers' AutoTokenizer reads."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.tok.save(str(d / "tokenizer.json"))
        name = lambda i: self.id_to_token(i) if i is not None else None
        cfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": name(self.eos_token_id),
            "pad_token": name(self.pad_token_id),
            "mask_token": name(self.mask_token_id),
            "model_max_length": 1 << 20,
            "clean_up_tokenization_spaces": False,
        }
        (d / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v}, indent=1) + "\n")
        if self.chat_template:
            (d / "chat_template.jinja").write_text(self.chat_template, encoding="utf-8")

    def render_chat(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> str:
        """The chat as prompt text: by this tokenizer's own chat template when it has one (a
        converted checkpoint's), else by Clover's ``render``."""
        return render_chat(messages, tools, add_generation_prompt, self.chat_template)

    @classmethod
    def load(cls, directory: str | Path, mask_token: str | None = None) -> CloverTokenizer:
        """Load Clover's tokenizer dir or a Hugging Face one (``tokenizer.json`` + optional
        ``tokenizer_config.json``, whose eos/pad/mask tokens are honoured)."""
        d = Path(directory)
        if not (d / "tokenizer.json").exists():
            raise FileNotFoundError(f"{d}: no tokenizer.json (a fast tokenizer file is required)")
        cfg = {}
        if (d / "tokenizer_config.json").exists():
            try:
                cfg = json.loads((d / "tokenizer_config.json").read_text())
            except json.JSONDecodeError as e:
                raise ValueError(f"{d / 'tokenizer_config.json'}: not valid JSON ({e})") from None
            if not isinstance(cfg, dict):
                raise ValueError(f"{d / 'tokenizer_config.json'}: expected a JSON object")
        try:
            tokenizer = Tokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as e:
            raise ValueError(f"{d / 'tokenizer.json'}: not a valid tokenizer file ({e})") from None
        tok = cls(
            tokenizer,
            mask_token=mask_token or _token_str(cfg.get("mask_token")),
            eos_token=_token_str(cfg.get("eos_token")),
            pad_token=_token_str(cfg.get("pad_token")),
        )
        template = cfg.get("chat_template")  # older checkpoints keep it in tokenizer_config.json
        if (d / "chat_template.jinja").exists():
            template = (d / "chat_template.jinja").read_text(encoding="utf-8")
        tok.chat_template = template if isinstance(template, str) and template.strip() else None
        return tok

    from_pretrained = load
