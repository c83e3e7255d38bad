"""What the grammars remember is theirs: bounded, least recently used out first, never keyed by
``id()``; a grounded request's states go to its own copy's caches, not the shared grammar's; and
importing the engine changes nothing in the interpreter (the budgets' ``gc`` callback comes with
the first budget)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clover.data.tokenizer import CloverTokenizer
from clover.engine.grammar import TokenGrammar, TokenTable, closing, tool_call_grammar
from clover.engine.grammar.lru import LRU

ENGINE = Path(__file__).parents[2] / "clover" / "engine"
BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"
TOOLS = {
    "recall_drone": {
        "type": "object",
        "properties": {"drone_id": {"type": "string", "x-grounded": True}},
        "required": ["drone_id"],
    }
}
CALL = b'<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-'


def test_lru_keeps_the_most_recently_used():
    c = LRU(2)
    c["a"], c["b"] = 1, 2
    assert c.get("a") == 1  # now the most recent
    c["c"] = 3
    assert "b" not in c and c.get("a") == 1 and c.get("c") == 3 and len(c) == 2
    assert c.get("b", "none") == "none"
    with pytest.raises(ValueError):
        LRU(0)


def test_no_cache_in_the_engine_is_keyed_by_id():
    for path in ENGINE.rglob("*.py"):
        if path.name != "json_schema.py":  # its id map holds each schema object it names (no reuse)
            assert "id(" not in path.read_text(), path


def test_importing_the_engine_leaves_gc_callbacks_alone():
    code = (
        "import gc; before = list(gc.callbacks)\n"
        "import clover.engine, clover.engine.grammar, clover.engine.grammar.closing\n"
        "import clover.engine.grammar.budget as b\n"
        "assert gc.callbacks == before, gc.callbacks\n"
        "b.work_time(); assert len(gc.callbacks) == len(before) + 1\n"
        "b.work_time(); assert len(gc.callbacks) == len(before) + 1\n"
    )
    root = Path(__file__).parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env={"PYTHONPATH": str(root)}, timeout=120)


@pytest.fixture(scope="module")
def table():
    return TokenTable(CloverTokenizer.load(BUNDLED))


def test_a_grounded_copy_has_caches_of_its_own(table):
    g = tool_call_grammar(TOOLS, "<tool_call>", "</tool_call>", '{"name": "')
    tg = TokenGrammar(g, table, [0])
    tg.allowed(tg.start)
    closing.cost(tg, tg.start)
    shared = len(g.allowed_cache), len(g.costs), len(g.endings)
    assert all(shared)
    copy = g.with_sources({"user": "recall drone D-17 please", "conversation": "recall drone D-17 please"})
    assert copy.allowed_cache is not g.allowed_cache and copy.costs is not g.costs
    tc = TokenGrammar(copy, table, [0])
    state = copy.advance(tc.start, CALL)  # inside the grounded value
    assert state is not None and tc.allowed(state)
    closing.cost(tc, state)
    assert (len(g.allowed_cache), len(g.costs), len(g.endings)) == shared  # the shared grammar's untouched
    assert len(copy.allowed_cache) and len(copy.costs)


def test_the_allowed_sets_are_bounded_per_grammar(table, monkeypatch):
    g = tool_call_grammar(TOOLS, "<tool_call>", "</tool_call>", '{"name": "')
    g.allowed_cache = LRU(3)
    tg = TokenGrammar(g, table, [0])
    state, states = tg.start, []
    for b in CALL[:20]:
        states.append(state)
        state = g.advance(state, bytes([b]))
    for s in states:
        tg.allowed(s)
    assert len(g.allowed_cache) == 3
    assert (table, tg.key, states[-1]) in g.allowed_cache and (table, tg.key, states[0]) not in g.allowed_cache
