"""The extraction tool set (task ``airspace2``): the six airspace tools, with every length given
as the operator gave it, a number and its unit, instead of whole metres.

A model should copy what it reads and leave arithmetic to code: "2000 ft" is
``{"radius": 2000, "radius_unit": "ft"}``, and the world (``clover.airspace.world.execute``, which
the agent loop runs) converts it to metres. The conventions the corpus's gold answers obey:

* a length is the number as written (``1.5``, ``2,500`` → ``2500``) and its unit, one of
  :data:`UNITS`; 1 ft = 0.3048 m, 1 nm = 1852 m (international definitions), rounded half up to
  whole metres by the world;
* times are 24-hour ``HH:MM``; drone ids ``D-<number>``; coordinates signed decimal degrees with
  the digits as written; zone names and mission targets copied exactly as written.

The world also takes the metres form of ``clover.airspace.tools`` (``radius_m``, ``altitude_m``)
from clients that send it.
"""

from __future__ import annotations

import copy
import json
import re
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache

from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data import default_model_dir

UNITS: dict[str, Decimal] = {"m": Decimal(1), "km": Decimal(1000), "ft": Decimal("0.3048"), "nm": Decimal(1852)}
# what operators and clients write for each unit (lowercased); the schema's enum is the keys of UNITS
_ALIASES = {
    "m": ("m", "metre", "metres", "meter", "meters"),
    "km": ("km", "kms", "kilometre", "kilometres", "kilometer", "kilometers"),
    "ft": ("ft", "foot", "feet"),
    "nm": ("nm", "nmi", "nautical mile", "nautical miles"),
}
_UNIT_OF = {alias: unit for unit, aliases in _ALIASES.items() for alias in aliases}
# tool -> (the length argument, its unit argument, the metres argument of the metres form)
LENGTHS = {
    "create_no_fly_zone": ("radius", "radius_unit", "radius_m"),
    "update_waypoint": ("altitude", "altitude_unit", "altitude_m"),
}


def unit_of(text) -> str | None:
    """The unit a client's spelling names ("NM", "feet", "Meters" → nm, ft, m), or None."""
    return _UNIT_OF.get(" ".join(text.lower().split())) if isinstance(text, str) else None


def length_m(value: float | int | str, unit: str) -> int:
    """A length in whole metres, rounded half up: (1.5, "nm") → 2778, (2000, "ft") → 610.
    ``value`` may be a number or its text ("2,500"); ``unit`` one of :data:`UNITS` or an alias."""
    u = unit_of(unit)
    if u is None:
        raise ValueError(f"unknown unit {unit!r}; use one of {', '.join(UNITS)}")
    x = Decimal(value.replace(",", "")) if isinstance(value, str) else Decimal(str(value))
    return int((x * UNITS[u]).quantize(Decimal(1), rounding=ROUND_HALF_UP))


_DIGITS = re.compile(r"\d+")
# the arguments copied from the conversation, and from where (``x-grounded``)
# (drone ids are not: the bundled model writes the world's D-<n>, which a message rarely holds as
# written, and copying them as written needs a model trained to; the world reads both forms)
GROUNDED = {
    "zone_name": "conversation",
    "target": "user",
    "lat": "user",
    "lon": "user",
    "radius": "user",
    "altitude": "user",
    "waypoint_index": "user",
}


def drone_key(text):
    """A drone as written ("drone 948", "UAV-948", "#948", "d948") as the world's id ``D-948``: the
    last number in it. Text without digits (or not a string) is returned as it is."""
    if not isinstance(text, str):
        return text
    found = _DIGITS.findall(text)
    return f"D-{int(found[-1])}" if found else text


def _grounded(tool: dict) -> dict:
    """``x-grounded`` on every argument copied from the conversation."""
    props = tool["function"]["parameters"]["properties"]
    for k, v in props.items():
        if k in GROUNDED:
            v["x-grounded"] = GROUNDED[k]
    return tool


def _with_units(tool: dict) -> dict:
    t = copy.deepcopy(tool)
    fn = t["function"]
    if fn["name"] not in LENGTHS:
        return t
    value, unit, metres = LENGTHS[fn["name"]]
    what = "Radius" if value == "radius" else "Altitude"
    params = fn["parameters"]
    props = {}
    for k, v in params["properties"].items():
        if k != metres:
            props[k] = v
            continue
        props[value] = {"type": "number", "description": f"{what} as the operator gave it, the number only."}
        props[unit] = {
            "type": "string",
            "enum": list(UNITS),
            "description": f"The unit the {what.lower()} was given in.",
        }
    params["properties"] = props
    if metres in params["required"]:
        params["required"] = [x for k in params["required"] for x in ((value, unit) if k == metres else (k,))]
    if fn["name"] == "create_no_fly_zone":
        fn["description"] = (
            "Create a circular no-fly zone around a point. Radius as given, with its unit (m, km, ft, "
            "nm); optional activation window as 24-hour HH:MM times."
        )
    return t


EXTRACTION_TOOLS: list[dict] = [_grounded(_with_units(t)) for t in AIRSPACE_TOOLS]


# the values-as-written form (``values.as_written`` reads them): lengths, times and drone ids are
# spans of the operator's words, copied as written; code reads them
_WRITTEN = {
    "radius": "Radius as the operator wrote it, number and unit: '2.5 km', '1,500 ft', '2 nm'.",
    "altitude": "New altitude as the operator wrote it, number and unit: '120 m', '400 ft'.",
    "start_time": "Activation start as the operator wrote it: '6pm', '0045 hrs', '18:30'.",
    "end_time": "Activation end as the operator wrote it: '9pm', '2130', 'noon'.",
    "drone_id": "The drone as the operator wrote it: 'drone 17', '#901', 'UAV-23', 'D-17'.",
}
GROUNDED_WRITTEN = {**GROUNDED, "start_time": "user", "end_time": "user", "drone_id": "user"}
# what each value as written looks like (a ``pattern``, which grounding also holds a copy to: a span
# ends where its value ends, "0030" and not "0030 PLEASE"); every form ``values.as_written`` reads
# that operators write with digits, and the worded times. Tool signatures show no pattern: the
# prompt is the same with or without them
_NUMBER = r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
_LENGTH_UNIT = (
    r"(?:m|km|kms|ft|nm|nmi|mi|yd|n mi|naut mi|feet|foot|miles?|yards?|mtrs?|metres?|meters?|"
    r"kilometres?|kilometers?|nautical miles?|statute miles?)"
)
_HOUR = r"(?:[0-9]{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_TIME = (
    r"(?:[0-9]{1,2}(?:[:.][0-9]{2})?(?: ?hrs?)?(?: ?[ap]\.? ?m\.?)?|[0-9]{4}(?: ?hrs?| ?h)?|[0-9]{1,2}h(?:[0-9]{2})?"
    r"|noon|midday|midnight"
    rf"|(?:(?:half|quarter|five|ten|twenty|twenty-five|twenty five) (?:past|to) )?{_HOUR}(?: o['’]clock)?"
    r"(?: ?[ap]\.? ?m\.?| in the (?:morning|afternoon|evening)| at night| tonight)?)"
)
_DRONE = r"(?:(?:drone|uav|unit|d)[ -]?(?:no\. ?)?)?(?:#|d-?|uav-?)?[0-9]+"
PATTERNS = {
    "radius": rf"^(?i:{_NUMBER}[ -]?{_LENGTH_UNIT}\.?)$",
    "altitude": rf"^(?i:{_NUMBER}[ -]?{_LENGTH_UNIT}\.?)$",
    "start_time": rf"^(?i:{_TIME})$",
    "end_time": rf"^(?i:{_TIME})$",
    "drone_id": rf"^(?i:{_DRONE})$",
}


def _written_property(k: str) -> dict:
    return {"type": "string", "description": _WRITTEN[k], "pattern": PATTERNS[k], "x-grounded": GROUNDED_WRITTEN[k]}


def _written(tool: dict) -> dict:
    t = copy.deepcopy(tool)
    fn = t["function"]
    params = fn["parameters"]
    units = LENGTHS[fn["name"]][1] if fn["name"] in LENGTHS else None
    params["properties"] = {
        k: (_written_property(k) if k in _WRITTEN else v) for k, v in params["properties"].items() if k != units
    }
    params["required"] = [k for k in params["required"] if k != units]
    if fn["name"] == "create_no_fly_zone":
        fn["description"] = (
            "Create a circular no-fly zone around a point. Radius and activation window as the operator wrote them."
        )
    return t


WRITTEN_TOOLS: list[dict] = [_written(t) for t in EXTRACTION_TOOLS]


def values_form(config) -> str:
    """The form of values a model was trained on (its config's ``extra["values"]``): "written"
    (``WRITTEN_TOOLS``) or "units" (``EXTRACTION_TOOLS``, also a model that names none); with
    ``config`` None, the bundled model's."""
    if config is None:
        return bundled_values_form()
    return (getattr(config, "extra", None) or {}).get("values") or "units"


@lru_cache(maxsize=1)
def bundled_values_form() -> str:
    """The form of values the bundled model (``clover/assets/default``) was trained on, read once
    per process (the agent loop asks for it per task, ``Task.offered()`` per call)."""
    try:
        extra = json.loads((default_model_dir() / "config.json").read_text()).get("extra") or {}
    except FileNotFoundError:
        return "units"
    return extra.get("values") or "units"


def tools_in_form(tools: list[dict] | None, form: str) -> list[dict] | None:
    """``tools`` (airspace tools in either form, any subset and order) as a model trained on values
    in ``form`` is offered them: ``written_form`` for "written", unchanged for "units"."""
    return written_form(tools) if form == "written" else tools


def written_form(tools: list[dict] | None) -> list[dict] | None:
    """``tools`` (the extraction tools, any subset and order) in the values-as-written form;
    a tool that is not an airspace tool is kept as it is."""
    if tools is None:
        return None
    by_name = {t["function"]["name"]: t for t in WRITTEN_TOOLS}
    return [by_name.get(t["function"]["name"], t) for t in tools]


def extraction_tool(name: str) -> dict:
    """The extraction form of tool ``name`` (KeyError if it is not an airspace tool)."""
    for t in EXTRACTION_TOOLS:
        if t["function"]["name"] == name:
            return t
    raise KeyError(name)


def uses_units(name: str, arguments) -> bool:
    """Whether a call gives a length in the extraction form (a value or a unit argument)."""
    return name in LENGTHS and isinstance(arguments, dict) and any(k in arguments for k in LENGTHS[name][:2])


def with_unit_names(name: str, arguments: dict) -> dict:
    """``arguments`` with the unit's spelling made the schema's (``"NM"`` → ``"nm"``); an unknown
    spelling is left for the schema check to refuse."""
    unit_key = LENGTHS[name][1]
    u = unit_of(arguments.get(unit_key))
    return {**arguments, unit_key: u} if u is not None else arguments


def in_metres(name: str, arguments: dict) -> tuple[dict | None, str | None]:
    """Checked extraction-form ``arguments`` in the metres form the world runs → (arguments,
    None), or (None, the error the model reads)."""
    value, unit, metres = LENGTHS[name]
    if metres in arguments:
        return None, f"give {value} with {unit}, or {metres}, not both"
    if (value in arguments) != (unit in arguments):
        return None, f"{value} and {unit} go together: got {value if value in arguments else unit} alone"
    out = {k: v for k, v in arguments.items() if k not in (value, unit)}
    if value in arguments:
        if arguments[value] < 0 or (arguments[value] == 0 and value == "radius"):
            sign = "positive" if value == "radius" else "not negative"
            return None, f"{value} must be {sign}, got {arguments[value]}"
        out[metres] = length_m(arguments[value], arguments[unit])
        if value == "radius" and out[metres] == 0:
            return None, f"radius {arguments[value]} {arguments[unit]} is under half a metre"
    return out, None
