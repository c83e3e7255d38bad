"""The second airspace corpus (task airspace2): held-out name families, no tool-call markup in
words, calls in the extraction tools' form, deterministic splits."""

from __future__ import annotations

import json
import random
import re

import pytest

from clover.airspace.calls import plain_call
from clover.airspace.chats import MIX, TEXT_KINDS, UNSERVED, generate, load_split
from clover.airspace.extraction_tools import extraction_tool
from clover.airspace.names import HELDOUT_FAMILIES, TRAIN_FAMILIES
from clover.airspace.world import check_arguments


@pytest.fixture(scope="module")
def train() -> list[dict]:
    return generate("train", 3000, seed=5)


@pytest.fixture(scope="module")
def test_split() -> list[dict]:
    return load_split("test", 1500)


def _texts(ex: dict) -> list[str]:
    if ex["kind"] == "plain":
        return [ex["text"]]
    return [m["content"] for m in ex["messages"] if isinstance(m.get("content"), str)]


def test_held_out_name_families_never_appear_in_train(train, test_split):
    assert {fam for ex in train for fam, _ in ex["names"]} == set(TRAIN_FAMILIES)
    held = {n for ex in test_split for fam, n in ex["names"] if fam in HELDOUT_FAMILIES}
    assert len(held) > 100
    train_text = "\n".join(t for ex in train for t in _texts(ex))
    assert not [n for n in held if n in train_text]
    # the shapes themselves: initials ("J.K. ...", "A&B ...") and ordinals ("28th Street") never in
    # train (a time's "P.M." is not an initial); train's own names that go on past "&", a full stop
    # or an ordinal ("Varn & Kessel Yard", "Mt. Orel", "3rd Pier") are built otherwise
    assert not re.search(
        r"\b(?![AP]\.M\.)[A-Z]\.[A-Z]\. |\b[A-Z]&[A-Z] |\b\d+(st|nd|rd|th) (Street|Avenue|Road|Lane|Quay)", train_text
    )
    train_names = [n for ex in train for _, n in ex["names"]]
    assert any(" & " in n for n in train_names) and any(re.search(r"\b\d+(st|nd|rd|th) ", n) for n in train_names)


def test_splits_are_deterministic_and_differ():
    a, b = load_split("validation", 200), load_split("validation", 200)
    assert json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)
    assert generate("train", 50, seed=1) == generate("train", 50, seed=1) != generate("train", 50, seed=2)
    assert load_split("validation", 50) != load_split("test", 50)


_MARKUP = re.compile(r"<tool_call>|</tool_call>|<tool_response>|<tools>|<\|im_|\{\"name\"|\"arguments\"")
_TOOL_NAMES = re.compile(
    r"create_no_fly_zone|lift_no_fly_zone|update_waypoint|assign_mission|recall_drone|get_drone_status"
)


def test_no_tool_call_markup_inside_words(train):
    for ex in train:
        for m in ex["messages"]:
            if m["role"] in ("user", "assistant", "system"):
                assert not _MARKUP.search(m["content"] or ""), m
                assert not _TOOL_NAMES.search(m["content"] or ""), m
        if ex["kind"] == "plain":
            assert not _MARKUP.search(ex["text"])


def test_every_call_fits_the_extraction_tools(train):
    n = 0
    for ex in train:
        for m in ex["messages"]:
            for c in m.get("tool_calls") or []:
                call = plain_call(c)
                schema = extraction_tool(call["name"])["function"]["parameters"]
                args, problem = check_arguments(schema, call["arguments"])
                assert problem is None, (call, problem)
                assert "radius_m" not in args and "altitude_m" not in args
                n += 1
    assert n > 2000


def test_every_kind_is_drawn_and_text_kinds_are_answered_in_words(train):
    kinds = {ex["kind"] for ex in train}
    assert kinds == set(MIX)
    for ex in train:
        last = ex["messages"][-1] if ex["messages"] else None
        if ex["kind"] in TEXT_KINDS:
            assert last["role"] == "assistant" and not last.get("tool_calls") and last["content"]
        if ex["kind"] == "unserved":
            assert last["content"] == UNSERVED


def test_follow_ups_refer_back_to_the_earlier_turn(train):
    ups = [ex for ex in train if ex["kind"] == "follow_up"]
    assert len(ups) > 200
    for ex in ups:
        *history, question, answer = [m for m in ex["messages"] if m["role"] != "system"]
        assert question["role"] == "user" and all(m.get("weight", 1) == 0 for m in history if m["role"] == "assistant")
        earlier = json.dumps(history, ensure_ascii=False)
        args = plain_call(answer["tool_calls"][0])["arguments"]
        key = args.get("drone_id") or args.get("zone_name")
        assert key in earlier or key.split("-")[1] in question["content"]


def test_plain_text_prompts_are_the_start_of_their_text(train):
    plain = [ex for ex in train if ex["kind"] == "plain"]
    assert len(plain) > 50
    for ex in plain:
        assert ex["text"].startswith(ex["prompt"]) and len(ex["text"]) > len(ex["prompt"]) and ex["prompt"]


def test_lengths_are_given_as_written(train):
    """Gold lengths are the operator's number and unit; in the message the number appears as written."""
    seen = set()
    for ex in train:
        if ex["kind"] != "tool_call":
            continue
        msg = ex["messages"][-2]["content"]
        for c in ex["messages"][-1]["tool_calls"]:
            a = plain_call(c)["arguments"]
            if "radius" in a:
                seen.add(a["radius_unit"])
                digits = format(a["radius"], "g") if isinstance(a["radius"], float) else str(a["radius"])
                assert digits.lstrip("0") in msg.replace(",", ""), (msg, a)
    assert seen == {"m", "km", "ft", "nm"}


def test_conversations_whose_last_turn_stands_on_its_own():
    import random

    from clover.airspace.chats import multi_turn, multiturn_set

    convs = [multi_turn(random.Random(i), "train") for i in range(300)]
    assert {c["final_kind"] for c in convs} == {
        "tool_call",
        "compound",
        "no_tool",
        "unserved",
        "missing_tool",
        "clarify",
        "no_tools",
    }
    thanks = 0
    for c in convs:
        msgs = [m for m in c["messages"] if m["role"] != "system"]
        answers = [m for m in msgs if m["role"] == "assistant" and m.get("weight", 1) != 0]
        assert c["kind"] == "multi_turn" and len(answers) == 1 and msgs[-1] is answers[0]
        assert sum(m["role"] == "user" for m in msgs) >= 2  # at least one earlier exchange
        offered = {t["function"]["name"] for t in c["tools"] or []}
        assert all(plain_call(tc)["name"] in offered for m in msgs for tc in m.get("tool_calls") or [])
        assert all(not _MARKUP.search(m["content"] or "") for m in msgs if m["role"] in ("user", "assistant"))
        thanks += c["final_kind"] == "no_tool" and "welcome" in msgs[-1]["content"].lower()
    assert thanks > 5  # "thanks" after a history is answered in words, not with the history's call
    a, b = multiturn_set("validation", 30), multiturn_set("validation", 30)
    assert (
        json.dumps(a, ensure_ascii=False)
        == json.dumps(b, ensure_ascii=False)
        != json.dumps(multiturn_set("test", 30), ensure_ascii=False)
    )


def _call_turns(ex: dict):
    """(messages before an assistant turn with calls, its calls as dicts) for every such turn."""
    msgs = ex["messages"]
    for i, m in enumerate(msgs):
        for c in m.get("tool_calls") or []:
            yield msgs[:i], plain_call(c)


def test_every_gold_answer_satisfies_its_own_grounding(train):
    """Every gold call of the train split (and of multi-turn conversations and greetings) keeps its
    own tools' x-grounded constraints: the grounded grammar accepts its arguments, and the slow
    check (spans and written numbers) agrees."""
    from clover.airspace.chats import greeting, multi_turn
    from clover.airspace.evaluate import ungrounded_args
    from clover.engine.grammar import json_grammar
    from clover.engine.grammar.grounding import source_texts

    rng = random.Random(3)
    extra = [multi_turn(rng, "train") for _ in range(300)] + [greeting(rng, "train") for _ in range(100)]
    grammars: dict[str, object] = {}
    checked = 0
    for ex in train + extra:
        for before, call in _call_turns(ex):
            tool = extraction_tool(call["name"])
            src = source_texts(before)
            n, bad = ungrounded_args([call], [tool], src)
            assert bad == 0, (call, src["user"])
            g = grammars.setdefault(call["name"], json_grammar(tool["function"]["parameters"]))
            assert g.with_sources(src).accepts(json.dumps(call["arguments"], ensure_ascii=False)), (call, src["user"])
            checked += n
    assert checked > 5000


def test_greetings_and_thanks_are_answered_in_words():
    from clover.airspace.chats import greeting_set

    for ex in greeting_set("validation", 40) + greeting_set("train", 40):
        last = ex["messages"][-1]
        assert last["role"] == "assistant" and last["content"] and not last.get("tool_calls")
        assert "Sorry" not in last["content"]


def test_greetings_can_come_in_a_chat_without_tools():
    """``no_tools`` draws a share of greetings as a plain chat (no tools offered), answered the
    same; a thanks after a tool exchange keeps its tools, and the fixed sets offer tools always."""
    import random

    from clover.airspace.chats import greeting, greeting_set

    rng = random.Random(0)
    drawn = [greeting(rng, "train", no_tools=0.5) for _ in range(400)]
    plain = [ex for ex in drawn if ex["tools"] is None]
    assert 60 < len(plain) < 240 and all(len(ex["messages"]) == 2 for ex in plain)
    assert all(ex["tools"] for ex in drawn if len(ex["messages"]) > 2)
    answers = {ex["messages"][-1]["content"] for ex in plain}
    assert answers <= {ex["messages"][-1]["content"] for ex in drawn if ex["tools"]}
    assert all(ex["tools"] for ex in greeting_set("validation", 40))


def test_composed_greeting_remarks_are_trains_own_and_vary():
    """``composed`` builds a share of train's remarks from parts: many distinct ones, none another
    split's fixed remark; validation and test keep their fixed remarks whatever ``composed`` says,
    and with ``composed`` 0 train's remarks are the fixed ones."""
    import random

    from clover.airspace.chats import RESULT_REMARKS, SHIFT_REMARKS, composed_remark, greeting
    from clover.airspace.phrasing import _pool

    rng = random.Random(0)
    held_out = {r.lower() for s in ("validation", "test") for r in _pool(RESULT_REMARKS + SHIFT_REMARKS, s)}
    made = [composed_remark(rng, result=i % 2 == 0) for i in range(2000)]
    assert len(set(made)) > 1000 and not {m.lower() for m in made} & held_out
    assert all("{" not in m and "}" not in m and "  " not in m for m in made)

    def messages(split, composed, n=200):
        rng = random.Random(1)
        return [greeting(rng, split, composed=composed)["messages"][-2]["content"] for _ in range(n)]

    assert messages("validation", 0.9) == messages("validation", 0.0)
    assert messages("train", 0.9) != messages("train", 0.0)
    fixed = _pool(RESULT_REMARKS + SHIFT_REMARKS, "train")
    with_fixed = lambda ms: sum(any(r.lower() in m.lower() for r in fixed) for m in ms)
    assert with_fixed(messages("train", 0.0)) > 60 and with_fixed(messages("train", 1.0)) < 5


def test_a_greeting_that_is_also_small_talk_has_small_talks_answer():
    """ "hello" or "thanks" can be drawn as small talk or as a greeting; both must answer it word
    for word the same, or the model learns two answers to one message and blends them."""
    import random

    from clover.airspace.chats import SMALLTALK, greeting

    known = dict(SMALLTALK)
    rng = random.Random(3)
    seen = 0
    for _ in range(3000):
        ex = greeting(rng, rng.choice(["train", "validation", "test"]), no_tools=0.5)
        message, answer = ex["messages"][-2]["content"], ex["messages"][-1]["content"]
        key = message.lower().rstrip("!.")
        if key in known:
            seen += 1
            assert answer == known[key], (message, answer)
    assert seen > 30
