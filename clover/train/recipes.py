"""Training recipes (``Recipe``: a model shape, a schedule and a data mix; a task brings its own,
``clover.data.task``) and how chats become training batches: one answer per sequence, its block
filled with EOS, chats read from OpenAI's fine-tuning JSONL."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from clover.data.chat import content_text, is_answer, render_segments
from clover.data.tokenizer import CloverTokenizer
from clover.model import CloverConfig
from clover.train.trainer import TrainConfig


@dataclass
class Recipe:
    """A training recipe: the model's shape (``model``: config fields), the optimiser's schedule
    (``train``) and the data's own scalar fields. A task's recipes subclass it and bring their
    corpus (``source``) and tokenizer (``clover.data.task``); with ``clover train --data`` any
    recipe trains on the given chats instead."""

    model: dict = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    batch_size: int = 16
    max_len: int = 512
    tokenizer_vocab: int = 2048
    name: ClassVar[str] = ""  # how ``clover train --recipe`` names it; recorded in the model's config
    autoregressive: ClassVar[bool] = False  # a Hugging Face causal LM with a next-token loss (``clover.train.ar``)

    def data_fields(self) -> dict:
        """The recipe's own scalar fields (batch size, vocabulary, a corpus's mix): what
        ``--config``'s ``data`` section sets and ``training.json`` records."""
        return {k: v for k, v in self.__dict__.items() if k not in ("train", "model")}

    def model_config(self, tok: CloverTokenizer) -> CloverConfig:
        return CloverConfig(
            vocab_size=tok.vocab_size,
            mask_token_id=tok.mask_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            extra={"recipe": self.name},
            **self.model,
        )

    def source(self, tok: CloverTokenizer, split: str = "train", seed: int = 0) -> Callable[[int], dict]:
        """step → batch from the recipe's own corpus, a pure function of (seed, step)."""
        raise NotImplementedError(f"recipe {self.name!r} has no corpus of its own: train it on --data")

    def validation_batches(self, tok: CloverTokenizer, n: int = 4) -> list[dict]:
        """Fixed validation batches from the recipe's corpus."""
        source = self.source(tok, "validation", seed=99)
        return [source(i) for i in range(n)]

    def tokenizer(self) -> CloverTokenizer:
        """The tokenizer of a run from scratch on the recipe's corpus."""
        raise NotImplementedError(f"recipe {self.name!r} has no corpus of its own to train a tokenizer on")

    def added_tokens(self) -> list[str]:
        """Added tokens for a tokenizer trained on ``--data`` (the task's JSON fragments, tool names)."""
        return []


def encode_example(
    tok: CloverTokenizer, ex: dict, max_len: int, block_size: int, rng: random.Random | None = None
) -> tuple[list[int], list[bool]]:
    """One training sequence with exactly one answer: an assistant turn (the last, or one drawn
    with ``rng``; never one of OpenAI's ``weight: 0`` turns) is the target, earlier turns are
    history, later ones are cut off.

    The answer's last block is filled to its end with EOS (``pad``) targets. At inference the
    whole active block is masked, so the model must learn to close the answer and fill the
    rest with EOS; without the fill every training block would end where the answer ends and
    the block's length alone would tell the model where to stop (a cue decoding never has).
    Nothing after the answer shares its block either, so in-block attention never sees the
    conversation's future.
    """
    msgs = ex["messages"]
    turns = [i for i, m in enumerate(msgs) if is_answer(m)]  # OpenAI's weight 0: context, never a target
    if turns:
        msgs = msgs[: (rng.choice(turns) if rng else turns[-1]) + 1]
    segs = render_segments(msgs, ex.get("tools"))
    last = max((i for i, (_, is_answer) in enumerate(segs) if is_answer), default=None) if turns else None
    if last is not None:
        segs = [(text, i == last) for i, (text, _) in enumerate(segs[: last + 1])]
    ids, tgt = tok.encode_segments(segs)
    if last is not None:
        fill = -len(ids) % block_size
        ids, tgt = ids + [tok.pad_token_id] * fill, tgt + [True] * fill
    return ids[:max_len], tgt[:max_len]


def collate(rows: list[tuple[list[int], list[bool]]], pad_id: int) -> dict[str, torch.Tensor]:
    T = max(len(r[0]) for r in rows)
    x0 = torch.full((len(rows), T), pad_id, dtype=torch.long)
    target = torch.zeros(len(rows), T, dtype=torch.bool)
    valid = torch.zeros(len(rows), T, dtype=torch.bool)
    for i, (ids, tg) in enumerate(rows):
        x0[i, : len(ids)] = torch.tensor(ids)
        target[i, : len(ids)] = torch.tensor(tg)
        valid[i, : len(ids)] = True
    return {"x0": x0, "target": target, "valid": valid}


ROLES = ("system", "developer", "user", "assistant", "tool")
_TEXT_PARTS = (None, "text", "input_text", "output_text")  # content parts that are text (chat, Responses API)
_CHAT_SHAPE = '{"messages": [{"role": ..., "content": ...}, ...], "tools": [...]}'


def _function(f, what: str) -> dict:
    """A function definition or call (``{"name": ..., ...}``), checked for its name."""
    if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"].strip():
        raise ValueError(f"{what} needs a function name")
    return f


def _arguments(args, what: str) -> None:
    """A call's ``arguments``: a JSON object, or (OpenAI's form) a string holding one."""
    if isinstance(args, str) and args.strip():
        try:
            args = json.loads(args)
        except (ValueError, RecursionError) as e:
            msg = "nested too deeply" if isinstance(e, RecursionError) else getattr(e, "msg", str(e))
            raise ValueError(f"{what} is not valid JSON ({msg}): {args[:80]!r}") from None
    if not (args is None or isinstance(args, dict) or (isinstance(args, str) and not args.strip())):
        raise ValueError(f"{what} must be a JSON object (or a string holding one), got {json.dumps(args)[:80]}")


def _content(c, what: str) -> None:
    """Text content: a string, null, a list of text parts, or (a tool result) a JSON object."""
    if c is None or isinstance(c, (str, dict)):
        return
    if not isinstance(c, list):
        raise ValueError(f"{what} must be a string, a list of text parts or null, got {json.dumps(c)[:80]}")
    for j, part in enumerate(c):
        if isinstance(part, str):
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or kind not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            shown = f"of type {kind!r}" if kind not in _TEXT_PARTS else json.dumps(part)[:80]
            raise ValueError(f"{what}[{j}]: a content part {shown}; Clover trains on text parts only")


def chat_example(ex, where: str) -> dict:
    """One line of OpenAI's fine-tuning format, checked and in the shape ``render`` takes: the
    legacy ``functions``/``function_call``/``function`` role become ``tools``/``tool_calls``/``tool``
    (as the server reads them). Every problem is a ValueError that starts with ``where``."""
    try:
        return _chat_example(ex)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _chat_example(ex) -> dict:
    msgs = ex.get("messages") if isinstance(ex, dict) else None
    if not isinstance(msgs, list) or not msgs:
        got = "a JSON " + type(ex).__name__.replace("dict", "object").replace("list", "array")
        if isinstance(ex, dict):
            got = "an object without messages" if "messages" not in ex else "messages that is not a non-empty list"
        raise ValueError(f"expected {_CHAT_SHAPE}, got {got}")
    tools, functions = ex.get("tools"), ex.get("functions")
    if functions is not None:  # legacy: bare function definitions
        if tools:
            raise ValueError("functions and tools cannot be combined (functions is the deprecated form of tools)")
        if not isinstance(functions, list):
            raise ValueError("functions must be a list of function definitions")
        tools = [{"type": "function", "function": _function(f, f"functions[{i}]")} for i, f in enumerate(functions)]
    if tools is not None:
        if not isinstance(tools, list):
            raise ValueError("tools must be a list of OpenAI tool definitions")
        for i, t in enumerate(tools):
            if not isinstance(t, dict) or t.get("type", "function") != "function":
                kind = f"of type {t.get('type')!r}" if isinstance(t, dict) else json.dumps(t)[:80]
                raise ValueError(
                    f'tools[{i}]: {kind} is not a function tool ({{"type": "function", "function": {{...}}}})'
                )
            _function(t.get("function", t), f"tools[{i}]")
    out = []
    for i, m in enumerate(msgs):
        what = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ValueError(f"{what} must be an object with role and content, got {json.dumps(m)[:80]}")
        role, legacy = m.get("role"), False
        if role == "function":  # legacy function result
            m = {**m, "role": "tool"}
        elif role == "assistant" and m.get("function_call") is not None and not m.get("tool_calls"):
            fc, legacy = m["function_call"], True  # legacy: the turn's one call
            m = {k: v for k, v in m.items() if k != "function_call"}
            m["tool_calls"] = [{"id": "call_0", "type": "function", "function": fc}]
        elif role not in ROLES:
            raise ValueError(f"{what}: unknown role {role!r}; roles are {', '.join(ROLES)} (and legacy function)")
        _content(m.get("content"), f"{what}.content")
        calls = m.get("tool_calls") if m["role"] == "assistant" else None
        if calls is not None and not isinstance(calls, list):
            raise ValueError(f"{what}.tool_calls must be a list of calls")
        for j, call in enumerate(calls or []):
            cw = f"{what}.function_call" if legacy else f"{what}.tool_calls[{j}]"
            fn = call.get("function", call) if isinstance(call, dict) else None
            _function(fn, cw)
            _arguments(
                fn.get("arguments"),
                f"{cw}.function.arguments" if "function" in call and not legacy else f"{cw}.arguments",
            )
        if m["role"] == "assistant":
            w = m.get("weight", 1)
            if isinstance(w, bool) or w not in (0, 1):
                raise ValueError(f"{what}.weight must be 0 or 1, got {json.dumps(w)}")
            if w and not calls and not content_text(m):
                raise ValueError(f"{what}: an assistant message to learn has no content and no tool_calls")
        out.append(m)
    if not any(is_answer(m) for m in out):
        weighted = any(m["role"] == "assistant" for m in out)
        raise ValueError("no assistant message" + (" with weight 1" if weighted else "") + " (nothing to learn)")
    try:  # a lone UTF-16 surrogate escape ("\ud800") parses, but no tokenizer can encode it
        json.dumps(out, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)") from None
    return {"messages": out, "tools": tools or None}


def read_chat_jsonl(path: str | Path) -> list[dict]:
    """Chat examples in OpenAI's fine-tuning format: one ``{"messages": [...], "tools": [...]}``
    per line (``tools`` optional), each with at least one assistant message to learn (OpenAI's
    per-message ``weight`` 0 marks an assistant message as context only). UTF-8 with or without a
    BOM, LF, CRLF or CR line ends, blank lines skipped. Every problem is one ValueError naming the file and the
    line; each example keeps its ``line``."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{path}: is a directory, not a JSONL file")
    try:
        f = open(p, "rb")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror})") from None
    out = []
    with f:  # bytes.splitlines: LF, CRLF and the old Mac CR alike (JSON text never holds a raw CR)
        for n, raw in enumerate(f.read().splitlines(), 1):
            where = f"{path}:{n}"
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM (Windows editors write one)
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{where}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                    "save the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
            except (ValueError, RecursionError) as e:  # int digit limit, nesting too deep
                msg = "nested too deeply" if isinstance(e, RecursionError) else str(e)
                raise ValueError(f"{where}: not valid JSON ({msg})") from None
            out.append({**chat_example(ex, where), "line": n})
    if not out:
        raise ValueError(f"{path}: no examples (no line holds one)")
    return out


def answer_spans(tok: CloverTokenizer, ex: dict) -> list[tuple[int, int, int]]:
    """``(message index, first token, end token)`` of each assistant answer to learn, in the whole
    conversation's tokens (segments are encoded one by one, as ``encode_example`` encodes them, so
    a conversation cut after a turn has the same tokens up to it)."""
    msgs = ex["messages"]
    assistants = iter(i for i, m in enumerate(msgs) if m.get("role") == "assistant")
    pos, spans = 0, []
    for text, assistant in render_segments(msgs, ex.get("tools")):
        n = len(tok.encode(text))
        if assistant:
            i = next(assistants)
            if is_answer(msgs[i]):
                spans.append((i, pos, pos + n))
        pos += n
    return spans


def fit_to_length(tok: CloverTokenizer, examples: list[dict], max_len: int) -> tuple[list[dict], list, list]:
    """Examples as training sees them, ``max_len`` tokens at most: an answer that starts past
    ``max_len`` is never drawn as a target (its turn becomes context, weight 0), an example with
    no answer left is left out. Returns (kept, lines left out, lines whose answers are cut)."""
    kept, dropped, cut = [], [], []
    for ex in examples:
        spans = answer_spans(tok, ex)
        late = {i for i, start, _ in spans if start >= max_len}
        if len(late) == len(spans):
            dropped.append(ex.get("line"))
            continue
        if any(start < max_len < end for _, start, end in spans):
            cut.append(ex.get("line"))
        if late:
            ex = {**ex, "messages": [{**m, "weight": 0} if j in late else m for j, m in enumerate(ex["messages"])]}
        kept.append(ex)
    return kept, dropped, cut


def chat_source(tok: CloverTokenizer, examples: list[dict], recipe: Recipe, seed: int = 0):
    """step → batch of ``recipe.batch_size`` examples drawn from ``examples``, a pure function of
    (seed, step) like ``Recipe.source``; each example's target is one of its assistant turns."""

    def source(step: int) -> dict[str, torch.Tensor]:
        rng = random.Random(f"chat-{seed}-{step}")
        rows = [
            encode_example(tok, rng.choice(examples), recipe.max_len, recipe.train.block_size_at(step), rng)
            for _ in range(recipe.batch_size)
        ]
        return collate(rows, tok.pad_token_id)

    return source
