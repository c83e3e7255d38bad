"""``clover train --data``: users' fine-tuning files as they come (OpenAI's format and its legacy
and loose variants), read into what training sees, and bad files refused in one line that names
the file, the line and the problem, before anything is written to ``--out``."""

import argparse
import json
import random
from pathlib import Path

import pytest

from clover.data.chat import render
from clover.train.recipes import encode_example, fit_to_length, read_chat_jsonl

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _tok():
    from clover.data.tokenizer import CloverTokenizer

    return CloverTokenizer.load(BUNDLED)


def _file(tmp_path, *lines, raw: bytes | None = None) -> Path:
    p = tmp_path / "chats.jsonl"
    p.write_bytes(raw if raw is not None else "\n".join(json.dumps(x) for x in lines).encode() + b"\n")
    return p


def _refused(p: Path, line: int | None, *words: str) -> str:
    with pytest.raises(ValueError) as e:
        read_chat_jsonl(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: " if line else f"{p}: "), msg
    assert all(w in msg for w in words) and "\n" not in msg, msg
    return msg


def _call(args):
    return {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": args}}


def test_bom_crlf_blank_lines_and_a_last_line_without_newline_are_read(tmp_path):
    g = json.dumps(GOOD)
    p = _file(tmp_path, raw=("\ufeff" + g + "\r\n\r\n  \r\n" + g).encode())
    assert [e["messages"] for e in read_chat_jsonl(p)] == [GOOD["messages"]] * 2
    assert [e["line"] for e in read_chat_jsonl(p)] == [1, 4]
    cr = _file(tmp_path, raw=(g + "\r" + g + "\r").encode())  # old Mac line ends: two lines, not one
    assert [e["line"] for e in read_chat_jsonl(cr)] == [1, 2]


def test_unreadable_files_are_one_line_naming_the_file_and_line(tmp_path):
    g = json.dumps(GOOD)
    _refused(_file(tmp_path, raw=(g + "\n").encode() + '{"x": "caf\xe9"}\n'.encode("latin-1")), 2, "not UTF-8")
    _refused(
        _file(tmp_path, raw=(g + "\n{" + '"a": ' * 0 + "[" * 100_000 + "]" * 100_000 + "}\n").encode()),
        2,
        "not valid JSON",
    )
    _refused(_file(tmp_path, raw=(g + "\n" + "1" * 5000 + "\n").encode()), 2, "not valid JSON")  # int digit limit
    _refused(
        _file(
            tmp_path,
            raw=(
                g + '\n{"messages": [{"role": "user", "content": "\\ud800"}, {"role": "assistant", "content": "y"}]}\n'
            ).encode(),
        ),
        2,
        "surrogate",
    )
    _refused(_file(tmp_path, raw=b""), None, "no examples")
    _refused(tmp_path, None, "is a directory")
    _refused(tmp_path / "missing.jsonl", None, "no such file")


def test_malformed_messages_are_refused_by_place(tmp_path):
    def bad(msgs, *words, **top):
        _refused(_file(tmp_path, GOOD, {"messages": msgs, **top}), 2, *words)

    user = {"role": "user", "content": "q"}
    bad(
        [user, {"role": "assistant", "content": None, "tool_calls": [_call('{"city": "Oslo"')]}],
        "messages[1].tool_calls[0].function.arguments is not valid JSON",
    )
    bad([user, {"role": "assistant", "content": None, "tool_calls": [_call("[1, 2]")]}], "must be a JSON object")
    bad([user, {"role": "assistant", "tool_calls": [_call("[" * 100_000)]}], "arguments is not valid JSON (nested")
    bad(
        [user, {"role": "assistant", "tool_calls": {"function": {"name": "f"}}}],
        "messages[1].tool_calls must be a list",
    )
    bad(
        [user, {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}],
        "messages[1].tool_calls[0] needs a function name",
    )
    bad([{"role": "user", "content": 5}, {"role": "assistant", "content": "y"}], "messages[0].content must be")
    bad(
        [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "assistant", "content": "a cat"},
        ],
        "messages[0].content[0]",
        "'image_url'",
    )
    bad([user, {"role": "assistant", "content": ""}], "messages[1]", "no content and no tool_calls")
    bad(["hi", {"role": "assistant", "content": "y"}], "messages[0] must be an object")
    bad([{"content": "q"}, {"role": "assistant", "content": "y"}], "messages[0]: unknown role None")
    bad(GOOD["messages"], "tools[0]", "not a function tool", tools=[1])
    bad(GOOD["messages"], "tools[0] needs a function name", tools=[{"type": "function", "function": {}}])


def test_openai_arguments_strings_list_parts_and_developer_render_as_the_template_does(tmp_path):
    def conv(args, content):
        return {
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": content},
                {"role": "assistant", "content": None, "tool_calls": [_call(args)]},
                {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{}"},
                {"role": "assistant", "content": "ok"},
            ],
            "tools": [WEATHER],
        }

    as_string = conv('{"city":"Oslo"}', [{"type": "text", "text": "weather"}, {"type": "text", "text": "Oslo?"}])
    as_dict = conv({"city": "Oslo"}, "weather\nOslo?")
    a, b = read_chat_jsonl(_file(tmp_path, as_string, as_dict))
    assert render(a["messages"], a["tools"]) == render(b["messages"], b["tools"])
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>' in render(a["messages"])


def test_legacy_functions_and_function_call_read_as_tools_and_tool_calls(tmp_path):
    legacy = {
        "messages": [
            {"role": "user", "content": "weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            },
            {"role": "function", "name": "get_weather", "content": '{"temp": 3}'},
            {"role": "assistant", "content": "3 degrees."},
        ],
        "functions": [WEATHER["function"]],
    }
    modern = {
        "messages": [
            legacy["messages"][0],
            {"role": "assistant", "content": None, "tool_calls": [_call('{"city": "Oslo"}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 3}'},
            legacy["messages"][3],
        ],
        "tools": [WEATHER],
    }
    a, b = read_chat_jsonl(_file(tmp_path, legacy, modern))
    assert render(a["messages"], a["tools"]) == render(b["messages"], b["tools"])
    assert "get_weather(city: string)" in render(a["messages"], a["tools"])
    bad = {**legacy, "messages": legacy["messages"][:2], "tools": [WEATHER]}
    _refused(_file(tmp_path, bad), 1, "functions and tools cannot be combined")


def test_weight_zero_assistant_turns_are_context_never_targets(tmp_path):
    ex = {
        "messages": [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "BAD ANSWER", "weight": 0},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "good", "weight": 1},
        ]
    }
    (ex,) = read_chat_jsonl(_file(tmp_path, ex))
    tok = _tok()
    for seed in range(12):
        ids, tgt = encode_example(tok, ex, 512, 32, random.Random(seed))
        assert "BAD" in tok.decode(ids)  # still the history
        assert "BAD" not in tok.decode([i for i, t in zip(ids, tgt) if t]) and any(tgt)
    _refused(
        _file(
            tmp_path,
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 0}]},
        ),
        1,
        "no assistant message with weight 1",
    )
    _refused(
        _file(
            tmp_path,
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 0.5}]},
        ),
        1,
        "messages[1].weight must be 0 or 1",
    )


def test_answers_past_max_len_are_never_targets(tmp_path):
    long_q = {"messages": [{"role": "user", "content": "x " * 2000}, {"role": "assistant", "content": "ok"}]}
    late = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "early"},
            {"role": "user", "content": "x " * 2000},
            {"role": "assistant", "content": "LATE"},
        ]
    }
    long_a = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "y " * 2000}]}
    data = read_chat_jsonl(_file(tmp_path, GOOD, long_q, late, long_a))
    tok = _tok()
    kept, dropped, cut = fit_to_length(tok, data, 512)
    assert dropped == [2] and cut == [4] and [e["line"] for e in kept] == [1, 3, 4]
    for seed in range(8):  # the late turn is history only: "early" is always the target
        ids, tgt = encode_example(tok, kept[1], 512, 32, random.Random(seed))
        assert "early" in tok.decode([i for i, t in zip(ids, tgt) if t])


def test_cli_checks_the_data_before_writing_to_out(tmp_path, capsys):
    from clover.commands.train import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    out = tmp_path / "run"

    def train(data):
        args = parser.parse_args(
            [
                "train",
                "--data",
                str(data),
                "--out",
                str(out),
                "--init-from",
                str(BUNDLED),
                "--steps",
                "1",
                "--threads",
                "1",
                "--no-progress",
            ]
        )
        with pytest.raises(SystemExit) as e:
            args.func(args)
        return str(e.value)

    too_long = _file(
        tmp_path, {"messages": [{"role": "user", "content": "x " * 2000}, {"role": "assistant", "content": "ok"}]}
    )
    from clover.data.task import all_recipes

    limit = all_recipes()["airspace"]().max_len  # the default recipe's (clover train's --recipe)
    assert train(too_long).startswith(
        f"clover train: {too_long}: no example has an answer within its first {limit} tokens"
    )
    assert train(tmp_path / "nope.jsonl") == f"clover train: {tmp_path / 'nope.jsonl'}: no such file"
    assert not out.exists()
