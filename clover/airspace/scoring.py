"""``clover eval airspace2``: the first task's evaluation (``clover.airspace.evaluate``) on the
second corpus, with what that corpus adds.

* Tool-call turns (one call or several) are scored by what the calls do: a length in either form
  is read in whole metres before the exact match (``compare.in_metres_calls``), so
  ``{"radius": 1.5, "radius_unit": "nm"}`` and ``{"radius_m": 2778}`` are the same call. Their
  breakdown by length is by the unit the operator used (``ft``, ``nm``, ``km``, ``m`` or none).
* Replies in words (small talk, requests no tool serves, a tool not offered, a missing argument,
  chats offering no tools) are right when they call no tool and say the corpus's reply
  (``clover.airspace.textscore``: a fixed answer word for word, any other by chrF);
  ``text_exact`` counts those word for word, ``text_no_call`` (not a score) those that have words
  and no call, whatever the words.
* Conversations: half follow-ups, whose last turn refers back to an earlier one, half
  conversations whose last turn stands on its own (``corpus.multiturn_set``: thanks after a
  tool result, a new request, ...), by the last turn's kind (calls and replies scored as above).
* ``names_copied``: the share of the gold calls' names that the answer carries exactly, for name
  families training never saw (``held out``) and the others.
* Plain text: a line's first words continued without the chat template, as ``/v1/completions``
  does, right when the continuation's first line is the held-out rest of the line, numbers
  masked (``textscore.plain_right``).
"""

from __future__ import annotations

import dataclasses

from clover.airspace.calls import gold_calls, score_tool_calls
from clover.airspace.chats import TEXT_KINDS, load_split, multiturn_set, written_chat
from clover.airspace.compare import in_metres_calls
from clover.airspace.evaluate import Scoring, parse_assistant
from clover.airspace.extraction_tools import LENGTHS, unit_of, values_form
from clover.airspace.names import HELDOUT_FAMILIES
from clover.airspace.textscore import plain_right, reply_words_right
from clover.airspace.values import length_parts


def eval_chats2(split: str, n: int, n_text: int = 0, n_multi: int = 0, cases: list[dict] | None = None):
    """``n`` tool-call turns of ``split`` (or the hand-written ``cases``) and ``n_text`` replies
    in words from one fixed draw of the split, and ``n_multi`` conversations: half its follow-ups,
    half ``multiturn_set``'s."""
    if cases is not None:
        return cases, [], []
    ups = n_multi // 2
    pool = load_split(split, max(4 * n, 16 * n_text, 16 * ups, 50))
    exs = [e for e in pool if e["kind"] in ("tool_call", "compound")][:n]
    texts = [e for e in pool if e["kind"] in TEXT_KINDS][:n_text]
    convs = [{**e, "final_kind": "follow_up"} for e in pool if e["kind"] == "follow_up"][:ups]
    convs += multiturn_set(split, n_multi - ups)
    if len(exs) < n or len(texts) < n_text or len(convs) < n_multi:  # the draw is sized to hold them
        raise ValueError(f"the {split} draw holds too few chats for n={n}, text={n_text}, multiturn={n_multi}")
    return exs, texts, convs


def length_units(ex: dict, message: str) -> str:
    """The units a turn's gold lengths were given in (``ft``, ``nm+m``, …), or ``none``."""
    given = []
    for c in gold_calls(ex):
        if c["name"] not in LENGTHS:
            continue
        value, unit, _ = LENGTHS[c["name"]]
        if unit in c["arguments"]:
            given.append(c["arguments"][unit])
        elif isinstance(c["arguments"].get(value), str):  # as written: "2.5 km" -> km
            parts = length_parts(c["arguments"][value])
            given.append(parts[1] if parts else None)
    units = sorted({unit_of(u) or "?" for u in given})
    return "+".join(units) or "none"


def reply_right2(text: str | None, ex: dict) -> bool:
    """An answer scored: the gold calls by exact match with lengths in metres; a reply in words
    by what it says (``textscore.reply_words_right``: no call, and the gold reply's words)."""
    if gold := gold_calls(ex):
        return score_tool_calls(in_metres_calls(parse_assistant(text or "")[1]), in_metres_calls(gold))
    return reply_words_right(text, ex)


def plain_prompts(split: str, n: int) -> list[dict]:
    """``n`` plain-text lines of ``split`` (``{"prompt", "text"}``): a log line's first words."""
    return [e for e in load_split(split, 40 * n) if e["kind"] == "plain"][:n]


SCORING = Scoring(
    chats=eval_chats2,
    calls=in_metres_calls,
    unit=length_units,
    reply_right=reply_right2,
    plain=plain_prompts,
    plain_right=plain_right,
    names=lambda ex: ex.get("names", []),
    held_out=lambda family: family in HELDOUT_FAMILIES,
)


def written_chats(*args, **kwargs):
    """``eval_chats2``'s chats with tools and gold calls in the values-as-written form."""
    return tuple([written_chat(e) for e in chats] for chats in eval_chats2(*args, **kwargs))


# a model trained on values as written (``values: written`` in its config) is offered those tools
WRITTEN_SCORING = dataclasses.replace(SCORING, chats=written_chats)


def scoring_for(model) -> Scoring:
    """The scoring in the form of values ``model`` was trained on (its config's
    ``extra["values"]``): a model of values as written is offered those tools and scored on them."""
    return WRITTEN_SCORING if values_form(getattr(model, "config", None)) == "written" else SCORING
