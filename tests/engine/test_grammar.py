"""Structured output: the JSON / JSON Schema / tool-call automaton, and decoding under it."""

import json
from pathlib import Path

import pytest
import torch

from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data.chat import TOOL_CLOSE, TOOL_OPEN, parse_assistant, render
from clover.data.tokenizer import CloverTokenizer
from clover.engine import Engine, SamplingParams
from clover.engine.grammar import (
    GrammarError,
    TokenGrammar,
    TokenTable,
    choice_grammar,
    json_grammar,
    regex_grammar,
    tool_call_grammar,
)
from clover.engine.grammar.budget import work_time
from clover.model.io import load_model

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"
SCHEMA = {
    "type": "object",
    "properties": {
        "drone_id": {"type": "string"},
        "count": {"type": "integer"},
        "kind": {"enum": ["survey", "mapping"]},
        "alt": {"type": ["number", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["drone_id", "kind"],
}


@pytest.mark.parametrize(
    "text, ok",
    [
        ("{}", True),
        ('{"a": 1}', True),
        ('{"a": [1, -2.5e3, "x", null, true, {"b": false}]}', True),
        ('{ "a" : -0.5 }', True),
        ('{"a": "\\u00e9\\n\\"q\\""}', True),
        ('{"é": "ü"}', True),
        ('{"a": 01}', False),
        ('{"a": 1,}', False),
        ("[1]", False),
        ('{"a": 1} ', False),
        (' {"a": 1}', False),
        ('{"a": 1, "a": 2}', False),
        ('{"a": "x\ny"}', False),
        ('{"a": tru}', False),
        ('{"a": 1.}', False),
    ],
)
def test_json_object(text, ok):
    assert json_grammar({"type": "object"}).accepts(text) is ok


@pytest.mark.parametrize(
    "text, ok",
    [
        ('{"drone_id": "D-1", "kind": "survey"}', True),
        ('{"kind": "mapping", "drone_id": "x", "count": 3}', True),
        ('{"drone_id": "D-1", "kind": "survey", "alt": null, "tags": ["a", "b"]}', True),
        ('{"drone_id": "D-1"}', False),  # required kind missing
        ('{"drone_id": "D-1", "kind": "surveys"}', False),
        ('{"drone_id": 5, "kind": "survey"}', False),
        ('{"drone_id": "D-1", "kind": "survey", "x": 1}', False),  # not a listed property
        ('{"drone_id": "D-1", "kind": "survey", "count": 1.5}', False),
        ('{"drone_id": "D-1", "kind": "survey", "tags": ["a", "b", "c"]}', False),
    ],
)
def test_json_schema(text, ok):
    assert json_grammar(SCHEMA).accepts(text) is ok


def test_schema_features_refs_unions_and_errors():
    rec = {
        "$defs": {
            "n": {
                "type": "object",
                "required": ["v", "next"],
                "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}},
            }
        },
        "$ref": "#/$defs/n",
    }
    g = json_grammar(rec)
    assert g.accepts('{"v": 1, "next": {"v": 2, "next": null}}') and not g.accepts('{"v": 1}')
    assert json_grammar({"enum": [1, 2, 12]}).accepts("12") and not json_grammar({"enum": [1, 2, 12]}).accepts("13")
    empty = json_grammar({"type": "object", "properties": {}})  # listed properties only: none
    assert (
        empty.accepts("{}") and not empty.accepts('{"a": 1}') and json_grammar({"type": "object"}).accepts('{"a": 1}')
    )
    assert json_grammar(None).accepts("42") and json_grammar(
        {"type": "object", "additionalProperties": True, "properties": {"a": {"type": "string"}}}
    ).accepts('{"b": 1}')
    for bad in ({"type": "weird"}, {"$ref": "https://x/y.json"}, {"$ref": "#/nowhere"}, {"enum": []}, False):
        with pytest.raises(GrammarError):
            json_grammar(bad)


def test_tool_call_grammar_prefills_and_parallel_calls():
    tools = {
        "recall_drone": {"type": "object", "properties": {"drone_id": {"type": "string"}}, "required": ["drone_id"]},
        "get_drone_status": None,
    }
    call = '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-1"}}</tool_call>'
    g = tool_call_grammar(tools, TOOL_OPEN, TOOL_CLOSE)
    bare = '<tool_call>{"name": "get_drone_status", "arguments": {}}</tool_call>'
    assert g.accepts(call) and g.accepts(call + "\n" + bare)
    # no parameters declared (OpenAI: an empty parameter list): {} only, no key can wander in
    assert not g.accepts(call.replace("recall_drone", "get_drone_status"))
    assert not g.accepts(call.replace("recall_drone", "recall")) and not g.accepts(call[:-1])
    one = tool_call_grammar(tools, TOOL_OPEN, TOOL_CLOSE, parallel=False, started='<tool_call>{"name": "recall')
    assert one.accepts(call[len('<tool_call>{"name": "recall') :]) and not one.accepts(call[30:] + "\n" + call)
    with pytest.raises(GrammarError):
        tool_call_grammar(tools, TOOL_OPEN, TOOL_CLOSE, started='<tool_call>{"name": "launch')
    # at most one space between a call's JSON tokens: compact and json.dumps' spacing pass,
    # the newline padding a model emits for a tool it does not know cannot start
    assert g.accepts(call.replace('{"drone_id": ', '{ "drone_id":'))
    assert g.accepts(call.replace('{"drone_id": ', '{"drone_id":'))
    for padded in ('{\n"drone_id": ', '{"drone_id":  ', '{"drone_id":\t'):
        assert not g.accepts(call.replace('{"drone_id": ', padded))
    assert not tool_call_grammar(tools, TOOL_OPEN, TOOL_CLOSE, auto=True).accepts(
        "Sure. " + call.replace(": {", ": {\n")
    )
    # response_format JSON is written compactly too: at most one space between tokens
    assert json_grammar(None).accepts('{"a": [1, 2]}') and json_grammar(None).accepts('{"a":[1,2]}')
    assert not json_grammar(None).accepts('{\n  "a": [1]\n}') and not json_grammar(None).accepts('{"a":  1}')


@pytest.fixture(scope="module")
def bundled():
    torch.set_num_threads(1)
    tok = CloverTokenizer.load(BUNDLED)
    return Engine(load_model(BUNDLED), tok), tok


def _prompt(tok, msg):
    return tok.encode(render([{"role": "user", "content": msg}], AIRSPACE_TOOLS, add_generation_prompt=True))


def test_token_level_allowed_sets_agree_with_the_byte_automaton(bundled):
    _, tok = bundled
    tg = TokenGrammar(json_grammar(SCHEMA), TokenTable(tok), tok.eos_token_ids)
    text = '{"drone_id": "D-17", "kind": "mapping", "tags": ["north pier"]}'
    state = tg.start
    for t in tok.encode(text):
        allowed = tg.allowed(state)
        assert t in allowed and tok.eos_token_id not in allowed
        # the allowed set is exactly the tokens whose bytes continue the text (slow reference: every token)
        ref = [i for i in range(tok.vocab_size) if tg.step(state, i) is not None]
        assert sorted(allowed) == sorted(ref)
        state = tg.step(state, t)
    assert tg.allowed(state) == tok.eos_token_ids[: len(tg.allowed(state))] and tg.g.complete(state)


MESSAGES = [
    "Assign drone 17 to survey the north pier.",
    "Recall UAV 12 and lift the no-fly zone Market Square.",
    "What's going on with drone 8?",
    "Move waypoint 3 of D-46 to 12.5, 49.8 at 110 m.",
]


@pytest.mark.parametrize("policy", ["ar", "threshold"])
def test_decoding_under_a_grammar(bundled, policy):
    """Under the tool-call grammar every output parses into calls valid for their schemas; with
    ``ar`` it equals the unconstrained output wherever that was already valid (masking the
    leftmost position never changes an allowed argmax: the slow reference)."""
    engine, tok = bundled
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in AIRSPACE_TOOLS}
    g = tool_call_grammar(schemas, TOOL_OPEN, TOOL_CLOSE)
    for msg in MESSAGES:
        ids = _prompt(tok, msg)
        free = engine.generate(ids, SamplingParams(max_tokens=120, policy=policy))
        out = engine.generate(ids, SamplingParams(max_tokens=120, policy=policy, grammar=g))
        assert out.finish_reason == "stop" and g.accepts(out.text), out.text
        calls = parse_assistant(out.text)[1]
        for c in calls:
            props = schemas[c["name"]]["properties"]
            assert set(c["arguments"]) <= set(props) and set(schemas[c["name"]]["required"]) <= set(c["arguments"])
        if policy == "ar" and g.accepts(free.text):
            assert out.token_ids == free.token_ids
        if policy == "threshold":
            assert out.stats["forward_passes"] < len(out.token_ids)  # several tokens per pass still


def test_a_constrained_run_goes_as_far_as_its_policy_says(bundled):
    """Under a grammar a row commits left to right, as far as its policy calls the positions sure
    (``Policy.extends``): the threshold reaches the grammar commit through the policy only."""
    from clover.engine.policies import POLICIES, Threshold, register

    class Eager(Threshold):  # every grammatical position joins the run, whatever the threshold
        name = "test-eager"

        def extends(self, v):
            return torch.ones_like(v.cand)

    engine, tok = bundled
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in AIRSPACE_TOOLS}
    g = tool_call_grammar(schemas, TOOL_OPEN, TOOL_CLOSE)
    ids = _prompt(tok, MESSAGES[0])
    register(Eager())
    try:
        passes = {}
        for policy in ("test-eager", "threshold", "ar"):
            out = engine.generate(ids, SamplingParams(max_tokens=120, policy=policy, threshold=1.0, grammar=g))
            assert out.finish_reason == "stop" and g.accepts(out.text), (policy, out.text)
            passes[policy] = out.stats["forward_passes"] / len(out.token_ids)
    finally:
        del POLICIES["test-eager"]
    assert passes["test-eager"] < passes["threshold"] and passes["ar"] >= 1


def test_grammar_json_mode_with_sampling_always_parses(bundled):
    engine, tok = bundled
    g = json_grammar(SCHEMA)
    ids = tok.encode(
        render([{"role": "user", "content": "status of drone 4 as JSON"}], None, add_generation_prompt=True)
    )
    for seed in range(4):
        out = engine.generate(ids, SamplingParams(max_tokens=200, temperature=1.0, seed=seed, grammar=g))
        if out.finish_reason == "stop":
            d = json.loads(out.text)
            assert d["kind"] in ("survey", "mapping") and set(d) <= set(SCHEMA["properties"])
        else:  # cut by max_tokens: still a prefix the grammar accepts
            assert g.advance(g.start_state, out.text.encode()) is not None


def test_grammar_params_are_checked():
    with pytest.raises(ValueError, match="grammar"):
        SamplingParams(grammar={"type": "object"})
    with pytest.raises(ValueError, match="combined"):
        SamplingParams(grammar=json_grammar(None), allowed={0: [1]})


def test_constrained_requests_are_batch_invariant(bundled):
    """Grammar rows and free rows in one batch give what each gives alone."""
    engine, tok = bundled
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in AIRSPACE_TOOLS}
    grammars = [tool_call_grammar(schemas, TOOL_OPEN, TOOL_CLOSE, auto=True), None, json_grammar(SCHEMA), None]
    prompts = [_prompt(tok, m) for m in MESSAGES]
    params = [
        SamplingParams(max_tokens=60, grammar=g, policy=p)
        for g, p in zip(grammars, ["threshold", "threshold", "prefix", "ar"])
    ]
    alone = [engine.generate(ids, p).token_ids for ids, p in zip(prompts, params)]
    together = [o.token_ids for o in engine.generate_batch(prompts, params)]
    assert together == alone


def test_tool_schemas_in_the_wild_compile_leniently():
    """Python-flavoured type names (BFCL's "dict", "float", "tuple", "any") are understood, and in
    tool schemas a part that cannot be compiled admits any value instead of failing the request."""
    params = {
        "type": "dict",
        "required": ["city"],
        "properties": {
            "city": {"type": "string"},
            "coords": {"type": "tuple", "items": {"type": "float"}},
            "extra": {"type": "any"},
            "odd": {"type": "weird"},
            "tuple_items": {"items": [{"type": "integer"}]},
        },
    }
    g = tool_call_grammar({"get_weather": params}, TOOL_OPEN, TOOL_CLOSE)
    args = {"city": "Oslo", "coords": [59.9, 10.7], "extra": {"a": [1]}, "odd": True, "tuple_items": ["x"]}
    assert g.accepts('<tool_call>{"name": "get_weather", "arguments": ' + json.dumps(args) + "}</tool_call>")
    assert not g.accepts(
        '<tool_call>{"name": "get_weather", "arguments": {"coords": [1]}}</tool_call>'
    )  # city required
    with pytest.raises(GrammarError, match="weird"):
        json_grammar({"type": "weird"})  # an explicit response_format schema stays strict


def test_each_request_ends_on_its_own_stop_tokens(bundled):
    """The token table is shared by an engine's requests; the stop tokens are each request's own
    (and share the grammar's allowed-set cache without mixing)."""
    _, tok = bundled
    table, g = TokenTable(tok), json_grammar({"enum": [True]})
    a, b = TokenGrammar(g, table, [tok.eos_token_id]), TokenGrammar(g, table, [tok.eos_token_id, 5])
    end = g.advance(g.start_state, b"true")
    assert a.allowed(end) == [tok.eos_token_id] and b.allowed(end) == sorted({tok.eos_token_id, 5})
    assert 5 not in b.allowed(g.start_state) and b.step(g.start_state, 5) is None  # a stop token ends, never spells


def test_malformed_schemas_are_grammar_errors_not_crashes():
    """Mistyped keywords were TypeErrors deep in the compiler (a traceback from
    ``clover generate --json-schema``); now a GrammarError that says where."""
    from clover.engine.grammar import GrammarError, json_grammar

    for bad, where in (
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": 5}, "#/required"),
        ({"type": "object", "properties": {"a": {"type": 5}}}, "#/properties/a/type"),
        ({"type": "array", "minItems": -1}, "#/minItems"),
        ({"anyOf": {"type": "string"}}, "#/anyOf"),
    ):
        with pytest.raises(GrammarError, match=f"invalid JSON Schema at {where}"):
            json_grammar(bad)
    deep: dict = {"type": "string"}
    for _ in range(200):
        deep = {"type": "array", "items": deep}
    with pytest.raises(GrammarError, match="nests more than"):
        json_grammar(deep)
    g = json_grammar({"type": "object", "properties": {"a": {"type": "string", "required": True}}, "required": None})
    assert g.accepts('{"a": "x"}') and not g.accepts("{}")  # draft-3 flag honoured, null dropped


@pytest.mark.parametrize(
    "pattern, text, ok",
    [
        (r"D-\d{1,3}", "D-17", True),
        (r"D-\d{1,3}", "D-1234", False),
        (r"D-\d{1,3}", "D-", False),
        (r"(yes|no)", "yes", True),
        (r"(yes|no)", "yesno", False),
        (r"[a-z ]+", "north pier", True),
        (r"\d{2}:\d{2}", "18:00", True),
        (r"\d{2}:\d{2}", "6pm", False),
        (r"café|tea", "café", True),
        (r"(?i)ok", "OK", True),
        (r"a*", "", True),
    ],
)
def test_regex_grammar_is_a_full_match(pattern, text, ok):
    import regex

    g = regex_grammar(pattern)
    assert g.accepts(text) == ok == bool(regex.fullmatch(pattern, text))
    # every prefix of a match may continue; a byte that leaves the pattern's prefixes is refused at once
    if ok:
        data = text.encode()
        assert all(g.advance(g.start_state, data[:i]) is not None for i in range(len(data) + 1))


def test_regex_grammar_utf8_pieces_and_errors():
    g = regex_grammar("caf(é|e)")
    half = g.advance(g.start_state, b"caf" + "é".encode()[:1])  # the first byte of é: may go on
    assert half is not None and not g.complete(half)
    assert g.advance(half, "é".encode()[1:]) is not None and g.accepts("café")
    assert g.advance(g.start_state, b"caf\xff") is None and g.advance(g.start_state, b"cafx") is None
    for bad in ["(", "", "a" * 5000, "[z-a]"]:
        with pytest.raises(GrammarError):
            regex_grammar(bad)


def test_choice_and_regex_token_sets_agree_with_the_slow_reference(bundled):
    """Allowed tokens under a regex are exactly those whose text keeps a full match possible
    (slow reference: ``regex.fullmatch(partial=True)`` on every token's text); a token that
    ends one byte short of a character is allowed where one of its endings could follow."""
    import regex

    _, tok = bundled
    table = TokenTable(tok)

    def viable(pattern, data: bytes) -> bool:
        try:
            return bool(regex.fullmatch(pattern, data.decode(), regex.ASCII, partial=True))
        except UnicodeDecodeError as e:
            if e.reason != "unexpected end of data":
                return False
            head, tail = data[: e.start], data[e.start :]  # tail: a character cut short
            need = (2 if tail[0] < 0xE0 else 3 if tail[0] < 0xF0 else 4) - len(tail)
            if need > 1:  # too many endings to check: refused
                return False
            return any(viable(pattern, head + tail + bytes([c])) for c in range(0x80, 0xC0))

    for pattern, text in [(r"D-\d{1,3} (survey|mapping)", "D-17 mapping"), (r"caf(é|e) [a-zé]+", "café ézé")]:
        tg = TokenGrammar(regex_grammar(pattern), table, tok.eos_token_ids)
        state, done = tg.start, b""
        for t in tok.encode(text):
            ref = [i for i, bs in enumerate(table.bytes) if bs and i not in table.atomic and viable(pattern, done + bs)]
            if regex.fullmatch(pattern, done.decode("utf-8", "replace"), regex.ASCII):  # a full match may end: EOS too
                ref += tok.eos_token_ids
            assert sorted(tg.allowed(state)) == sorted(ref)
            state, done = tg.step(state, t), done + table.bytes[t]
        assert tg.g.complete(state)
    cg = TokenGrammar(choice_grammar([("", ["survey", "search_and_rescue"])]), table, tok.eos_token_ids)
    assert all(
        tok.decode([i]) and ("survey".startswith(tok.decode([i])) or "search_and_rescue".startswith(tok.decode([i])))
        for i in cg.allowed(cg.start)
    )


@pytest.mark.parametrize("policy", ["ar", "threshold"])
def test_decoding_under_a_regex_and_a_choice(bundled, policy):
    import regex

    engine, tok = bundled
    ids = _prompt(tok, "Recall drone 17.")
    for g, ok in [
        (regex_grammar(r"D-\d{1,4}"), lambda s: regex.fullmatch(r"D-\d{1,4}", s)),
        (choice_grammar([("", ["yes", "no", "maybe later"])]), lambda s: s in ("yes", "no", "maybe later")),
    ]:
        for seed in range(3):
            out = engine.generate(
                ids, SamplingParams(max_tokens=12, policy=policy, grammar=g, temperature=1.0, seed=seed)
            )
            assert out.finish_reason == "stop" and ok(out.text), out.text


def test_a_grammar_dead_end_ends_the_request(bundled):
    """Where no token continues the text (here: a four-byte character this tokenizer only spells
    byte by byte), the request ends instead of passing forever."""
    engine, tok = bundled
    g = regex_grammar("🚁 D-\\d")
    assert not TokenGrammar(g, TokenTable(tok), tok.eos_token_ids).allowed(g.start_state)
    out = engine.generate(_prompt(tok, "Recall drone 17."), SamplingParams(max_tokens=8, grammar=g))
    assert out.finish_reason == "stop" and out.text == ""


def test_a_slow_regex_cannot_stall_the_engine(bundled, monkeypatch):
    """The allowed-token set under a regular expression is computed within a time budget: past
    it, the tokens found so far (all valid)."""
    import clover.engine.grammar.tokens as grammar

    _, tok = bundled
    full = TokenGrammar(regex_grammar(r"[a-z ]+"), TokenTable(tok), tok.eos_token_ids)
    every = set(full.allowed(full.start))
    monkeypatch.setattr(grammar, "ALLOWED_BUDGET_S", 0.0)
    cut = TokenGrammar(regex_grammar(r"[a-z ]+ "), TokenTable(tok), tok.eos_token_ids)
    some = cut.allowed(cut.start)
    assert len(every) > 100 and set(some) < every and all(cut.step(cut.start, t) is not None for t in some)


@pytest.mark.parametrize(
    "schema, text, ok",
    [
        ({"type": "string", "pattern": "^D-\\d+$"}, '"D-17"', True),
        ({"type": "string", "pattern": "^D-\\d+$"}, '"D-x"', False),
        ({"type": "string", "pattern": "^D-\\d+$"}, '"D-17 "', False),
        ({"type": "string", "pattern": "\\d"}, '"ab1c"', True),
        ({"type": "string", "pattern": "\\d"}, '"abc"', False),
        ({"type": "string", "pattern": "^a\\nb$"}, '"a\\nb"', True),
        ({"type": "string", "pattern": "^café$"}, '"café"', True),
        ({"type": "string", "pattern": "^café$"}, '"caf\\u00e9"', False),
        ({"type": "string", "pattern": "^\\d$"}, '"߂"', False),
        ({"type": ["string", "integer"], "pattern": "^x$"}, "12", True),
        ({"properties": {"t": {"type": "string", "pattern": "^\\d{2}:\\d{2}$"}}}, '{"t": "18:00"}', True),
        ({"properties": {"t": {"type": "string", "pattern": "^\\d{2}:\\d{2}$"}}}, '{"t": "6pm"}', False),
    ],
)
def test_a_strings_pattern_is_enforced(schema, text, ok):
    """JSON Schema's ``pattern`` (a search over the string's text, escapes decoded; no ``\\u`` escapes,
    the characters themselves; ``\\d`` and ``\\w`` ASCII, as ECMA 262)."""
    assert json_grammar(schema).accepts(text) == ok


def test_patterns_under_decoding_and_in_tool_schemas(bundled):
    engine, tok = bundled
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^D-\\d{1,3}$"}}, "required": ["id"]}
    g = json_grammar(schema)
    ids = tok.encode(render([{"role": "user", "content": "drone id as JSON"}], None, add_generation_prompt=True))
    for seed in range(3):
        out = engine.generate(ids, SamplingParams(max_tokens=40, temperature=1.0, seed=seed, grammar=g))
        if out.finish_reason == "stop":
            assert json.loads(out.text)["id"].startswith("D-"), out.text
        else:
            assert g.advance(g.start_state, out.text.encode()) is not None
    with pytest.raises(GrammarError, match="does not compile"):
        json_grammar({"type": "string", "pattern": "("})
    lenient = tool_call_grammar(
        {"f": {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}}, TOOL_OPEN, TOOL_CLOSE
    )
    assert lenient.accepts(TOOL_OPEN + '{"name": "f", "arguments": {"a": "anything"}}' + TOOL_CLOSE)


BOUNDED = {
    "type": "object",
    "properties": {
        "wp": {"type": "integer", "minimum": 1, "maximum": 12},
        "dive": {"type": "integer", "minimum": -500, "exclusiveMaximum": 0},
        "code": {"type": "string", "minLength": 2, "maxLength": 4},
        "id": {"type": "string", "maxLength": 5, "pattern": "^D-"},
    },
    "required": ["wp"],
}


@pytest.mark.parametrize(
    "text, ok",
    [
        ('{"wp": 1}', True),
        ('{"wp": 12}', True),
        ('{"wp": 0}', False),
        ('{"wp": 13}', False),
        ('{"wp": 120}', False),
        ('{"wp": -1}', False),
        ('{"wp": 01}', False),
        ('{"wp": 7, "dive": -500}', True),
        ('{"wp": 7, "dive": -1}', True),
        ('{"wp": 7, "dive": 0}', False),
        ('{"wp": 7, "dive": -501}', False),
        ('{"wp": 7, "dive": -0}', False),
        ('{"wp": 7, "code": "ab"}', True),
        ('{"wp": 7, "code": "a"}', False),
        ('{"wp": 7, "code": "abcd"}', True),
        ('{"wp": 7, "code": "abcde"}', False),
        ('{"wp": 7, "code": "\\n\\"é"}', True),  # escapes and é: one character each
        ('{"wp": 7, "id": "D-123"}', True),
        ('{"wp": 7, "id": "D-1234"}', False),
        ('{"wp": 7, "id": "X-1"}', False),
    ],
)
def test_string_lengths_and_integer_bounds_are_enforced(text, ok):
    assert json_grammar(BOUNDED).accepts(text) is ok


def test_bounds_never_leave_a_dead_end_and_token_sets_agree(bundled, monkeypatch):
    """A prefix is allowed only while a value within the bounds can still follow it (``"wp": 1``
    may become 12, ``"wp": 2`` can only end), and the token-level sets equal the slow reference."""
    import clover.engine.grammar.tokens as grammar

    monkeypatch.setattr(grammar, "ALLOWED_BUDGET_S", 600.0)  # whole sets, however slow the machine is
    g = json_grammar(BOUNDED)
    assert g.advance(g.start_state, b'{"wp": 1') is not None and g.advance(g.start_state, b'{"wp": 13') is None
    assert g.advance(g.start_state, b'{"wp": 2') is not None and g.advance(g.start_state, b'{"wp": 20') is None
    assert g.advance(g.start_state, b'{"wp": 7, "dive": -') is not None
    short = json_grammar({"type": "string", "maxLength": 3})  # UTF-8 checked: stray bytes cannot pile up uncounted
    assert short.accepts('"é😀x"') and not short.accepts('"é😀xy"')
    assert (
        short.advance(short.start_state, b'"\x80') is None
        and short.advance(short.start_state, b'"\xc3\xa9\xa9') is None
    )
    nonneg = json_grammar({"type": "integer", "minimum": 0})
    assert nonneg.advance(nonneg.start_state, b"-") is None and nonneg.accepts("0") and not nonneg.accepts("-0")
    _, tok = bundled
    tg = TokenGrammar(g, TokenTable(tok), tok.eos_token_ids)
    state = tg.start
    for t in tok.encode('{"wp": 11, "code": "xy\\n"}'):
        allowed = tg.allowed(state)
        assert t in allowed and sorted(allowed) == sorted(
            i for i in range(tok.vocab_size) if tg.step(state, i) is not None
        )
        state = tg.step(state, t)
    assert tg.g.complete(state)
    for bad, problem in (
        ({"type": "integer", "minimum": 5, "maximum": 4}, "no integer"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, "minLength 3 is above"),
        ({"type": "integer", "minimum": "one"}, "finite number"),
        ({"type": "number", "minimum": 1e30}, "beyond what 24 digits"),
    ):
        with pytest.raises(GrammarError, match=problem):
            json_grammar(bad)
    lenient = tool_call_grammar(
        {"f": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 4}}}},
        TOOL_OPEN,
        TOOL_CLOSE,
    )
    assert lenient.accepts(TOOL_OPEN + '{"name": "f", "arguments": {"n": 99}}' + TOOL_CLOSE)


@pytest.mark.parametrize(
    "fmt, value, ok",
    [
        ("date", "2026-12-04", True),
        ("date", "2026-13-04", False),
        ("date", "2026-12-4", False),
        ("time", "16:20:00Z", True),
        ("time", "16:20", False),
        ("date-time", "2026-12-04T16:20:00.5+01:00", True),
        ("date-time", "2026-12-04T16:20Z", False),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", True),
        ("uuid", "123e4567", False),
        ("email", "ops@clover.dev", True),
        ("email", "ops@clover", False),
        ("ipv4", "10.0.0.255", True),
        ("ipv4", "10.0.0.256", False),
        ("uri", "not checked", True),
    ],
)
def test_string_formats_are_enforced(fmt, value, ok):
    g = json_grammar({"type": "object", "properties": {"v": {"type": "string", "format": fmt, "maxLength": 40}}})
    assert g.accepts(json.dumps({"v": value})) is ok
    if ok and fmt == "date":  # a byte is allowed while the text can still become a date
        assert (
            g.advance(g.start_state, b'{"v": "2026-1') is not None
            and g.advance(g.start_state, b'{"v": "2026-2') is None
        )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "minimum": -90, "maximum": 90},
        {"type": "number", "exclusiveMinimum": 0, "maximum": 2.75},
        {"type": "number", "minimum": -12.5, "exclusiveMaximum": -0.25},
        {"type": "number", "minimum": 0.5, "exclusiveMaximum": 99.5},
        {"type": ["number", "null"], "maximum": 7},
        {"type": "integer", "minimum": 1, "maximum": 12},
        {"type": "integer", "exclusiveMinimum": -13, "maximum": -3},
        {"type": "integer", "maximum": 20},
    ],
)
def test_number_bounds_agree_with_a_brute_force_reference(schema):
    """Every prefix of up to 3 bytes is allowed exactly when some number of the grid (|x| < 100,
    up to 2 decimals; -0 aside) within the bounds starts with it, and the grid's numbers are
    accepted exactly when within the bounds."""
    import itertools
    from fractions import Fraction

    def inside(v):
        s = schema
        return (
            ("minimum" not in s or v >= Fraction(s["minimum"]))
            and ("maximum" not in s or v <= Fraction(s["maximum"]))
            and ("exclusiveMinimum" not in s or v > Fraction(s["exclusiveMinimum"]))
            and ("exclusiveMaximum" not in s or v < Fraction(s["exclusiveMaximum"]))
        )

    integer = schema["type"] == "integer"
    grid = [
        f"{sign}{i}{frac}"
        for sign in ("", "-")
        for i in range(100)
        for frac in ([""] if integer else ["", *(f".{f}" for f in range(10)), *(f".{f:02d}" for f in range(100))])
    ]
    grid = [s for s in grid if not (s.startswith("-") and Fraction(s) == 0)]
    good = {s for s in grid if inside(Fraction(s))}
    heads = {s[:k] for s in good for k in range(1, 4)}
    g = json_grammar(schema)
    for p in ("".join(t) for n in (1, 2, 3) for t in itertools.product("0123456789.-", repeat=n)):
        if p == "-0" or p.startswith("-0") and integer:
            continue  # -0 is 0: allowed where negatives are, though the grid writes it "0"
        assert (g.advance(g.start_state, p.encode()) is not None) == (p in heads), p
    assert all(g.accepts(s) == (s in good) for s in grid[:: 7 if integer else 97])
    assert not g.accepts("1e1") and (schema["type"] == "integer" or not g.accepts("5.")), "no exponent, no bare point"


def test_strings_are_valid_utf8():
    """Byte-level tokens can spell any bytes: inside a JSON string a byte is allowed only where
    UTF-8 allows it (a lead byte, then exactly its continuation bytes), so the output decodes."""
    cases = [
        (json_grammar({"type": "object"}), b'{"a": "'),
        (json_grammar({"type": "string", "maxLength": 5}), b'"'),
        (json_grammar(SCHEMA), b'{"drone_id": "'),
    ]
    for g, head in cases:
        for ok, body in (
            (True, "é😀x".encode()),
            (False, b"\x80"),
            (False, b'\xc3"'),
            (False, b"\xc0\xaf"),
            (False, b"\xf8"),
        ):
            assert (g.advance(g.start_state, head + body) is not None) is ok, (head, body)


def test_optional_fields_keep_their_constraints():
    """pydantic writes ``Optional[conint(ge=1, le=5)]`` as anyOf [{integer, bounds}, {null}]: the bounds
    (and a string's length, pattern or format) hold in the union when one alternative alone is of
    that kind; two numeric alternatives admit either's values (no bounds kept)."""
    opt = lambda s: {"anyOf": [s, {"type": "null"}]}
    g = json_grammar(
        {
            "type": "object",
            "properties": {
                "n": opt({"type": "integer", "minimum": 1, "maximum": 5}),
                "s": opt({"type": "string", "maxLength": 3}),
                "d": opt({"type": "string", "format": "date"}),
                "m": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "number", "maximum": 0}]},
            },
        }
    )
    for text, ok in (
        ('{"n": 3}', True),
        ('{"n": 9}', False),
        ('{"n": null}', True),
        ('{"s": "abc"}', True),
        ('{"s": "abcd"}', False),
        ('{"d": "2026-12-04"}', True),
        ('{"d": "soon"}', False),
        ('{"d": null}', True),
        ('{"m": -5}', True),
        ('{"m": 7.5}', True),
    ):
        assert g.accepts(text) is ok, text


def test_a_regex_match_cut_short_by_a_busy_machine_is_tried_again():
    """The regex library's timeout counts the wall clock. A try that timed out without spending
    half its budget of this thread's CPU time lost the time to other programs and is made again;
    one that spent it (a pattern that backtracks) is not."""
    import time

    import regex

    from clover.engine.grammar import regexes as gm

    calls = []

    def preempted(text, partial, timeout):  # the scheduler kept this thread waiting, twice
        calls.append(text)
        if len(calls) < 3:
            raise TimeoutError("regex timed out")
        return regex.fullmatch("[a-z]+", text, partial=partial)

    assert gm.timed_match(preempted, "abc", False) is not None and len(calls) == 3

    def backtracking(text, partial, timeout):
        calls.append(text)
        t0 = time.thread_time()
        while time.thread_time() - t0 < timeout:
            pass
        raise TimeoutError("regex timed out")

    calls.clear()
    with pytest.raises(TimeoutError):
        gm.timed_match(backtracking, "abc", False)
    assert len(calls) == 1
    slow = regex.compile(r"(a|aa)+$")  # exponential backtracking on a long run of a's and a b
    t0 = work_time()  # the budgets' clock: a garbage collection meanwhile does not count
    assert not gm.utf8_match(b"a" * 60 + b"b", False, lambda text, p: gm.timed_match(slow.fullmatch, text, p))
    assert work_time() - t0 < 4 * gm.REGEX_TIMEOUT_S  # treated as no match after one budget
