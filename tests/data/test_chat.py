"""Chat template and tool-call parsing: exact format, trainable parts, robustness."""

import pytest

from clover.airspace import chats, tokenizer_corpus
from clover.airspace.calls import plain_call, score_tool_calls
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data import chat

RECALL = [t for t in AIRSPACE_TOOLS if t["function"]["name"] == "recall_drone"]


def test_render_exact_format():
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "rtb d7"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "recall_drone", "arguments": '{"drone_id": "D-7"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": '{"status": "returning"}'},
        {"role": "assistant", "content": "D-7 is returning."},
    ]
    assert chat.render(msgs, RECALL) == (
        "<|im_start|>system\nBe brief.\n<tools>\nrecall_drone(drone_id: string)\n</tools><|im_end|>\n"
        "<|im_start|>user\nrtb d7<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-7"}}'
        "</tool_call><|im_end|>\n"
        '<|im_start|>user\n<tool_response>{"status": "returning"}</tool_response><|im_end|>\n'
        "<|im_start|>assistant\nD-7 is returning.<|im_end|>\n"
    )
    prompt = chat.render(msgs[:2], RECALL, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nrtb d7<|im_end|>\n<|im_start|>assistant\n")
    assert chat.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n"


def test_segments_targets_are_assistant_bodies_and_im_end():
    e = tokenizer_corpus.generate("train", 40, seed=3)
    for ex in e:
        segs = chat.render_segments(ex["messages"], ex["tools"])
        assert "".join(t for t, _ in segs) == chat.render(ex["messages"], ex["tools"])
        targets = [t for t, is_t in segs if is_t]
        bodies = [chat.assistant_text(m) + "<|im_end|>" for m in ex["messages"] if m["role"] == "assistant"]
        assert targets == bodies
        assert all("<|im_start|>" not in t for t in targets)
    ids, tgt = chat.render_for_training(e[0]["messages"], e[0]["tools"], lambda s: list(s.encode()))
    assert len(ids) == len(tgt) and any(tgt) and not all(tgt)


def test_parallel_tool_responses_share_one_user_turn():
    msgs = [{"role": "user", "content": "x"}, {"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
    assert chat.render(msgs).endswith(
        "<|im_start|>user\n<tool_response>a</tool_response>\n<tool_response>b</tool_response><|im_end|>\n"
    )


@pytest.mark.parametrize("split", ["train", "test"])
def test_render_parse_round_trip_for_every_kind(split):
    kinds = set()
    exs = tokenizer_corpus.generate(split, 400, seed=2) + chats.generate(split, 400, seed=2)
    for ex in [e for e in exs if e["kind"] != "plain"] + chats.multiturn_set(split, 20):  # plain text: no chat
        kinds.add(ex["kind"])
        turns = [m for m in ex["messages"] if m["role"] == "assistant"]  # history (weight 0) too
        for i, (_, body) in enumerate(chat.assistant_turns(ex["messages"], ex["tools"])):
            content, calls = chat.parse_assistant(body + "<|im_end|>")
            gold = [plain_call(c) for c in turns[i].get("tool_calls") or []]
            assert score_tool_calls(calls, gold)
            assert [c["arguments"] for c in calls] == [c["arguments"] for c in gold]
            assert content == (turns[i].get("content") or "")
    assert kinds == {*tokenizer_corpus.KINDS, *chats.MIX, "multi_turn"} - {"plain"}


def test_parse_is_robust():
    text = (
        '  <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{bad json}</tool_call> hi \n<tool_call> {"name": "b", "arguments": {}} '
    )
    content, calls = chat.parse_assistant(text)
    assert [c["name"] for c in calls] == ["a", "b"]
    assert content == "<tool_call>{bad json}</tool_call>\nhi"  # the malformed call's text is kept
    # arguments as a JSON string, "parameters" alias, trailing junk, text before the calls, eos cut
    content, calls = chat.parse_assistant(
        'Sure.\n<tool_call>{"name": "f", "arguments": "{\\"k\\": 2}"}}</tool_call>'
        '<tool_call>{"name": "g", "parameters": {"z": null}}</tool_call>'
        '<|im_end|><tool_call>{"name": "h", "arguments": {}}</tool_call>'
    )
    assert content == "Sure." and calls == [
        {"name": "f", "arguments": {"k": 2}},
        {"name": "g", "arguments": {"z": None}},
    ]
    # a call cut off at the next <tool_call> (missing close) is still read
    _, calls = chat.parse_assistant('<tool_call>{"name": "a", "arguments": {}}<tool_call>{"name": "b"}')
    assert [c["name"] for c in calls] == ["a", "b"]
    assert chat.parse_assistant("plain answer") == ("plain answer", [])
    assert chat.parse_assistant('<tool_call>{"name": "a", "arguments": {"x": ')[1] == []
    assert chat.parse_assistant("<tool_call>[1, 2]</tool_call>")[1] == []
    # given the functions on offer, a call to another one is kept as text
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "z", "arguments": {}}</tool_call>'
    content, calls = chat.parse_assistant(text, names={"a"})
    assert [c["name"] for c in calls] == ["a"] and content == '<tool_call>{"name": "z", "arguments": {}}</tool_call>'


def test_openai_text_parts_are_joined_by_newlines():
    m = {"role": "user", "content": [{"type": "text", "text": "recall"}, {"type": "text", "text": "drone 17"}]}
    assert chat.content_text(m) == "recall\ndrone 17"


def test_arbitrary_tool_schemas_render():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search the web.\nMore.",
                "parameters": {
                    "type": "object",
                    "required": ["q"],
                    "properties": {
                        "q": {"type": "string"},
                        "filters": {
                            "type": "object",
                            "required": ["tags"],
                            "properties": {
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "since": {"type": "string"},
                            },
                        },
                        "mode": {"enum": ["fast", "deep search"]},
                        "n": {"type": ["integer", "null"]},
                        "ids": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
                        "ref": {"$ref": "#/$defs/Point"},
                        "meta": {"type": "object"},
                        "k": {"const": 3},
                        "bare": {},
                        "opt": {"oneOf": [{"type": "number"}, {"enum": [1, 2]}]},
                    },
                },
            },
        },
        {"type": "function", "function": {"name": "ping"}},
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
        {"name": "bare_fn", "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}},
        {"type": "function", "function": {"name": "weird", "parameters": {"properties": {"a": "not a schema"}}}},
    ]
    s = chat.render([{"role": "user", "content": "x"}], tools, add_generation_prompt=True)
    assert (
        'search(q: string, filters?: {tags: array[string], since?: string}, mode?: fast|"deep search", '
        "n?: integer|null, ids?: array[integer|string], ref?: Point, meta?: object, k?: 3, bare?: any, "
        "opt?: number|1|2)"
    ) in s
    assert "\nping()\n" in s and "\nnoop()\n" in s and "\nbare_fn(x?: number)\n" in s and "weird(a?: any)" in s
    assert s.endswith("<|im_start|>assistant\n")
    assert chat.tool_signature(tools[0], with_description=True).endswith(" - Search the web.")
    deep = {"type": "object", "properties": {"a": {}}}
    for _ in range(20):
        deep = {"type": "object", "properties": {"a": deep}}
    chat.schema_type(deep)  # depth-guarded, no recursion error


def test_streaming_prefix_and_openai_calls():
    assert chat.content_prefix("Hello <tool") == "Hello "
    assert chat.content_prefix("Hello <tool_call>{") == "Hello "
    assert chat.content_prefix("Hello <b>") == "Hello <b>"
    calls = chat.openai_tool_calls([{"name": "f", "arguments": {"a": "é"}}])
    assert calls == [{"id": "call_0", "type": "function", "function": {"name": "f", "arguments": '{"a": "é"}'}}]
