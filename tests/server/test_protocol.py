"""The pieces under the routes: streamed deltas from committed text, tool_choice prompts, the CLI."""

import json

import pytest

from clover.api.prepare import Limits, chat_prompt
from clover.api.replies import AssistantStream
from clover.api.schemas import ChatRequest
from clover.data.chat import parse_assistant

A = '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-17"}}</tool_call>'
B = '<tool_call>{"name": "lift_no_fly_zone", "arguments": {"zone_name": "Harbor"}}</tool_call>'


def _run(text: str, step: int, prefill: str = "") -> tuple[str, list[dict]]:
    s = AssistantStream(prefill, parse_tools=True)
    deltas = []
    for i in range(0, len(text), step):
        deltas += s.feed(text[i : i + step])
    deltas += s.finish()
    content = "".join(d.get("content", "") for d in deltas)
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    return content, calls


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_stream_deltas_equal_the_final_parse(step):
    text = "  Sure, doing both.\n" + A + "\n" + B
    content, calls = _run(text, step)
    want_content, want_calls = parse_assistant(text)
    assert content == want_content == "Sure, doing both."
    assert [c["index"] for c in calls] == [0, 1]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (c["name"], c["arguments"]) for c in want_calls
    ]


def test_partial_tag_is_held_back_and_calls_wait_for_their_close():
    s = AssistantStream("", parse_tools=True)
    assert s.feed("Hello <tool_c") == [{"content": "Hello"}]
    assert s.feed('all>{"name": "recall_drone", ') == []
    out = s.feed('"arguments": {"drone_id": "D-1"}}</tool_call>')
    assert out[0]["tool_calls"][0]["function"]["name"] == "recall_drone"
    assert s.finish() == []


def test_prefilled_call_and_plain_text():
    content, calls = _run(A[len("<tool_call>") :], 5, prefill="<tool_call>")
    assert content == "" and calls[0]["function"]["name"] == "recall_drone"
    s = AssistantStream("", parse_tools=False)
    out = s.feed(" raw <tool_call>{} ") + s.finish()
    assert "".join(d["content"] for d in out) == "raw <tool_call>{}"


def test_tool_choice_prompts(tokenizer):
    from clover.airspace.tools import AIRSPACE_TOOLS

    lim = Limits(max_prompt_tokens=100, context=200, max_block_size=64, block_size=8)
    base = {"model": "clover", "messages": [{"role": "user", "content": "hi"}], "tools": AIRSPACE_TOOLS}
    text, prefill, parse, g = chat_prompt(ChatRequest.model_validate(base), tokenizer, lim)
    assert "<tools>" in text and prefill == "" and parse
    assert (
        g.accepts("Sure.") and g.accepts(A) and g.accepts("ok " + A + "\n" + B)
    )  # auto: text, or calls held to the schemas
    assert not g.accepts(A.replace("recall_drone", "launch_drone")) and not g.accepts(A.replace("drone_id", "drone"))
    text, prefill, parse, _ = chat_prompt(ChatRequest.model_validate({**base, "tool_choice": "none"}), tokenizer, lim)
    assert "<tools>" not in text and not parse
    text, prefill, _, g = chat_prompt(ChatRequest.model_validate({**base, "tool_choice": "required"}), tokenizer, lim)
    assert prefill == '<tool_call>{"name": "' and text.endswith(prefill)
    for t in AIRSPACE_TOOLS:  # any offered function, with arguments its schema admits
        args = {
            k: 1 if v.get("type") in ("number", "integer") else "x"
            for k, v in t["function"]["parameters"]["properties"].items()
        }
        if "mission_type" in args:
            args["mission_type"] = "survey"
        assert g.accepts(t["function"]["name"] + '", "arguments": ' + json.dumps(args) + "}</tool_call>"), t
    assert not g.accepts('fly", "arguments": {}}</tool_call>')
    named = {"type": "function", "function": {"name": "recall_drone"}}
    text, prefill, _, _ = chat_prompt(ChatRequest.model_validate({**base, "tool_choice": named}), tokenizer, lim)
    assert text.endswith('<|im_start|>assistant\n<tool_call>{"name": "recall_drone') and text.endswith(prefill)
    # the prefill tokenises as the trained canonical call does
    full = tokenizer.encode(text[: -len(prefill)] + A)
    assert full[: len(tokenizer.encode(text))] == tokenizer.encode(text)


def test_one_tool_grammar_for_the_server_the_command_line_and_eval(tokenizer):
    """``tool_choice: auto`` on the server, ``clover generate --chat`` / ``clover chat`` and
    ``clover eval --grammar`` decode a chat with tools under one grammar, built in one place."""
    from clover.airspace.tools import AIRSPACE_TOOLS
    from clover.api.structured import tools_grammar

    lim = Limits(max_prompt_tokens=100, context=200, max_block_size=64, block_size=8)
    req = {"model": "clover", "messages": [{"role": "user", "content": "hi"}], "tools": AIRSPACE_TOOLS}
    served = chat_prompt(ChatRequest.model_validate(req), tokenizer, lim)[3]
    assert tools_grammar(AIRSPACE_TOOLS) is served  # compiled once, shared
    assert tools_grammar(None) is None and tools_grammar([]) is None


def test_cli_serve_is_registered_and_explains_a_missing_model(monkeypatch, tmp_path, capsys):
    import clover.data
    from clover.cli import build_parser

    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.model is None
    monkeypatch.setattr(clover.data, "DEFAULT_MODEL_DIR", tmp_path / "none")
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "no bundled model" in err
    bench = build_parser().parse_args(["bench", "serve", "--json", "x.json"])
    assert bench.concurrency == "1,8,32"
    assert build_parser().parse_args(["bench", "decisions", "--n", "5"]).n == 5


def test_half_formed_tool_markup_is_never_a_replys_words():
    """A reply with tools on offer holds no tool-call markup: what follows the first piece of it
    (a call that did not parse) is neither content nor a call, streamed or not; without tools the
    text is the text."""
    from clover.api.replies import assistant_message

    names = frozenset({"recall_drone", "get_drone_status"})
    text = 'You\'recall_drone", "arguments": {welcome.'
    assert assistant_message(text, True, None, names) == ("You'", [])
    assert assistant_message("Done.<tool_call>{bad json", True, None, names) == ("Done.", [])
    assert assistant_message(text, False) == (text, [])
    s = AssistantStream("", parse_tools=True, names=names)
    sent = [d["content"] for piece in ("You", "'re", 'call_drone", "argu', 'ments": {welcome.') for d in s.feed(piece)]
    sent += [d["content"] for d in s.finish()]
    assert "".join(sent) == "You'" and s.calls == []
