"""The Hugging Face chat template (clover/data/chat_template.jinja) renders exactly what
``clover.data.chat.render`` does: the AR base is trained on ``render`` and served by
``apply_chat_template``, and a converted checkpoint prompts with its own template."""

from __future__ import annotations

import random

import pytest

from clover.airspace import chats, tokenizer_corpus
from clover.airspace.decision_groups import decision_examples
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data.chat import render
from clover.train.hf_checkpoint import CHAT_TEMPLATE

jinja2 = pytest.importorskip("jinja2")


def apply(messages, tools=None, add_generation_prompt=False) -> str:
    """Render as transformers' ``apply_chat_template`` does (its sandboxed environment, ``tojson``)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(CHAT_TEMPLATE.read_text()).render(
        messages=messages, tools=tools, add_generation_prompt=add_generation_prompt
    )


def examples():
    rng = random.Random(3)
    out = [tokenizer_corpus.example(rng, "train", 5) for _ in range(40)]
    out += [e for e in (chats.example(rng, "train") for _ in range(40)) if e["kind"] != "plain"]
    out += [chats.multi_turn(rng, "train") for _ in range(30)]
    out += [chats.example(rng, "train", mix={"no_tools": 1.0}) for _ in range(10)]
    out += decision_examples("train", 5, seed=1)
    return out


def test_the_template_renders_what_training_renders():
    for ex in examples():
        for gen in (False, True):
            assert apply(ex["messages"], ex.get("tools"), gen) == render(ex["messages"], ex.get("tools"), gen)


SCHEMAS = [
    {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit", "a b", "_"]}}},
    {"type": "object", "properties": {"n": {"type": ["integer", "null"]}, "c": {"const": "x y"}}, "required": ["n"]},
    {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}}, "o": {"type": "object"}}},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "string"}, {"type": "null"}]}}},
    {"type": "object", "properties": {"r": {"$ref": "#/$defs/Point"}, "p": {"properties": {"x": {"type": "number"}}}}},
    {"type": "object", "properties": {"d": {"type": "dict"}, "e": {}, "f": {"allOf": [{"type": "integer"}]}}},
]


def test_foreign_tool_schemas_and_openai_messages_render_alike():
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": s}} for i, s in enumerate(SCHEMAS)]
    tools += [{"name": "bare", "parameters": {"type": "object"}}, {"type": "function", "function": {"name": "g"}}]
    msgs = [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": [{"type": "text", "text": "Part one"}, {"type": "text", "text": "two"}]},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f0", "arguments": '{"unit": "celsius"}'}},
                {"id": "2", "type": "function", "function": {"name": "f1", "arguments": {"n": 3}}},
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "21 C"},
        {"role": "tool", "tool_call_id": "2", "content": {"ok": True}},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "g", "arguments": ""}}]},
        {"role": "user", "content": "thanks"},
    ]
    for t in (tools, None, AIRSPACE_TOOLS):
        for gen in (False, True):
            assert apply(msgs, t, gen) == render(msgs, t, gen)
    assert apply(msgs[2:3]) == render(msgs[2:3])  # no system, no tools: no system turn
