"""Budget-aware closing (``clover.engine.grammar.closing``): the shortest ending of a grammar state, checked
against a brute-force search over bytes, and decoding that always ends within ``max_tokens``."""

import gc
import json
import time
from collections import deque
from pathlib import Path

import jsonschema
import pytest
import torch

from clover.data.tokenizer import CloverTokenizer
from clover.engine import Engine, ParamError, SamplingParams
from clover.engine.grammar import TokenGrammar, TokenTable, closing, json_grammar, regex_grammar, tool_call_grammar
from clover.engine.grammar.budget import work_time
from clover.model import CloverForBlockDiffusion, preset

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"
FLAT = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["survey", "mapping", "patrol"]},
        "n": {"type": "integer"},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "kind", "n"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {
        "legs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"at": {"type": "string"}, "alt": {"type": "number", "minimum": 30}},
                "required": ["at", "alt"],
                "additionalProperties": False,
            },
        },
        "note": {"type": ["string", "null"]},
    },
    "required": ["legs", "note"],
    "additionalProperties": False,
}
PATTERN = {
    "type": "object",
    "properties": {"id": {"type": "string", "pattern": "^D-[0-9]+$"}, "zone": {"type": "string", "maxLength": 12}},
    "required": ["id", "zone"],
    "additionalProperties": False,
}
SCHEMAS = {"flat": FLAT, "nested": NESTED, "pattern": PATTERN}
PRINTABLE = bytes(range(0x20, 0x7F))


def brute_force(g, state, limit: int = 60, max_states: int = 200_000) -> int | None:
    """The slow reference: breadth-first over every printable byte, the length of the shortest
    text that completes ``state`` (None past ``limit`` bytes or ``max_states``)."""
    if g.complete(state):
        return 0
    seen, queue = {state}, deque([(state, 0)])
    while queue and len(seen) < max_states:
        st, n = queue.popleft()
        if n >= limit:
            return None
        for b in PRINTABLE:
            nxt = g.advance(st, bytes([b]))
            if nxt is None or nxt in seen:
                continue
            if g.complete(nxt):
                return n + 1
            seen.add(nxt)
            queue.append((nxt, n + 1))
    return None


PREFIXES = {
    "flat": [
        "",
        "{",
        '{"name": "abc',
        '{"name": "a\\',
        '{"kind": "sur',
        '{"n": 12',
        '{"n": -',
        '{"ok": tr',
        '{"name": "x", "ok": true',
        '{"name": "x", ',
    ],
    "nested": [
        "",
        '{"legs": [',
        '{"legs": [{"at": "pier", "alt": 3',
        '{"legs": [{"at": "p"}',
        '{"note": nu',
        '{"note": "x", "legs": [{"alt": 31.5',
    ],
    "pattern": ['{"id": "D-', '{"id": "D-12', '{"zone": "abc', '{"zone": "abc", "id": "'],
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_shortest_ending_matches_a_brute_force_search(name):
    g = json_grammar(SCHEMAS[name])
    for prefix in PREFIXES[name]:
        state = g.advance(g.start_state, prefix.encode())
        if state is None:  # a prefix the schema refuses (written to stay inside it)
            continue
        end = closing.shortest_ending(g, state)
        assert end is not None and g.accepts(prefix.encode() + end), (prefix, end)
        ref = brute_force(g, state)
        if ref is not None:
            assert len(end) == ref, (prefix, end, ref)


def test_shortest_endings_of_strings_numbers_regexes_and_tool_calls():
    g = json_grammar({"type": "integer", "minimum": 250, "maximum": 900})
    assert closing.shortest_ending(g, g.start_state) == b"250"
    g = json_grammar({"type": "string", "format": "date"})
    end = closing.shortest_ending(g, g.start_state)
    assert g.accepts(end) and len(end) == 12  # "YYYY-MM-DD": a valid one, as short as any
    g = regex_grammar(r"[a-z]+@[a-z]+\.com")
    assert closing.shortest_ending(g, g.start_state) == b"a@a.com"
    g = json_grammar({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})
    assert closing.shortest_ending(g, g.start_state) is None  # every value holds another: no finite text
    tools = {"recall": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}, "ping": None}
    g = tool_call_grammar(tools, "<tool_call>", "</tool_call>", auto=True)
    assert closing.shortest_ending(g, g.start_state) == b""  # free text may end anywhere
    state = g.advance(g.start_state, b'Sure. <tool_call>{"name": "rec')
    assert closing.shortest_ending(g, state) == b'all", "arguments": {"id":""}}</tool_call>'


def test_searches_are_not_cut_short_by_a_busy_machine(monkeypatch):
    """The search budgets count this thread's CPU time, not the wall clock: a machine busy with
    other programs (here, a wall clock that jumps 10 s at each reading, as it does for a thread
    the scheduler keeps waiting) finds the same endings and the same allowed-token sets."""
    table = TokenTable(CloverTokenizer.load(BUNDLED))
    schema = {"type": "string", "format": "date"}
    want = closing.shortest_ending(json_grammar(schema), json_grammar(schema).start_state)
    first = TokenGrammar(regex_grammar(r"[a-z ]+ "), table, [])
    want_set = first.allowed(first.start)
    clock = [time.monotonic()]

    def jumping() -> float:
        clock[0] += 10.0
        return clock[0]

    monkeypatch.setattr(time, "monotonic", jumping)
    g = json_grammar(schema)  # a new grammar: nothing memoised
    assert want is not None and closing.shortest_ending(g, g.start_state) == want
    fresh = TokenGrammar(regex_grammar(r"[a-z ]+ "), table, [])
    assert fresh.allowed(fresh.start) == want_set and len(want_set) > 100


def _collection(cpu_s: float) -> None:
    """What the interpreter does around a full garbage collection: the callbacks at its start and
    end, and (here) ``cpu_s`` seconds of this thread's CPU time between them."""
    for cb in gc.callbacks:
        cb("start", {"generation": 2})
    t0 = time.thread_time()
    while time.thread_time() - t0 < cpu_s:
        pass
    for cb in gc.callbacks:
        cb("stop", {"generation": 2, "collected": 0, "uncollectable": 0})


def test_garbage_collections_do_not_count_against_the_budgets():
    """A full collection in a large process (a few tenths of a second) once started inside the
    date search and cut it short, so the date had no ending. The budgets' clock leaves
    collections out: a real one, and one as long as the whole search budget in the middle of it."""
    heap = [[i] for i in range(300_000)]
    t0, w0 = time.thread_time(), work_time()
    gc.collect()
    spent, worked = time.thread_time() - t0, work_time() - w0
    assert spent > 0 and worked < spent / 4, (spent, worked)
    del heap
    schema = {"type": "string", "format": "date"}
    want = closing.shortest_ending(json_grammar(schema), json_grammar(schema).start_state)
    g = json_grammar(schema)  # a new grammar: nothing memoised
    inner, calls = g.advance, [0]

    def advance(state, data):
        calls[0] += 1
        if calls[0] == 20:  # inside the breadth-first search
            _collection(2 * closing.SEARCH_BUDGET_S)
        return inner(state, data)

    g.advance = advance
    assert want is not None and closing.shortest_ending(g, g.start_state) == want
    assert calls[0] > 20


@pytest.fixture(scope="module")
def tok():
    return CloverTokenizer.load(BUNDLED)


def test_token_cost_decreases_by_one_along_the_shortest_path(tok):
    table = TokenTable(tok)
    for schema in SCHEMAS.values():
        tg = TokenGrammar(json_grammar(schema), table, tok.eos_token_ids)
        state, c = tg.start, closing.cost(tg, tg.start)
        while not tg.g.complete(state):
            (t, *_) = closing.path_tokens(tg, state)
            state = tg.step(state, t)
            assert closing.cost(tg, state) == c - 1
            c -= 1
        assert c == 1  # the stop token


@pytest.fixture(scope="module")
def random_engine(tok):
    """A random model on the bundled tokenizer: it has no idea when to close a string."""
    torch.manual_seed(0)
    cfg = preset(
        "tiny",
        vocab_size=tok.vocab_size,
        mask_token_id=tok.mask_token_id,
        eos_token_id=tok.eos_token_id,
        max_position_embeddings=1024,
        block_size=8,
    )
    return Engine(CloverForBlockDiffusion(cfg).eval(), tok)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_decoding_ends_valid_within_max_tokens(random_engine, tok, name):
    """Whatever the model wants, the text parses and validates, and it stops (not ``length``)
    within max_tokens, down to the shortest ending's own length."""
    schema = SCHEMAS[name]
    tg = TokenGrammar(json_grammar(schema), TokenTable(tok), tok.eos_token_ids)
    least = closing.cost(tg, tg.start)
    prompt = tok.encode("status as JSON")
    for max_tokens, seed, policy in [
        (least, 0, "ar"),
        (least + 3, 1, "threshold"),
        (40, 2, "threshold"),
        (40, 3, "ar"),
        (64, 4, "threshold"),
    ]:
        params = SamplingParams(
            max_tokens=max_tokens, grammar=json_grammar(schema), temperature=1.0, seed=seed, policy=policy
        )
        out = random_engine.generate(prompt, params)
        assert out.finish_reason == "stop", (max_tokens, out.text)
        assert len(out.token_ids) < max_tokens
        jsonschema.validate(json.loads(out.text), schema)


def test_too_few_tokens_for_any_complete_text_is_refused(random_engine, tok):
    tg = TokenGrammar(json_grammar(NESTED), TokenTable(tok), tok.eos_token_ids)
    least = closing.cost(tg, tg.start)
    with pytest.raises(ParamError, match=f"max_tokens {least - 1} is too small .* takes {least} tokens"):
        random_engine.add_request(tok.encode("x"), SamplingParams(max_tokens=least - 1, grammar=json_grammar(NESTED)))
