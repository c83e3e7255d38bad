"""Answers in words judged by what they say, against the corpus's own text: a reply in words
(small talk, a decline, a question for a missing argument, a greeting), the last turn of a
conversation answered in words, a plain-text continuation.

* A reply whose gold is one of the corpus's fixed answers (:func:`fixed_replies`: "You're
  welcome.", the decline of a tool not offered, ...) is right only as that text, word for word.
* Any other reply (a question that names the zone, drone or number of its message) is right when
  it repeats no word its gold does not repeat (``stutters``'s rule) and its chrF against the gold
  (``sacrebleu``'s sentence chrF: character n-grams up to 6, recall weighted twice) is at least
  :data:`CHRF_THRESHOLD`. That threshold was chosen on the validation split by
  ``benchmarks/text_threshold.py``: the lowest whole score above every wrong variant of a
  validation gold text (one word garbled, another turn's text); docs/benchmarks.md shows its run.
* A plain-text continuation is judged the same way against the rest of its held-out line, with
  every number written as ``0`` on both sides (a log line's numbers are drawn at random: no
  model can know them, while its words, units and punctuation follow from the prompt).
"""

from __future__ import annotations

import functools
import re

from clover.airspace.evaluate import repeated_words

CHRF_THRESHOLD = 99  # benchmarks/text_threshold.py, validation split


@functools.cache
def _chrf():
    from sacrebleu.metrics import CHRF  # deferred: only scoring needs it

    return CHRF()


def chrf(said: str, gold: str) -> float:
    """``said``'s sentence chrF against ``gold`` (0-100; 100: the same characters)."""
    return _chrf().sentence_score(said, [gold]).score


@functools.cache
def fixed_replies() -> frozenset[str]:
    """The corpus's fixed answers in words: small talk's, the greetings', the decline of each
    tool not offered, the answer to a request no tool serves."""
    from clover.airspace.chats import _FINE, _HELLO, _THANKS, UNSERVED
    from clover.airspace.replies import _CAPABILITY, SMALLTALK, declined

    return frozenset({a for _, a in SMALLTALK} | {_FINE, _HELLO, _THANKS, UNSERVED} | set(map(declined, _CAPABILITY)))


def words_match(said: str | None, gold: str, fixed: bool | None = None) -> bool:
    """``said`` says ``gold``: word for word when ``gold`` is a fixed answer (``fixed``; None: when
    it is one of :func:`fixed_replies`), else a chrF of at least :data:`CHRF_THRESHOLD` and no
    repeated word the gold does not repeat."""
    said, gold = (said or "").strip(), gold.strip()
    if said == gold:
        return True
    if fixed if fixed is not None else gold in fixed_replies():
        return False
    return not (repeated_words(said) - repeated_words(gold)) and chrf(said, gold) >= CHRF_THRESHOLD


def reply_words_right(text: str | None, ex: dict) -> bool:
    """A reply in words (``text``, the model's whole answer) scored against ``ex``'s gold reply: no
    call, and its words match (:func:`words_match`)."""
    from clover.airspace.calls import answers
    from clover.data.chat import parse_assistant

    content, calls = parse_assistant(text or "")
    return not calls and words_match(content, answers(ex)[0].get("content") or "")


# A log line ends with a full stop before the next line ("Drone ...", "D-...", "No-fly zone ...",
# "Zone ...") or the end of the text; lines are joined by a newline or a space.
_LINE_END = re.compile(r"\.(?=\s*$|\n|\s(?:Drone |D-\d|No-fly zone |Zone ))")
_NUMBER = re.compile(r"(?<![A-Za-z])-?\d+")  # a sign too, not a drone id's "D-" hyphen


def first_line(text: str) -> str:
    """``text`` up to the end of its first log line (all of it when no line ends)."""
    m = _LINE_END.search(text)
    return text[: m.end()] if m else text


def numbers_masked(text: str) -> str:
    """Every number written as ``0``, its sign too ("12.5, -139.7, D-17" is "0.0, 0.0, D-0")."""
    return _NUMBER.sub("0", text)


def plain_right(text: str | None, ex: dict) -> bool:
    """A plain-text continuation of ``ex["prompt"]`` scored against the rest of its held-out line
    (``ex["text"]``): no call markup, and the continuation's first line, numbers masked, matches
    the gold's (:func:`words_match`, never a fixed answer)."""
    text = text or ""
    if "<tool_call>" in text:
        return False
    gold = first_line(ex["text"][len(ex["prompt"]) :])
    return words_match(numbers_masked(first_line(text)), numbers_masked(gold), fixed=False)
