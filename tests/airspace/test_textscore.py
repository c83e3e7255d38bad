"""Answers in words judged by what they say (``clover.airspace.textscore``): for each measure,
the right answer passes and a garbled word, a repeated word and wrong content each fail."""

import json
from pathlib import Path

import pytest

from clover.airspace.calls import answers, gold_calls
from clover.airspace.chats import _FINE, _THANKS, greeting_set, load_split, multiturn_set
from clover.airspace.scoring import reply_right2
from clover.airspace.textscore import CHRF_THRESHOLD, chrf, fixed_replies, plain_right, words_match
from tests.helpers import benchmark_script

ROOT = Path(__file__).parents[2]


def _gold(ex):
    return answers(ex)[0]["content"]


def _first(kind: str, fixed: bool):
    return next(
        e
        for e in load_split("validation", 400)
        if e["kind"] == kind and (_gold(e) in fixed_replies()) == fixed and len(_gold(e).split()) > 3
    )


def _wrong_ones(gold: str, other: str) -> list[str]:
    """A garbled word, a repeated word, wrong content."""
    words = gold.split(" ")
    garbled = " ".join([*words[:2], words[2] + "a", *words[3:]])
    repeated = " ".join([*words[:2], words[2], words[2], *words[3:]])
    return [garbled, repeated, other]


@pytest.mark.parametrize("kind, fixed", [("clarify", False), ("unserved", True), ("missing_tool", True)])
def test_a_reply_in_words_passes_only_as_the_gold_reply(kind, fixed):
    ex = _first(kind, fixed)
    gold = _gold(ex)
    assert reply_right2(gold, ex) and reply_right2(f"  {gold}\n", ex)
    for wrong in _wrong_ones(gold, "Which drone do you mean?"):
        assert not reply_right2(wrong, ex), wrong
    call = '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-1"}}</tool_call>'
    assert not reply_right2(gold + call, ex) and not reply_right2("", ex)


def test_the_issue_examples_fail():
    ex = {
        "messages": [
            {"role": "user", "content": "eta?"},
            {"role": "assistant", "content": "ETA 2 minutes, zone lifted."},
        ]
    }
    assert not reply_right2("ETA 2 minutesa a been lifted", ex) and reply_right2("ETA 2 minutes, zone lifted.", ex)


def test_a_conversation_whose_last_turn_is_words_is_scored_as_a_reply():
    ex = next(e for e in multiturn_set("validation", 100) if e["final_kind"] == "clarify")
    assert not gold_calls(ex) and len(ex["messages"]) > 3
    gold = _gold(ex)
    assert reply_right2(gold, ex)
    for wrong in _wrong_ones(gold, "Sorry, I can't help with that: I only handle airspace operations."):
        assert not reply_right2(wrong, ex), wrong


def test_a_plain_continuation_passes_only_as_the_held_out_line():
    ex = {
        "prompt": "Drone 17 is",
        "text": "Drone 17 is hovering at 51.25, 4.3, battery 57%.\nZone Alpha was lifted at 12:00.",
    }
    right = " hovering at 51.25, 4.3, battery 57%."
    assert plain_right(right, ex) and plain_right(right + "\nD-4 is charging at 1.0, 2.0, battery 9%.", ex)
    assert plain_right(" hovering at 8.5, -120.75, battery 3%.", ex)  # the numbers are drawn at random
    for wrong in (
        " hovering at 51.25, 4.3, batterya 57%.",  # a garbled word
        " hovering hovering at 51.25, 4.3, battery 57%.",  # a repeated word
        " landed at base at 12:00 with 57% battery left.",  # wrong content
        " at Zone Zone Zone Zone",  # the issue's
        ' <tool_call>{"name": "recall_drone"',
        "",
    ):
        assert not plain_right(wrong, ex), wrong


def test_a_plain_line_that_ends_with_the_text_or_before_the_next_line():
    ex = {"prompt": "Zone Dakar Lake was", "text": "Zone Dakar Lake was lifted at 12h. D-4 landed at base at 1 p.m.."}
    assert plain_right(" lifted at 12h.", ex) and plain_right(" lifted at 9h. Drone 5 is", ex)
    assert not plain_right(" lifted at 12h with", ex)
    ex = {"prompt": "D-4 landed", "text": "D-4 landed at base at 1 p.m.."}
    assert plain_right(" at base at 1 p.m..", ex) and not plain_right(" at base at 1 p.m.", ex)


@pytest.mark.parametrize("gold", [_THANKS, _FINE])
def test_a_greeting_passes_only_with_the_corpus_answer(gold):
    greetings = benchmark_script("greetings")
    out = lambda text, calls=None: {"choices": [{"message": {"content": text, "tool_calls": calls}}]}
    words = gold.split(" ")
    wrong = [
        " ".join([words[0] + "a", *words[1:]]),  # a garbled word
        " ".join([words[0], *words]),  # a repeated word
        "Sorry, none of my tools can do that.",  # wrong content
    ]
    outs = [out(gold), *map(out, wrong), out(gold, [{"function": {"name": "recall_drone"}}])]
    assert greetings.answered(outs, [gold] * len(outs)) == [True, False, False, False, False]
    assert {ex["messages"][-1]["content"] for ex in greeting_set("test", 40)} <= fixed_replies()


def test_a_reply_that_is_not_a_fixed_answer_is_scored_by_chrf_above_the_threshold():
    gold = "What radius should the no-fly zone Lake-9 have?"
    assert chrf(gold, gold) == 100 and words_match(gold.replace(" ", "  "), gold)
    near = "What radius should the no-fly zone Lake-9 have ?"  # spacing only: chrF reads no spaces
    assert chrf(near, gold) >= CHRF_THRESHOLD and words_match(near, gold)
    assert not words_match(near, gold, fixed=True)  # a fixed answer: word for word


def test_the_threshold_is_the_one_chosen_on_validation():
    bench = benchmark_script("text_threshold")
    figures = bench.measure(bench.gold_texts(100, 100, 20))
    assert figures["threshold"] == CHRF_THRESHOLD
    stored = json.loads((ROOT / "benchmarks" / "results" / "text-threshold.json").read_text())
    assert stored["figures"]["threshold"] == CHRF_THRESHOLD
    # every wrong variant fails at it: as a repeated word, or below the threshold
    assert all(r["max_chrf"] < CHRF_THRESHOLD for r in figures["variants"].values())
    assert all(r["failed"] == r["variants"] for r in figures["variants"].values())
