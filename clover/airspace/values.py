"""Values as an operator writes them, read into the forms the world acts on (issue 51).

A tool call may give a length, a time or a drone id as the operator wrote it, and the world
(``clover.airspace.world.execute``) reads it here before checking the call against the schema,
so a call written either way has the same effect:

* a length, one phrase in the length argument (``radius``/``altitude``, with no unit argument;
  the metres arguments ``radius_m``/``altitude_m`` stay whole numbers of metres): "2.5 km",
  "1,500 ft", "1.5 nautical miles", "2 nmi", "400 feet", "400-foot", "2km". The ``pint`` units
  library reads the unit, except the schema's four and their aliases ("nm", "NM", "nmi",
  "nautical miles", "kms"; pint reads "nm" as nanometres), which the tools' own table reads, and
  "mtrs" and "n mi", which pint does not know. The result is whole metres, rounded
  half up as ``clover.airspace.extraction_tools.length_m`` rounds;
* a time (``start_time``/``end_time``) → 24-hour ``HH:MM``: ``python-dateutil`` reads the clock
  forms ("6pm", "6:30 p.m.", "18:00"); the rules below read what it refuses or misreads: 4-digit
  times ("2130", "0045 hrs", which dateutil takes for a year), "9.30am" (dateutil: 09:00), "18h30",
  a bare hour ("until 11"), "noon", "midnight" and the worded forms ("half past eight in the
  evening", "quarter to nine", "ten o'clock in the morning");
* a drone id ("drone 17", "#901", "uav-941", "d17") → ``D-<n>`` by ``drone_key``.

A value none of these reads ("a bit", "later", "the big one") is an error naming the argument,
which ``execute`` returns as the tool's result; values already in the world's form pass unchanged.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache

from clover.airspace.extraction_tools import LENGTHS, UNITS, drone_key, unit_of


class Unreadable(ValueError):
    """A value as written that no reader here understands."""


# -- lengths ----------------------------------------------------------------------------------------
# spellings of a unit outside the schema's four that pint does not read as meant (lowercased,
# single spaces) -> pint's unit; the schema's units and their aliases are ``tools.unit_of``'s
_UNIT_ALIASES = {"n mi": "nautical_mile", "naut mi": "nautical_mile", "mtr": "metre", "mtrs": "metre"}
_LENGTH = re.compile(r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)[ -]?(?P<unit>[a-z][a-z .']*?)\.?")


@lru_cache(maxsize=1)
def _registry():
    import pint  # imported when a length as written is first read

    return pint.UnitRegistry()


@lru_cache(maxsize=64)
def _metres_per(unit: str) -> Decimal:
    """Metres in one ``unit`` (an operator's spelling): the schema's own table for its units and
    their aliases (``tools.unit_of``: "nm" is nautical miles, where pint reads nanometres), pint
    for any other; Unreadable if not a length."""
    u = unit_of(unit)
    if u is not None:
        return UNITS[u]
    name = _UNIT_ALIASES.get(unit, unit)
    try:
        q = _registry().Quantity(1, name)
        if not q.check("[length]"):
            raise Unreadable(f"{unit!r} is not a unit of length")
        return Decimal(f"{q.to('m').magnitude:.12g}")  # 0.30479999999999996 ft -> 0.3048
    except Unreadable:
        raise
    except Exception as e:  # pint's errors for an unknown unit or a bad expression
        raise Unreadable(f"{unit!r} is not a unit of length") from e


def length_parts(text: str) -> tuple[str, str] | None:
    """A length as written split into its number and its unit as written, lowercased
    ("1,500 ft." → ("1,500", "ft")), or None if it is not a number followed by a unit."""
    m = _LENGTH.fullmatch(" ".join(text.lower().split()))
    return (m["num"], " ".join(m["unit"].split())) if m else None


def read_length(text: str) -> int:
    """A length as written → whole metres, rounded half up: "2.5 km" → 2500, "1,500 ft" → 457,
    "1.5 nautical miles" → 2778. Unreadable if it is not a number and a unit of length."""
    parts = length_parts(text)
    if parts is None:
        raise Unreadable("not a number with a unit")
    x = Decimal(parts[0].replace(",", "")) * _metres_per(parts[1])
    return int(x.quantize(Decimal(1), rounding=ROUND_HALF_UP))


# -- times ------------------------------------------------------------------------------------------
_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
_NUMBERS = {w: i for i, w in enumerate(_WORDS)} | {"twenty": 20, "a quarter": 15, "quarter": 15, "half": 30}
_NUMBERS |= {f"twenty{sep}{_WORDS[i]}": 20 + i for i in range(1, 10) for sep in ("-", " ")}
_PERIODS = {
    "am": "am",
    "in the morning": "am",
    "pm": "pm",
    "in the afternoon": "pm",
    "in the evening": "pm",
    "at night": "pm",
    "tonight": "pm",
}
_NUM = r"\d{1,2}|[a-z]+(?:[- ][a-z]+)?"
_WORDED = re.compile(
    rf"(?:(?P<min>{_NUM})(?: minutes?)? (?P<dir>past|after|to) )?(?P<hour>{_NUM})(?: o'?clock)?"
    rf"(?: ?(?P<period>{'|'.join(_PERIODS)}))?"
)
_COMPACT = re.compile(r"(?P<h>\d{1,2})(?P<m>\d{2})(?: ?(?:hrs?|hours))?|(?P<fh>\d{1,2})h(?P<fm>\d{2})?")
_CLOCK = re.compile(r"\d{1,2}(?::\d{2})? ?(?:am|pm)|\d{1,2}:\d{2}")  # what dateutil is asked to read
_HHMM = re.compile(r"(?:[01]\d|2[0-3]):[0-5]\d")
_NAMED = {"noon": "12:00", "midday": "12:00", "midnight": "00:00"}


def _number(word: str) -> int:
    if word.isdigit():
        return int(word)
    if word not in _NUMBERS:
        raise Unreadable(f"{word!r} is not a number")
    return _NUMBERS[word]


def _hhmm(h: int, m: int) -> str:
    if not (0 <= h <= 23 and 0 <= m <= 59):
        raise Unreadable("not a time of day")
    return f"{h:02d}:{m:02d}"


def _worded(m: re.Match) -> str:
    """ "half past eight in the evening" → 20:30, "quarter to 9 pm" → 20:45, "ten o'clock" → 10:00."""
    h, period = _number(m["hour"]), _PERIODS.get(m["period"] or "")
    if period and not 1 <= h <= 12:
        raise Unreadable("a 12-hour time needs an hour from 1 to 12")
    if period:
        h = h % 12 + (12 if period == "pm" and not (h == 12 and "night" in m["period"]) else 0)
    if not 0 <= h <= 23:
        raise Unreadable("not an hour")
    minutes = h * 60
    if m["dir"]:
        offset = _number(m["min"])
        if not 0 < offset < 60:
            raise Unreadable("not minutes past or to an hour")
        minutes += -offset if m["dir"] == "to" else offset
    return _hhmm(minutes % 1440 // 60, minutes % 60)


def read_time(text: str) -> str:
    """A time of day as written → 24-hour ``HH:MM``: "6pm" → 18:00, "0045 hrs" → 00:45,
    "half past eight in the evening" → 20:30, "quarter to nine" → 08:45, "9.30am" → 09:30."""
    s = " ".join(text.lower().split())
    s = re.sub(r"(?<![a-z])([ap])\. ?m\.?(?= |$)", r"\1m", s)  # "p.m." -> "pm"
    s = re.sub(r"(?<=\d)\.(?=\d{2}(?!\d))", ":", s)  # "9.30am" -> "9:30am"
    if _HHMM.fullmatch(s) or s in _NAMED:  # the world's own form, "noon", "midnight"
        return _NAMED.get(s, s)
    if c := _COMPACT.fullmatch(s):  # "2130", "0045 hrs", "18h30", "18h"
        return _hhmm(int(c["h"] or c["fh"]), int(c["m"] or c["fm"] or 0))
    if s.isdigit() and len(s) <= 2:  # a bare hour, read as written: "until 11" is 11:00
        return _hhmm(int(s), 0)
    if _CLOCK.fullmatch(s):
        if s[-2:] in ("am", "pm") and not 1 <= int(re.match(r"\d+", s)[0]) <= 12:
            raise Unreadable("a 12-hour time needs an hour from 1 to 12")  # dateutil takes "13pm"
        from dateutil import parser  # imported when a clock time as written is first read

        try:
            return parser.parse(s, default=datetime(2000, 1, 1)).strftime("%H:%M")
        except (ValueError, OverflowError) as e:
            raise Unreadable("not a time of day") from e
    if w := _WORDED.fullmatch(s):
        return _worded(w)
    raise Unreadable("not a time of day")


# -- a call's arguments -----------------------------------------------------------------------------
_TIMES = ("start_time", "end_time")
_TIME_HELP = "a 24-hour HH:MM time, or as written: 6pm, 0045 hrs, half past eight in the evening"


def _length(name: str, arguments: dict) -> dict:
    """A length phrase in ``radius``/``altitude`` (no unit argument) → the metres argument."""
    value, unit, metres = LENGTHS[name]
    text = arguments.get(value)
    if not isinstance(text, str) or unit in arguments:  # a number with its unit: the schema's form
        return arguments
    if metres in arguments:
        raise Unreadable(f"give {value} or {metres}, not both")
    try:
        got = read_length(text)
    except Unreadable as e:
        raise Unreadable(f"{value}: cannot read {text!r} as a length ({e}; write e.g. 2.5 km, 1,500 ft, 2 nm)") from e
    if got == 0 and value == "radius":
        raise Unreadable(f"{value}: {text!r} is under half a metre; a radius must be positive")
    return {**{k: v for k, v in arguments.items() if k != value}, metres: got}


def as_written(name: str, arguments):
    """``arguments`` with the values written as an operator writes them read into the world's
    forms → (arguments, None), or (None, the error naming the argument it could not read).
    Anything else (not a dict, other types, other arguments) is left for the schema check."""
    if not isinstance(arguments, dict):
        return arguments, None
    out = dict(arguments)
    did = out.get("drone_id")
    if isinstance(did, str):
        out["drone_id"] = drone_key(did)
        if not re.search(r"\d", did):  # drone_key reads the number in it
            return None, f"unknown drone {did} (drone_id: no drone number in it; write D-17, drone 17 or #17)"
    for k in _TIMES:
        if isinstance(out.get(k), str):
            try:
                out[k] = read_time(out[k])
            except Unreadable:
                return None, f"{k}: cannot read {out[k]!r} as a time of day ({_TIME_HELP})"
    if name in LENGTHS:
        try:
            out = _length(name, out)
        except Unreadable as e:
            return None, str(e)
    return out, None
