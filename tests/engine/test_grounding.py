"""Grounded arguments (``x-grounded``): the span index against a brute-force reading of its rule,
the grammar's grounded frames (strings, numbers, escapes, enums, patterns, empty sources), and
decoding under grounding."""

import json
import random
import re
from pathlib import Path

import pytest

from clover.data.tokenizer import CloverTokenizer
from clover.engine.grammar import GrammarError, TokenGrammar, TokenTable, json_grammar, tool_call_grammar
from clover.engine.grammar.grounding import (
    BARRIERS,
    MAX_SPAN_BYTES,
    SpanIndex,
    number_written,
    source_texts,
    written_numbers,
)
from clover.engine.grammar.json_schema import clean_schema

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"


@pytest.fixture(scope="module")
def bundled_tokenizer():
    return CloverTokenizer.load(BUNDLED)


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _crosses(text: str, i: int, j: int) -> bool:
    """``text[i:j]`` holds a character no span crosses (the rule in words: docs/grounding.md)."""
    pad = " " + text + " "  # so each character has two neighbours; the ends count as spaces only for barriers
    for k in range(i, j):
        ch, before, after = text[k], pad[k], pad[k + 2]
        if ch in BARRIERS:
            return True
        if ch in ";:!?," and (k + 1 == len(text) or after.isspace()):
            return True
        if ch in "-/" and before == " " and after == " " or ch in "\u2013\u2014" and " " in (before, after):
            return True
        if ch in "'\u2018\u2019`" and not (k > 0 and _word(text[k - 1]) and k + 1 < len(text) and _word(text[k + 1])):
            return True
    return False


_TIMES = {"am", "pm", "hrs", "hr", "h", "noon", "midnight", "midday"}


def _joined_left(text: str, j: int) -> bool:
    """The word ending at ``j`` is joined to the next by ``&``, ``-`` or an apostrophe, holds no
    digit and is no time word."""
    m = re.search(r"(\w+)\Z", text[:j])
    return bool(
        m
        and re.match(r"[&\-'\u2019]\w", text[j:])
        and not re.search(r"\d", m.group(1))
        and m.group(1).lower() not in _TIMES
    )


def _span_ok(text: str, i: int, j: int) -> bool:
    span, before, after = text[i:j], text[:i], text[j:]
    if re.match(r"[#.]\d", span) and not re.search(r"[\w.]\Z", before):
        start = True  # "#16", ".5 nm"
    else:
        start = _word(span[0]) and not (before and _word(before[-1]))
        start = start and not (len(before) >= 2 and _joined_left(text, i - 1))
        start = start and not re.search(r"(?<!\w)\d+(st|nd|rd|th) \Z", before, re.I)
        start = start and not re.search(r"(?<![\w&\-'\u2019])[A-Z]\. \Z", before)
    if not start:
        return False
    last = re.search(r"(\w+)\Z", span)
    if last and not (after and _word(after[0])):
        w = last.group(1)
        end = not (
            re.fullmatch(r"[A-Z]", w)
            and after.startswith(".")
            and not re.search(r"[\w&\-'\u2019]\Z", span[: -len(w)] if len(w) < len(span) else before)
            or _joined_left(text, j)
            or w in {"of", "and", "the", "a", "an", "de", "at", "to", "for", "in", "on", "with", "from", "by"}
            or re.fullmatch(r"\d+(st|nd|rd|th)", w, re.I)
            and re.match(r" \w", after)
        )
    elif re.search(r"(?<![\w&\-'\u2019])[A-Za-z]\.\Z", text[:j]) and not (after and _word(after[0])):
        letter = text[j - 2]
        end = (letter.isupper() or text[j - 3 : j - 2] == ".") and not (letter.isupper() and re.match(r" [A-Z]", after))
    else:
        end = False
    return end and not _crosses(text, i, j)


def brute_spans(text: str) -> set[str]:
    """Every span the module docstring's rule allows, by enumeration (ASCII and Latin text: no
    script without spaces, no combining marks)."""
    out = set()
    n = len(text)
    for i in range(n):
        for j in range(i + 1, n + 1):
            if len(text[i:j].encode()) > MAX_SPAN_BYTES:
                break
            if _span_ok(text, i, j):
                out.add(text[i:j])
    return out


TEXTS = [
    'create zone "Lima-5" at 45.2 S, radius 2,300 metres from 6 p.m. until 23:00',
    "NFZ [Outer Dam] / 12.5N 3.25W / 4900-foot\nrecall UAV-941 and #901 (now)",
    "Zone name: Zürich Nord, Position 47.4 N 8.5 E; lift «Área 51» please",
    "a b  c\tdd_e f.g.h. x",
]


@pytest.mark.parametrize("text", TEXTS)
def test_span_index_agrees_with_brute_force(text):
    ix = SpanIndex(text)
    spans = brute_spans(text)
    subs = {text[i:j] for i in range(len(text)) for j in range(i + 1, len(text) + 1)}
    for s in subs:
        assert ix.contains(s) == (s in spans), s
    # the grammar's byte-by-byte walk accepts exactly the same strings
    g = json_grammar({"type": "string", "x-grounded": True}).with_sources({"user": text})
    for s in list(subs)[:400] + sorted(spans):
        assert g.accepts(json.dumps(s, ensure_ascii=False)) == (s in spans), s


# (text, spans it must give, strings it must not give): one row per edge of the rule
EDGES = [
    # sentence punctuation before a space, and a clause break, end a span's reach
    ("lift Kilo; then Bravo", ["Kilo"], ["Kilo; then", "Kilo;"]),
    ("zone name: Old Pier", ["Old Pier", "zone name"], ["name: Old", "name:"]),
    ("lift Kilo! Bravo? yes", ["Kilo", "Bravo"], ["Kilo! Bravo", "Bravo? yes"]),
    ("SAR of new water tank, Unit 864 please", ["new water tank", "Unit 864"], ["new water tank, Unit 864"]),
    ("radius 1,500 ft", ["1,500 ft"], []),  # a comma inside a number is no break
    ("18:00 to 20:30", ["18:00", "20:30", "18:00 to 20:30"], []),  # a colon inside a time is no break
    ("NFZ Old Dres / S34.9 W130 - 6nm — now", ["Old Dres", "S34.9 W130"], ["Old Dres / S34.9", "W130 - 6nm"]),
    ("a survey of '65th Way Pizoul' now", ["65th Way Pizoul"], ["of '65th Way Pizoul", "Pizoul' now"]),
    ("O'Neil's Yard", ["O'Neil's Yard", "O'Neil's"], ["O", "Neil", "O'Neil"]),  # an apostrophe inside a word
    # an initial and its full stop
    ("remove W. Faizind Embassy", ["W. Faizind Embassy"], ["W", "W.", "Faizind Embassy"]),
    ("survey of T.C. Dakar water tank", ["T.C. Dakar water tank"], ["T", "T.C", "T.C.", "Dakar water tank"]),
    ("from 6 p.m. until 9", ["6 p.m.", "p.m."], []),
    ("alt 270 m. next", ["270 m"], []),  # a unit at a sentence's end is no initial
    ("call it Plan B. then go", ["Plan B."], ["Plan B"]),
    ("call it Plan B. Then go", ["Plan"], ["Plan B", "Plan B."]),  # a capital after: the name would go on
    ("Zone Alpha-B. now", ["Alpha-B"], []),
    # right after "&" or "-": a joined word goes on
    ("an inspection of E&K rean please", ["E&K rean", "E&K"], ["E", "K rean"]),
    ("lift Lima-5 now", ["Lima-5"], ["Lima", "5"]),
    ("recall uav-941 and #901.", ["uav-941", "#901", "901"], ["uav"]),
    ("valid 1250 hrs-0045 and 12 PM-00:35", ["1250 hrs", "0045", "12 PM", "00:35"], []),
    ("active 12:03am-12pm", ["12:03am", "12pm"], []),
    # an ordinal and its noun
    ("restrict [5th Way Rodi] now", ["5th Way Rodi", "5th Way"], ["5th", "Way Rodi", "Way"]),
    ("the 5th, then 6th", ["5th", "6th"], []),
    # a name goes on after "of" and "and"
    (
        "named Old Sevilla Wyr of Fynu and Denver",
        ["Old Sevilla Wyr of Fynu", "Old Sevilla Wyr"],
        ["Old Sevilla Wyr of"],
    ),
    ("Gate D3 needs a survey", ["Gate D3 needs a survey", "Gate D3"], ["Gate D3 needs a"]),
    ("call it [Sector 8-A] now", ["Sector 8-A", "Sector 8"], []),  # a capital "A" is no article
    ("radius .5 nm around", [".5 nm", "5 nm"], ["radius ."]),
]


@pytest.mark.parametrize("text, good, bad", EDGES)
def test_each_edge_of_the_span_rule(text, good, bad):
    ix = SpanIndex(text)
    spans = brute_spans(text)
    for s in good:
        assert ix.contains(s) and s in spans, s
    for s in bad:
        assert not ix.contains(s) and s not in spans, s


def test_every_copy_under_way_can_still_end():
    """No byte the grammar takes inside a copy leads where no span ends: after "Caipibe" of
    "Caipibe — CENTRE" (a clause break) the copy may end, not go on into the space before the
    dash; and from every range a narrowing reaches, some span ends."""
    g = json_grammar({"type": "string", "x-grounded": True}).with_sources({"user": "zone South Caipibe — CENTRE 4"})
    assert g.advance(g.start_state, b'"Caipibe ') is None and g.accepts(b'"South Caipibe"')
    rng = random.Random(2)
    for _ in range(200):
        text = "".join(
            rng.choice(["ab", "A", " ", " - ", "; ", "of ", "(", "W. ", "5th ", "x&", ","]) for _ in range(8)
        )
        ix = SpanIndex(text)
        stack = [(0, len(ix), 0)] if len(ix) else []
        while stack:
            lo, hi, depth = stack.pop()
            assert ix.can_end(lo, hi, depth) or ix.shortest_rest(lo, hi, depth, float("inf")) is not None, (text, depth)
            for c in {ix.byte_at(s, depth) for s in ix.starts[lo:hi]} - {-1}:
                stack.append((*ix.narrow(lo, hi, depth, c), depth + 1))


def test_random_texts_agree_with_brute_force():
    rng = random.Random(0)
    alphabet = "ab A1.-, \n\"()'_"
    for _ in range(60):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 18)))
        g = json_grammar({"type": "string", "x-grounded": "user"}).with_sources({"user": text})
        spans = brute_spans(text)
        for i in range(len(text)):
            for j in range(i + 1, len(text) + 1):
                s = text[i:j]
                assert g.accepts(json.dumps(s)) == (s in spans), (text, s)


def test_escapes_both_ways_and_utf8_never_split():
    text = "path C:\\temp\\x and Zürich/Nord — 東京タワー"
    g = json_grammar({"type": "string", "x-grounded": True}).with_sources({"user": text})
    assert g.accepts(json.dumps("C:\\temp\\x"))  # backslashes escaped
    assert g.accepts(json.dumps("Zürich/Nord", ensure_ascii=False))
    assert not g.accepts('"Z\\u00fcrich/Nord"') and not g.accepts('"Zürich\\/Nord"')  # one spelling: no needless escape
    tabbed = json_grammar({"type": "string", "x-grounded": True}).with_sources({"user": "a\u0007b c"})
    assert tabbed.accepts('"a\\u0007b"') and not tabbed.accepts('"a\u0007b"')  # a control character: escaped
    assert g.accepts('"東京"') and g.accepts('"タワー"') and g.accepts('"京タ"')  # each Han/kana char a word
    partial = '"Z' + "ü".encode()[:1].decode("latin-1")  # half of ü: cannot end there
    assert g.advance(g.start_state, partial.encode("latin-1") + b'"') is None
    assert g.advance(g.start_state, b'"Z\\u00') is None


def test_numbers_as_written():
    assert written_numbers("2,300 metres at 007 and 45.20 S, wp3") == tuple(
        sorted(x.encode() for x in ["2300", "-2300", "2", "-2", "300", "-300", "7", "-7", "45.20", "-45.20", "3", "-3"])
    )
    schema = {
        "type": "object",
        "properties": {
            "lat": {"type": "number", "x-grounded": True},
            "wp": {"type": "integer", "minimum": 1, "x-grounded": True},
        },
        "required": ["lat"],
    }
    g = json_grammar(schema).with_sources({"user": "move wp3 to 45.20 S, 12 E"})
    assert g.accepts('{"lat": -45.20}') and g.accepts('{"lat": 45.20}') and g.accepts('{"lat": 12, "wp": 3}')
    assert not g.accepts('{"lat": 45.2}')  # as written: 45.20
    assert not g.accepts('{"lat": 46}') and not g.accepts('{"lat": 12, "wp": -3}')  # bounds still hold
    assert not g.accepts('{"lat": 12, "wp": 45.20}')  # an integer
    assert number_written(-45.2, "45.20 S") and not number_written(45.3, "45.20 S") and not number_written(True, "1")


def test_enum_and_pattern_both_hold():
    schema = {
        "type": "object",
        "properties": {
            "unit": {"enum": ["m", "km", "ft", "nm"], "x-grounded": True},
            "id": {"type": "string", "pattern": "^D-[0-9]+$", "x-grounded": "conversation"},
        },
    }
    g = json_grammar(schema).with_sources({"user": "3 km near D-17", "conversation": "3 km near D-17 and D-18"})
    assert g.accepts('{"unit": "km"}') and not g.accepts('{"unit": "m"}')  # "m" is no span here
    assert g.accepts('{"id": "D-18"}') and not g.accepts('{"id": "near D-17"}')  # the pattern still holds
    assert not g.accepts('{"id": "D-19"}')


def test_a_pattern_ends_a_copy_where_its_value_ends_and_without_a_match_drops_the_tool():
    time = {"type": "string", "pattern": "^(?i:[0-9]{4}(?: ?hrs)?|noon)$", "x-grounded": "user"}
    schema = {"type": "object", "properties": {"end": time}, "required": ["end"]}
    g = json_grammar(schema).with_sources({"user": "closed from noon to 0030 PLEASE - over"})
    assert g.accepts('{"end": "0030"}') and g.accepts('{"end": "noon"}')
    assert not g.accepts('{"end": "0030 PLEASE"}') and not g.accepts('{"end": "noon to 0030"}')
    # a byte that matches the pattern so far but leads to no end is refused: after "0030" only the
    # closing quote (" hrs" could follow a time, but this source goes on " PLEASE")
    at = g.advance(g.start_state, b'{"end": "0030')
    assert at is not None and g.advance(at, b" ") is None and g.advance(at, b'"') is not None
    drone = {"type": "string", "pattern": "^(?i:(?:drone )?#?[0-9]+)$", "x-grounded": "user"}
    d = json_grammar(drone).with_sources({"user": "recall drones #861 and drone 12"})
    assert d.accepts('"drone 12"') and d.accepts('"861"') and d.advance(d.start_state, b'"drones') is None
    tools = {"close": schema}
    call = tool_call_grammar(tools, "<tool_call>", "</tool_call>", '{"name": "', auto=True)
    assert call.with_sources({"user": "close it until 0030"}).can_call()
    none = call.with_sources({"user": "close it until half past twelve"})  # spans, but none a time here
    assert not none.can_call() and none.accepts("Until when?")
    assert none.advance(none.start_state, b"<tool_call>") is None


def test_empty_source_leaves_words_and_drops_the_tool():
    tools = {
        "recall": {
            "type": "object",
            "properties": {"drone_id": {"type": "string", "x-grounded": True}},
            "required": ["drone_id"],
        },
        "status": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
    }
    g = tool_call_grammar(tools, "<tool_call>", "</tool_call>", '{"name": "', auto=True)
    empty = g.with_sources({"user": "", "conversation": ""})
    assert empty.accepts("Which drone?")
    assert empty.accepts('<tool_call>{"name": "status", "arguments": {}}</tool_call>')
    assert not empty.accepts('<tool_call>{"name": "recall", "arguments": {"drone_id": "x"}}</tool_call>')
    only = tool_call_grammar({"recall": tools["recall"]}, "<tool_call>", "</tool_call>", '{"name": "', auto=True)
    none = only.with_sources({"user": "hello"})  # a span exists ("hello"): callable; none at all: not
    assert none.advance(none.start_state, b"<tool_call>") is not None
    dead = only.with_sources({"user": "?!"})
    assert dead.advance(dead.start_state, b"<tool_call>") is None and dead.accepts("In words, then.")


def test_schemas_without_the_keyword_are_untouched():
    g = tool_call_grammar({"f": {"type": "object", "properties": {"a": {"type": "string"}}}}, "<t>", "</t>")
    assert g.with_sources({"user": "anything"}) is g
    assert json_grammar({"type": "string", "x-grounded": False}).with_sources({"user": "x"}).grounded == []


@pytest.mark.parametrize("bad", ["yes", 1, None, ["user"], "assistant"])
def test_a_malformed_keyword_names_the_property(bad):
    schema = {"type": "object", "properties": {"zone": {"type": "string", "x-grounded": bad}}}
    if bad is None:  # null is dropped as any unset keyword is
        assert "x-grounded" not in clean_schema(schema)["properties"]["zone"]
        return
    with pytest.raises(GrammarError, match="properties/zone/x-grounded"):
        clean_schema(schema)


def test_source_texts_by_role():
    msgs = [
        {"role": "system", "content": "You are ops. Zone Alpha exists."},
        {"role": "user", "content": [{"type": "text", "text": "lift Bravo"}]},
        {"role": "assistant", "content": "Invented Charlie"},
        {"role": "tool", "content": '{"zone": "Delta"}'},
    ]
    src = source_texts(msgs)
    assert src["user"] == "lift Bravo"
    assert "Alpha" in src["conversation"] and "Delta" in src["conversation"] and "Charlie" not in src["conversation"]


def test_token_level_allowed_sets_agree_with_the_byte_automaton(bundled_tokenizer):
    tok = bundled_tokenizer
    g = json_grammar(
        {"type": "object", "properties": {"name": {"type": "string", "x-grounded": True}}, "required": ["name"]}
    ).with_sources({"user": 'lift "Outer Dam" and Zürich now'})
    tg = TokenGrammar(g, TokenTable(tok), tok.eos_token_ids)
    state = g.advance(g.start_state, b'{"name": "')
    for prefix in (b"", b"Out", b"Outer ", b"Z\xc3"):
        st = g.advance(state, prefix)
        assert st is not None
        allowed = set(tg.allowed(st))
        for i in range(tok.vocab_size):
            assert (i in allowed) == (tg.step(st, i) is not None), (prefix, i)


def test_forced_bytes_and_the_token_that_spells_them(bundled_tokenizer):
    tok = bundled_tokenizer
    g = json_grammar({"type": "string", "x-grounded": True}).with_sources({"user": "recall Old Harbour Pier, Old Hill"})
    assert g.forced(g.advance(g.start_state, b'"Old Har')) == b"bour"  # then "Old Harbour" may end
    assert g.forced(g.advance(g.start_state, b'"Old ')) == b"H"  # Harbour or Hill: H either way
    assert g.forced(g.advance(g.start_state, b'"Old H')) == b""  # then the model's choice
    assert g.forced(g.advance(g.start_state, b'"Old Harbour')) == b""  # may end here
    assert g.forced(g.start_state) == b""  # not inside a copy
    tg = TokenGrammar(g, TokenTable(tok), tok.eos_token_ids)
    # the token the tokenizer writes next in "Harbour" (H ar b o ur): after "Har", "b"
    state = g.advance(g.start_state, b'"Old Har')
    word = tok.encode("Harbour")
    assert tok.decode(word[:2]) == "Har"
    assert tg.forced_token(state) == word[2] and tg.allowed(state) == [word[2]]
    # where the tokens written so far do not line up with the tokenizer's ("Ha" then ...): the
    # longest token that spells a beginning of the forced bytes
    state = g.advance(g.start_state, b'"Old Ha')
    spelled = [i for i in range(tok.vocab_size) if tok.token_bytes(i) and b"rbour".startswith(tok.token_bytes(i))]
    longest = max(spelled, key=lambda i: len(tok.token_bytes(i)))
    assert tg.forced_token(state) == longest and tg.allowed(state) == [longest]
    choice = g.advance(g.start_state, b'"Old H')
    assert tg.forced_token(choice) is None and len(tg.allowed(choice)) > 1


def test_a_corpus_name_copied_under_grounding_comes_out_in_its_training_tokens(bundled_tokenizer):
    """The model writes a name's tokens where the copy leaves it a choice, as training showed
    them; where the copy forces the next bytes, the forced token is the training data's too, so
    the whole value is spelled as in training (a call's JSON string holds the name's own tokens:
    the pre-tokenizer splits at the quotes)."""
    from clover.airspace.chats import load_split

    tok = bundled_tokenizer
    names = [n for ex in load_split("validation", 300) for _, n in ex["names"]][:120]
    forced_somewhere = 0
    for name in names:
        want = tok.encode(name)
        assert tok.encode(f'"{name}"')[1:-1] == want
        g = json_grammar({"type": "string", "x-grounded": True}).with_sources({"user": f"lift {name} now please"})
        tg = TokenGrammar(g, TokenTable(tok), tok.eos_token_ids)
        state, got = g.advance(g.start_state, b'"'), []
        for i in want:
            f = tg.forced_token(state)
            forced_somewhere += f is not None
            got.append(f if f is not None else i)
            state = tg.step(state, got[-1])
            assert state is not None, (name, got)
        assert got == want, (name, [tok.decode([i]) for i in got], [tok.decode([i]) for i in want])
    assert forced_somewhere > 50


@pytest.fixture(scope="module")
def bundled_engine(bundled_tokenizer):
    import torch

    from clover.engine import Engine
    from clover.model.io import load_model

    torch.set_num_threads(1)
    return Engine(load_model(BUNDLED), bundled_tokenizer, max_batch_size=8)


def test_grounded_answers_are_the_same_one_per_pass_or_in_runs(bundled_engine, bundled_tokenizer):
    """Under grounding, a forced copy commits in the pass that reaches it (the one token the
    grammar allows there), and commits what one-position-per-pass decoding commits: ``prefix`` at
    τ 1 (runs go on only through forced copies and tokens the model is certain of) gives ``ar``'s
    answers on the bundled model's validation chats, in fewer passes."""
    from dataclasses import replace

    from clover.airspace.chats import load_split
    from clover.api.structured import tools_grammar
    from clover.data.chat import render_chat
    from clover.engine import SamplingParams

    chats = [e for e in load_split("validation", 120) if e["kind"] in ("tool_call", "compound")][:16]
    prompts, plist = [], []
    for e in chats:
        msgs = [{k: v for k, v in m.items() if k != "weight"} for m in e["messages"][:-1]]
        prompts.append(bundled_tokenizer.encode(render_chat(msgs, e["tools"], True)))
        plist.append(SamplingParams(max_tokens=160, grammar=tools_grammar(e["tools"]).with_sources(source_texts(msgs))))
    outs = {
        pol: bundled_engine.generate_batch(prompts, [replace(p, policy=pol, threshold=1.0) for p in plist])
        for pol in ("ar", "prefix")
    }
    assert [o.text for o in outs["prefix"]] == [o.text for o in outs["ar"]]
    passes = {pol: sum(o.stats["forward_passes"] for o in o_) for pol, o_ in outs.items()}
    assert passes["prefix"] < passes["ar"]


def test_requests_with_other_sources_never_share_allowed_sets(bundled_tokenizer):
    """The same grammar state (a grounded number about to start) allows different tokens under
    different sources: the shared allowed-token cache must keep them apart."""
    tok = bundled_tokenizer
    base = json_grammar(
        {"type": "object", "properties": {"n": {"type": "integer", "x-grounded": True}}, "required": ["n"]}
    )
    table = TokenTable(tok)
    seen = []
    for text in ("take 1", "take 7", "take 1"):
        g = base.with_sources({"user": text})
        tg = TokenGrammar(g, table, tok.eos_token_ids)
        state = g.advance(g.start_state, b'{"n": ')
        allowed = tg.allowed(state)
        assert allowed and all(tg.step(state, i) is not None for i in allowed)
        seen.append({tok.token_bytes(i)[:1] for i in allowed})
    assert seen[0] != seen[1] and b"7" in seen[1] and b"1" not in seen[1]
