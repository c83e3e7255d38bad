"""The airspace model's tokenizer: Clover's byte-level BPE (``clover.data.tokenizer``) trained on
train-split chats of the first airspace corpus (``tokenizer_corpus``) and decision groups, with
the metres tools' JSON fragments, names and signature lines as single added tokens. The bundled
model's tokenizer is this build; the same arguments give the same file, byte for byte."""

from __future__ import annotations

from clover.airspace.decision_groups import decision_examples
from clover.airspace.tokenizer_corpus import generate
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data.chat import render, tool_signature
from clover.data.tokenizer import CloverTokenizer, json_fragments, train_tokenizer

# keys of the corpus's tool results, which fill the prompt side of tool-result chats
RESULT_KEYS = (
    "drone_id",
    "battery_pct",
    "lat",
    "lon",
    "altitude_m",
    "state",
    "status",
    "eta_min",
    "zone_name",
    "waypoint_index",
    "mission_id",
    "error",
)


def default_added_tokens() -> list[str]:
    """The default model's added tokens: JSON fragments, tool names, one token per signature line."""
    return json_fragments(AIRSPACE_TOOLS, RESULT_KEYS) + [tool_signature(t) for t in AIRSPACE_TOOLS]


def training_texts(n_texts: int = 4000, seed: int = 0) -> list[str]:
    """Rendered training chats (corpus + decision groups) to train the tokenizer on."""
    exs = generate("train", n_texts, seed=seed) + decision_examples("train", max(1, n_texts // 5), seed=seed)
    return [render(e["messages"], e["tools"]) for e in exs]


def build_default_tokenizer(vocab_size: int = 3072, n_texts: int = 4000, seed: int = 0) -> CloverTokenizer:
    """The default model's tokenizer, trained on train-split chats only (a few seconds)."""
    return CloverTokenizer(train_tokenizer(training_texts(n_texts, seed), vocab_size, default_added_tokens()))
