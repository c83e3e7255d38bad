"""Grounded replies (``grounded_reply``): the byte automaton against the obvious reading of its
rule, forced copies, the tool-call grammar it wraps, and decoding with the bundled model: free
text with no number or id decodes as without the option, and a model pushed towards made-up
numbers writes none."""

import json
import random
import re
from pathlib import Path

import pytest

from clover.api.llm import RequestError
from clover.api.structured import tools_grammar
from clover.data.chat import TOOL_OPEN
from clover.engine.reply_grounding import ReplyGrammar, id_runs, name_words, reply_sources, runs

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"
SOURCE = "recall drone 26 and lift Golf-3 at 18:00 near Kingsway Hospital\n" + json.dumps(
    {"drone_id": "D-26", "eta_min": 2, "lat": 23.4034}
)
PIECES = ["D-26", "D-2", "D", "-", "2", "26", "6", ".", " ", "Golf", "Golf-3", "3", "x", ":", "18:00", "a", ",",
          "23.4034", "0", "eta", "_", "\n", "é", "Kingsway", "Kin", "Ki", "Kingsec", "Hospital", "Hosp", "Where",
          "Kingston", "'", '"', "? ", "K"]  # fmt: skip


def reference(text: str, source: str) -> bool:
    """The rule read plainly: every id run of the text is an id run of the source; and every
    capitalised word inside a sentence whose first three letters begin a capitalised word of the
    source (three letters or more) is one."""
    held = set(id_runs(source))
    if not all(r in held for r in id_runs(text)):
        return False
    names = set(name_words(source))
    for m in re.finditer(r"[A-Za-z]+", text):
        w, i = m.group(), m.start() - 1
        while i >= 0 and text[i] in " \t\"'([":
            i -= 1
        initial = i < 0 or text[i] in ".!?\n>"
        if w[0].isupper() and not initial and any(n.startswith(w[:3]) for n in names) and len(w) >= 3:
            if w not in names:
                return False
    return True


def test_runs_and_id_runs():
    assert runs("D-26 is back, ETA 2 min. Golf-3: lifted at 18:00.") == [
        "D-26", "is", "back", "ETA", "2", "min", "Golf-3", "lifted", "at", "18:00"]  # fmt: skip
    assert id_runs("at 23.4034, -12.1809 (D-95)") == ["23.4034", "12.1809", "D-95"]
    assert id_runs("drone_id x--1 a.b") == ["1"]


def test_the_automaton_agrees_with_the_rule_on_random_texts():
    """Whole texts: accepted exactly where the rule holds. Prefixes: a text the rule accepts is
    never refused on the way, and a refused prefix has no continuation the rule accepts."""
    g, rng = ReplyGrammar(SOURCE), random.Random(0)
    agree = refused = 0
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 7)))
        ok = reference(text, SOURCE)
        assert g.accepts(text) == ok, text
        agree += 1
        state, data = g.start_state, text.encode()
        for i in range(len(data)):
            state = g.advance(state, data[i : i + 1])
            if state is None:
                assert not ok, text
                refused += 1
                for _ in range(5):
                    tail = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3))).encode()
                    longer = (data[: i + 1] + tail).decode(errors="replace")  # a refused byte stays in
                    assert not reference(longer, SOURCE), longer
                break
    assert refused > 300 and agree == 3000


def test_hand_cases():
    g = ReplyGrammar(SOURCE)
    ok = ["D-26 is returning to base, ETA 2 minutes.", "Golf-3 lifted.", "At 23.4034.", "Delta zone", "Golf",
          "18:00 it is", "No numbers here at all!", ""]  # fmt: skip
    bad = ["D-25 is returning", "ETA 29 minutes", "D-2 home", "Golf-4", "2.0", "D-26.x", "drone 95", "23.40"]
    assert all(g.accepts(t) for t in ok) and not any(g.accepts(t) for t in bad)
    names_ok = ["Where should Kingsway Hospital be centred?", "Kingsec is a word here. Kingston too.", "near Ki.",
                "at 'Kingsway'"]  # fmt: skip
    names_bad = [
        "Where should Kingsec HospititHay be centred?",
        "near Kingston",
        "the Hospitals",
        "at 'Kings'",
        "is it King?",
    ]
    assert all(g.accepts(t) for t in names_ok) and not any(g.accepts(t) for t in names_bad)


def test_an_id_is_forced_once_its_first_digit_decides_it():
    g = ReplyGrammar("zone Golf-345 and D-26")
    assert g.forced(g.advance(g.start_state, b"Golf")) == b""  # a word: it may stay one
    assert g.forced(g.advance(g.start_state, b"Golf-3")) == b"45"
    assert g.forced(g.advance(g.start_state, b"D-2")) == b"6"
    both = ReplyGrammar("D-26 and D-2")
    assert both.forced(both.advance(both.start_state, b"D-2")) == b""  # either may end here
    assert g.forced(g.advance(g.start_state, b"zone Gol")) == b"f"  # a name, once three letters begin one
    assert g.forced(g.advance(g.start_state, b"Gol")) == b""  # a sentence's first word is free


def test_tool_calls_are_the_call_grammars_and_text_around_them_is_held():
    tools = [{"type": "function", "function": {"name": "recall_drone", "parameters": {
        "type": "object", "properties": {"drone_id": {"type": "string"}}, "required": ["drone_id"]}}}]  # fmt: skip
    inner = tools_grammar(tools)
    g = ReplyGrammar("bring drone 26 home", inner, TOOL_OPEN)
    call = f'{TOOL_OPEN}{{"name": "recall_drone", "arguments": {{"drone_id": "D-99"}}}}</tool_call>'
    assert inner.accepts(call) and g.accepts(call)  # a call's arguments are the call grammar's
    assert g.accepts("On it. " + call + " Drone 26 recalled.")
    assert not g.accepts(call + " Drone 27 recalled.") and inner.accepts(call + " Drone 27 recalled.")
    assert not g.accepts(f'{TOOL_OPEN}{{"name": "land"')  # and still held to the offered tools


def test_reply_sources_are_user_turns_and_tool_results():
    msgs = [{"role": "system", "content": "ids 77"}, {"role": "user", "content": "drone 26"},
            {"role": "assistant", "content": "D-88"}, {"role": "tool", "content": '{"eta_min": 2}'}]  # fmt: skip
    assert id_runs(reply_sources(msgs)) == ["26", "2"]


# -- decoding with the bundled model ----------------------------------------------------------------
@pytest.fixture(scope="module")
def llm():
    from clover.api.llm import LLM

    return LLM(str(BUNDLED), threads=1)


def test_free_text_without_numbers_decodes_as_without_the_option(llm):
    from clover.data.task import model_task

    tools = model_task(llm.config, default=True).tools()
    chats = [("hello", None), ("thanks, that's all", tools), ("how are you?", tools), ("what's the weather?", None),
             ("can you book me a flight to Paris?", tools), ("good morning team", tools)]  # fmt: skip
    for text, offered in chats:
        msgs = [{"role": "user", "content": text}]
        kw = dict(tools=offered, max_tokens=64, temperature=0)
        a, b = llm.chat(msgs, **kw), llm.chat(msgs, **kw, grounded_reply=True, reply_words=False)  # words: below
        ma, mb = a["choices"][0]["message"], b["choices"][0]["message"]
        assert not id_runs(ma["content"] or "") and not ma.get("tool_calls"), ma  # the case this test is about
        assert (mb["content"], b["usage"]["completion_tokens"]) == (ma["content"], a["usage"]["completion_tokens"])


def test_a_model_pushed_towards_made_up_numbers_writes_none(llm):
    """Random digit tokens biased far up: without the option the reply makes numbers up, with it
    every number and id of the reply is one of the conversation's."""
    tok = llm.tokenizer
    digits = [i for i in range(tok.vocab_size) if (b := tok.token_bytes(i)) and b.strip().isdigit()]
    rng = random.Random(1)
    msgs = [{"role": "user", "content": "how is drone 95 doing?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "get_drone_status", "arguments": '{"drone_id": "D-95"}'}}]},
            {"role": "tool", "tool_call_id": "c0",
             "content": '{"drone_id": "D-95", "battery_pct": 41, "state": "idle"}'}]  # fmt: skip
    made_up = 0
    for _ in range(4):
        bias = {str(i): 8.0 for i in rng.sample(digits, 6)}
        for on in (False, True):
            r = llm.chat(msgs, max_tokens=40, temperature=0, logit_bias=bias, grounded_reply=on)
            text = r["choices"][0]["message"]["content"] or ""
            if on:
                assert reference(text, reply_sources(msgs)), text
            else:
                made_up += not reference(text, reply_sources(msgs))
    assert made_up >= 2  # the bias does push the model off the conversation's numbers


def test_structured_output_with_the_option_is_refused(llm):
    with pytest.raises(RequestError, match="grounded_reply"):
        llm.chat([{"role": "user", "content": "hi"}], response_format={"type": "json_object"}, grounded_reply=True)


# -- the word rule (a vocabulary) --------------------------------------------------------------------
VOCAB = ["is", "returning", "to", "base", "eta", "minutes", "minute", "the", "a", "at", "near", "golf", "zone"]
WORD_PIECES = ["is", "return", "ing", "to", "base", "minutes", "minute", "minutesa", "utes", "ETA", "Eta", "the",
               "a", "at", "near", "neat", "Kings", "way", "Hospital", "drone", "zz", " ", ",", ".", "D-26", "-", "'",
               "é", "2", "Golf-3"]  # fmt: skip


def word_reference(text: str, source: str, vocabulary) -> bool:
    """The word rule read plainly, on top of the rest: every run of ASCII letters of the text is,
    ignoring case, a word of the vocabulary or of the source."""
    allowed = {w.lower() for w in vocabulary} | {w.lower() for w in re.findall(r"[A-Za-z]+", source)}
    return reference(text, source) and all(w.lower() in allowed for w in re.findall(r"[A-Za-z]+", text))


def test_the_word_rule_agrees_with_its_reading_on_random_texts():
    """Whole texts accepted exactly where the rule holds; a prefix refused on the way only where
    no continuation holds it (a word that begins no allowed word, or ends where none ends)."""
    g, rng = ReplyGrammar(SOURCE, vocabulary=VOCAB), random.Random(2)
    refused = accepted = 0
    for _ in range(3000):
        text = "".join(rng.choice(WORD_PIECES) for _ in range(rng.randint(1, 6)))
        ok = word_reference(text, SOURCE, VOCAB)
        assert g.accepts(text) == ok, text
        accepted += ok
        state, data = g.start_state, text.encode()
        for i in range(len(data)):
            state = g.advance(state, data[i : i + 1])
            if state is None:
                assert not ok, text
                refused += 1
                for _ in range(5):
                    tail = "".join(rng.choice(WORD_PIECES) for _ in range(rng.randint(0, 3))).encode()
                    assert not word_reference((data[: i + 1] + tail).decode(errors="replace"), SOURCE, VOCAB)
                break
    assert refused > 300 and accepted > 300


def test_word_rule_hand_cases():
    g = ReplyGrammar(SOURCE, vocabulary=VOCAB)
    ok = ["D-26 is returning to base, ETA 2 minutes.", "Golf-3 near Kingsway Hospital", "The zone.", "MINUTES",
          "recall drone 26", ""]  # fmt: skip
    bad = ["ETA 2 minutesa.", "ETA 2  utes.", "minut", "the zon", "Kingsway Hosp", "neat", "D-26 is returningx"]
    assert all(g.accepts(t) for t in ok) and not any(g.accepts(t) for t in bad)
    assert ReplyGrammar(SOURCE).accepts("ETA 2 minutesa.")  # without a vocabulary, words are free
    with pytest.raises(ValueError, match="runs of ASCII letters"):
        ReplyGrammar(SOURCE, vocabulary=["ok", "d-26"])


def test_the_word_rule_leaves_the_call_tag_and_calls_alone():
    """The letters of ``<tool_call>`` are no reply words; inside a call the call grammar alone decides."""
    tools = [{"type": "function", "function": {"name": "recall_drone", "parameters": {
        "type": "object", "properties": {"drone_id": {"type": "string"}}, "required": ["drone_id"]}}}]  # fmt: skip
    g = ReplyGrammar("bring drone 26 home", tools_grammar(tools), TOOL_OPEN, vocabulary=VOCAB)
    call = f'{TOOL_OPEN}{{"name": "recall_drone", "arguments": {{"drone_id": "D-99"}}}}</tool_call>'
    assert g.accepts(call) and g.accepts("the " + call + " drone 26 is returning")
    assert not g.accepts("the<tool the") and not g.accepts("abc" + call) and not g.accepts(call + " zzz")


def test_the_word_rule_against_a_slow_reference_token_by_token():
    """The grammar's allowed tokens (its sorted-prefix lookups, cached per state) against a plain
    scan: a token may come next exactly where the text with it still begins a text the rule holds,
    read by a linear search of the allowed words."""
    from clover.data.tokenizer import CloverTokenizer
    from clover.engine.grammar import TokenGrammar, TokenTable

    tok = CloverTokenizer.load(BUNDLED)
    source = "please bring the drone home near the old harbour"  # no digit, no capital: the word rule alone
    vocab = ["is", "returning", "to", "base", "minutes", "home", "harbor", "done", "ok"]
    allowed = {w.lower() for w in vocab} | set(source.split())

    def viable(text: bytes) -> bool:
        if any(c in b"0123456789" for c in text):
            return False  # the source holds no number
        t = text.decode("latin-1")
        done, last = re.findall(r"[A-Za-z]+", t), re.search(r"[A-Za-z]+\Z", t)
        if last:
            done = done[:-1]
        if not all(w.lower() in allowed for w in done):
            return False
        return last is None or any(w.startswith(last.group().lower()) for w in allowed)

    table = TokenTable(tok)
    tg = TokenGrammar(ReplyGrammar(source, vocabulary=vocab), table, tok.eos_token_ids)
    for prefix in ["", "the", "the dro", "home.", "ok, harb", "returning to ba", "done "]:
        state = tg.g.advance(tg.start, prefix.encode())
        fast = set(tg.allowed(state)) - set(tg.eos)
        slow = {i for i, bs in enumerate(table.bytes) if bs is not None and i not in table.atomic
                and viable(prefix.encode() + bs)}  # fmt: skip
        assert fast == slow, prefix
        assert bool(set(tg.allowed(state)) & set(tg.eos)) == tg.g.complete(state)


def test_free_text_of_vocabulary_words_decodes_as_without_the_word_rule(llm):
    """Replies whose words are all allowed come out token for token as with the word rule off."""
    from clover.data.task import model_task

    task = model_task(llm.config, default=True)
    vocab = task.reply_vocabulary()
    msgs = [{"role": "user", "content": "how is drone 95 doing?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "get_drone_status", "arguments": '{"drone_id": "D-95"}'}}]},
            {"role": "tool", "tool_call_id": "c0",
             "content": '{"drone_id": "D-95", "battery_pct": 41, "state": "hovering"}'}]  # fmt: skip
    tools = task.offered(llm.config)
    chats = [([{"role": "user", "content": t}], tools) for t in ("hello", "thanks, that's all", "who are you?")]
    chats += [(msgs, None), (msgs, tools)]
    narrowed = 0
    for m, offered in chats:
        kw = dict(tools=offered, max_tokens=48, temperature=0, grounded_reply=True)
        free, held = llm.chat(m, reply_words=False, **kw), llm.chat(m, **kw)
        only = llm.chat(m, reply_words=["ok"], **kw)  # the conversation's words and "ok": the rule is on
        narrowed += only["choices"][0]["message"] != free["choices"][0]["message"]
        text = free["choices"][0]["message"]["content"] or ""
        said = set(re.findall(r"[a-z]+", reply_sources(m).lower()))
        assert all(w in vocab or w in said for w in re.findall(r"[a-z]+", text.lower())), text  # this test's case
        assert held["choices"][0]["message"] == free["choices"][0]["message"]
        assert held["usage"]["completion_tokens"] == free["usage"]["completion_tokens"]
    assert narrowed >= 3


def test_a_model_pushed_towards_garbled_words_writes_none(llm):
    """Letter tokens biased far up: with words free the reply writes words of neither the
    vocabulary nor the conversation; with the word rule (the task's vocabulary, the default) none,
    also where the reply runs to ``max_tokens`` (closing finishes the word under way)."""
    from clover.bench.replies import reply_check
    from clover.data.task import model_task

    vocab = model_task(llm.config, default=True).reply_vocabulary()
    tok = llm.tokenizer
    pieces = [i for i in range(tok.vocab_size) if (b := tok.token_bytes(i)) and b.isalpha() and 1 < len(b) < 4]
    rng = random.Random(3)
    msgs = [{"role": "user", "content": "bring drone 26 home"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "recall_drone", "arguments": '{"drone_id": "D-26"}'}}]},
            {"role": "tool", "tool_call_id": "c0",
             "content": '{"drone_id": "D-26", "status": "returning", "eta_min": 2}'}]  # fmt: skip
    broken = 0
    for _ in range(6):
        bias = {str(i): 14.0 for i in rng.sample(pieces, 6)}
        for words_free in (True, False):
            kw = dict(max_tokens=40, temperature=0, logit_bias=bias, grounded_reply=True)
            r = llm.chat(msgs, **kw, **({"reply_words": False} if words_free else {}))
            c = reply_check(r["choices"][0]["message"]["content"] or "", msgs, vocab)
            if words_free:
                broken += bool(c["broken"])
            else:
                assert c["broken"] == [] and c["ungrounded"] == [], c
    assert broken >= 2  # the bias does push the model to broken words


def test_reply_words_requests(llm):
    """A caller's own words; false turns the rule off; without grounded_reply, or with a word that is
    not a run of letters, a 400 (RequestError)."""
    msgs = [{"role": "user", "content": "status of drone 26"}]
    own = ["ok", "done"]
    r = llm.chat(msgs, max_tokens=24, temperature=0, grounded_reply=True, reply_words=own)
    text = r["choices"][0]["message"]["content"] or ""
    assert set(re.findall(r"[a-z]+", text.lower())) <= {"ok", "done", "status", "of", "drone"}, text
    with pytest.raises(RequestError, match="grounded_reply"):
        llm.chat(msgs, max_tokens=4, reply_words=own)
    with pytest.raises(RequestError, match="reply_words"):
        llm.chat(msgs, max_tokens=4, grounded_reply=True, reply_words=["ok", "d-26"])
