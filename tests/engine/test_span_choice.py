"""A grounded string's end chosen whole (``clover.engine.span_choice``): the grammar's end
decision (``Grammar.span_ends``, ``hold``), the candidates written in the tokens a copy is forced
to, and decoding with ``ends="span"`` against the same decoding with the slow scorer."""

from pathlib import Path

import pytest

from clover.data.tokenizer import CloverTokenizer
from clover.engine.grammar import TokenGrammar, TokenTable, json_grammar
from clover.engine.grammar.grounding import source_texts

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"
SCHEMA = {"type": "object", "properties": {"zone": {"type": "string", "x-grounded": True}}, "required": ["zone"]}
TEXT = "named Old Sevilla Wyr of Fynu; then Old Pier"


@pytest.fixture(scope="module")
def tok():
    return CloverTokenizer.load(BUNDLED)


def _grammar(ends="span"):
    return json_grammar(SCHEMA).with_sources({"user": TEXT}, ends=ends)


def test_the_end_decision_comes_once_where_a_copy_may_first_end():
    g = _grammar()
    st = g.advance(g.start_state, b'{"zone": "Ol')
    assert g.span_ends(st) is None  # no span ends inside a word
    st = g.advance(st, b"d")
    rests = g.span_ends(st)
    assert rests == [b"", b" Pier", b" Sevilla", b" Sevilla Wyr", b" Sevilla Wyr of Fynu"]
    held = g.hold(st, b" Sevilla Wyr")
    assert g.forced(held) == b" Sevilla Wyr" and g.span_ends(held) is None
    end = g.advance(held, b" Sevilla Wyr")
    assert g.advance(end, b" of") is None and g.complete(g.advance(end, b'"}'))
    assert g.advance(held, b'"') is None and g.advance(held, b" Pier") is None  # only the held rest
    with pytest.raises(ValueError):
        g.hold(st, b" Sevilla Wyr of")  # no span ends on "of"
    with pytest.raises(ValueError):
        g.hold(held, b"")  # its end is chosen already
    # a grammar that ends token by token has the same decision points; the engine asks only under "span"
    assert _grammar("token").ends == "token" and g.ends == "span"
    with pytest.raises(ValueError):
        json_grammar(SCHEMA).with_sources({"user": TEXT}, ends="longest")


def test_candidates_are_written_in_the_tokens_the_copy_is_forced_to(tok):
    from clover.engine.span_choice import span_candidates

    g = _grammar()
    tg = TokenGrammar(g, TokenTable(tok), tok.eos_token_ids)
    st = g.advance(g.start_state, b'{"zone": "Old')
    cands = span_candidates(tg, st)
    assert [r for r, _, _ in cands] == g.span_ends(st)
    for rest, toks, closing in cands:
        s = g.hold(st, rest)
        for t in toks:
            assert tg.allowed(s) == [t]  # each one the only token allowed there
            s = tg.step(s, t)
        assert b"".join(tok.token_bytes(t) for t in toks) == rest
        assert closing and all(tok.token_bytes(i).startswith(b'"') for i in closing)
        assert sorted(closing) == sorted(i for i in tg.allowed(s) if i not in tg.eos)


@pytest.fixture(scope="module")
def engine(tok):
    import torch

    from clover.engine import Engine
    from clover.model.io import load_model

    torch.set_num_threads(1)
    return Engine(load_model(BUNDLED), tok, max_batch_size=8)


def _requests(tok, n, ends):
    from clover.api.structured import tools_grammar
    from clover.data.chat import render_chat
    from clover.engine import SamplingParams

    chats = _chats(n)
    prompts, plist, srcs = [], [], []
    for e in chats:
        msgs = [{k: v for k, v in m.items() if k != "weight"} for m in e["messages"][:-1]]
        prompts.append(tok.encode(render_chat(msgs, e["tools"], True)))
        g = tools_grammar(e["tools"]).with_sources(source_texts(msgs), ends=ends)
        plist.append(SamplingParams(max_tokens=160, grammar=g))
        srcs.append(source_texts(msgs))
    return prompts, plist, srcs


def test_decoding_with_whole_span_ends_equals_the_slow_scorer_and_copies_spans(engine, tok, monkeypatch):
    """The engine's choice with the batched scorer is the choice with the incremental reference
    scorer, token for token; every grounded string is still a span of its source; and some
    choice was made (the test would pass vacuously otherwise)."""
    import clover.engine.span_choice as sc
    from clover.airspace.evaluate import ungrounded_args
    from clover.data.chat import parse_assistant

    prompts, plist, srcs = _requests(tok, 2, "span")
    made = []
    real = sc.choose_end
    monkeypatch.setattr(sc, "choose_end", lambda *a: made.append(1) or real(*a))
    monkeypatch.setattr("clover.engine.engine.choose_end", sc.choose_end)
    fast = engine.generate_batch(prompts, plist)
    assert made
    from clover.engine.scoring import continuation_logprobs_reference

    monkeypatch.setattr(sc, "continuation_logprobs", continuation_logprobs_reference)
    slow = engine.generate_batch(prompts, plist)
    assert [o.token_ids for o in fast] == [o.token_ids for o in slow]
    for o, src, t in zip(fast, srcs, _tools(2)):
        calls = parse_assistant(o.text or "")[1]
        assert ungrounded_args(calls, t, src)[1] == 0, o.text


def test_where_no_grounded_string_is_written_decoding_is_unchanged(engine, tok):
    """``ends="span"`` changes nothing where no grounded string is written: the same tool grammars
    with nothing to copy (the model answers in words) decode token for token as under
    ``"token"``; a grammar without grounded properties is itself whatever ``ends`` says."""
    from dataclasses import replace

    from clover.api.structured import tools_grammar
    from clover.engine.grammar.automaton import DEFAULT_ENDS

    prompts, plist, _ = _requests(tok, 4, "token")
    outs = {}
    for ends in ("token", "span"):
        ps = [replace(p, grammar=tools_grammar(t).with_sources({}, ends=ends)) for p, t in zip(plist, _tools(4))]
        outs[ends] = engine.generate_batch(prompts, ps)
    assert [o.token_ids for o in outs["token"]] == [o.token_ids for o in outs["span"]]
    assert all(o.token_ids for o in outs["span"])
    free = json_grammar({"type": "object", "properties": {"n": {"type": "string"}}})
    assert free.with_sources({"user": TEXT}, ends="span") is free
    assert json_grammar(SCHEMA).with_sources({"user": TEXT}).ends == DEFAULT_ENDS


def _chats(n):
    """The validation split's first ``n`` tool-call chats with a name of several words."""
    from clover.airspace.chats import load_split
    from clover.airspace.scoring import SCORING

    calls = [e for e in load_split("validation", 200) if e["kind"] in ("tool_call", "compound")]
    return [e for e in calls if any(" " in name for _, name in SCORING.names(e))][:n]


def _tools(n):
    return [e["tools"] for e in _chats(n)]
