"""The airspace world the six tools of ``clover.airspace.tools`` act on: no-fly zones, drones, a clock.

``execute(world, name, arguments)`` runs one tool call, its lengths in whole metres
(``radius_m``, ``altitude_m``) or as the operator gave them (``radius`` + ``radius_unit``: the
extraction tools of ``clover.airspace.extraction_tools``, converted here) or as written ("2.5 km"; times
"6pm", drone ids "drone 17": read by ``clover.airspace.values`` before anything else). A call is checked against the
tool's JSON schema (required arguments, types, enums, no unknown arguments) and against the world (a drone
that exists, a zone that exists or does not, a waypoint index in range, ...); a call that fails
a check returns ``{"error": "..."}`` for the model to read and leaves the world as it was. The
results have the shapes the corpus's ``tool_result`` turns use, so the bundled model reads them
as it was trained to.

The world's rules (docs/agent.md):

* zone names are unique and matched exactly (case included); drone ids are ``D-<number>``;
* a waypoint index is 1-based: drone D-5 with 8 waypoints has waypoints 1-8;
* a waypoint may not be moved inside a no-fly zone that is active at the world's clock;
* a drone with less than ``MIN_MISSION_BATTERY`` % battery cannot take a mission;
* recalling a drone ends its mission and sends it home ("returning to base"); a drone already
  on the ground or charging at base stays as it is;
* a status query reads the world and changes nothing.

``World.seeded(seed)`` is a world of drones and zones drawn from a seed; ``World.for_task(calls)``
is a seeded world in which a task's gold calls can all succeed (the drones they name exist and
fly with enough battery and waypoints, a zone to lift exists, a zone to create does not).
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import zlib
from dataclasses import asdict, dataclass, field

from clover.airspace.extraction_tools import drone_key, extraction_tool, in_metres, uses_units, with_unit_names
from clover.airspace.phrasing import drone_number, zone_name
from clover.airspace.tools import MISSION_TYPES, tool_by_name
from clover.airspace.values import as_written
from clover.data.task import StateTooLarge

STATES = ("en route", "hovering", "on the ground", "returning to base", "charging", "holding")  # the corpus's states
AIRBORNE = ("en route", "hovering", "holding")
MIN_MISSION_BATTERY = 20  # percent
SPEED_M_S = 15.0  # a drone's speed home, for a recall's ETA
MAX_ITEMS = 64  # drones, zones and a drone's waypoints in a world sent over HTTP (World.from_request)
_HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
_DRONE_ID = re.compile(r"^D-\d+$")


@dataclass
class Zone:
    name: str
    lat: float
    lon: float
    radius_m: int
    start_time: str | None = None  # 24-hour HH:MM; None: from now
    end_time: str | None = None  # None: until lifted

    def active_at(self, clock: str) -> bool:
        """Whether the zone is in force at ``clock`` (HH:MM); a window may run past midnight."""
        s, e = self.start_time, self.end_time
        if s is None and e is None:
            return True
        if s is None:
            return clock < e
        if e is None:
            return clock >= s
        return s <= clock < e if s <= e else clock >= s or clock < e

    def contains(self, lat: float, lon: float) -> bool:
        return distance_m(self.lat, self.lon, lat, lon) <= self.radius_m

    def describe(self) -> str:
        window = (
            f", {self.start_time or 'now'}-{self.end_time or 'until lifted'}"
            if self.start_time or self.end_time
            else ""
        )
        return f"{self.name!r} at ({self.lat}, {self.lon}), radius {self.radius_m} m{window}"


@dataclass
class Waypoint:
    lat: float
    lon: float
    altitude_m: int

    def describe(self) -> str:
        return f"({self.lat}, {self.lon}) at {self.altitude_m} m"


@dataclass
class Mission:
    id: str
    type: str
    target: str

    def describe(self) -> str:
        return f"{self.type} of {self.target!r} ({self.id})"


@dataclass
class Drone:
    id: str
    lat: float
    lon: float
    altitude_m: int
    base_lat: float
    base_lon: float
    battery_pct: int
    status: str
    waypoints: list[Waypoint] = field(default_factory=list)
    mission: Mission | None = None


@dataclass
class World:
    """Zones by name, drones by id and the clock (HH:MM). Two worlds are equal when their whole
    state is (``==``): that is how a task's outcome is scored against its gold calls' outcome."""

    clock: str = "12:00"
    zones: dict[str, Zone] = field(default_factory=dict)
    drones: dict[str, Drone] = field(default_factory=dict)

    def copy(self) -> World:
        return copy.deepcopy(self)

    def to_dict(self) -> dict:
        """The state as plain JSON-able data (zones and drones sorted by key)."""
        d = asdict(self)
        d["zones"] = dict(sorted(d["zones"].items()))
        d["drones"] = dict(sorted(d["drones"].items(), key=lambda kv: _id_key(kv[0])))
        return d

    def view(self) -> dict:
        """The state and what a map draws from it that only the world's rules know: the zones in force."""
        return {
            "world": self.to_dict(),
            "active_zones": [z.name for z in self.zones.values() if z.active_at(self.clock)],
        }

    @classmethod
    def from_request(cls, state: dict) -> World:
        """``from_dict`` for a state sent over HTTP, first bounded: a world of a few dozen drones
        and zones (``StateTooLarge`` naming the part that is not), each with a few dozen waypoints."""
        drones, zones = state.get("drones"), state.get("zones")
        for what, items in (("drones", drones), ("zones", zones)):
            if isinstance(items, dict) and len(items) > MAX_ITEMS:
                raise StateTooLarge(f"the world has {len(items)} {what}: at most {MAX_ITEMS}", f"world.{what}")
        for did, d in drones.items() if isinstance(drones, dict) else ():
            wps = d.get("waypoints") if isinstance(d, dict) else None
            if isinstance(wps, list) and len(wps) > MAX_ITEMS:
                raise StateTooLarge(f"drone {did} has {len(wps)} waypoints: at most {MAX_ITEMS}", "world")
        return cls.from_dict(state)

    @classmethod
    def from_dict(cls, d: dict) -> World:
        """The world ``to_dict`` wrote, checked as data from outside is (the server's
        ``/v1/agent/execute`` takes it from the page): every field present with its type, finite
        numbers, coordinates on Earth, an HH:MM clock and times, keys equal to the ids and names.
        Raises ``ValueError`` naming the first bad field."""
        d = _record(d, "world", {"clock": str, "zones": dict, "drones": dict})
        _hhmm(d["clock"], "world.clock")
        zones = {}
        for k, v in d["zones"].items():
            where = f"world.zones[{k!r}]"
            z = Zone(**_record(v, where, _ZONE_FIELDS))
            if z.name != k:
                raise ValueError(f"{where}.name must be its key, got {z.name!r}")
            _on_earth(z.lat, z.lon, where)
            for t in ("start_time", "end_time"):
                if getattr(z, t) is not None:
                    _hhmm(getattr(z, t), f"{where}.{t}")
            zones[k] = z
        drones = {}
        for k, v in d["drones"].items():
            where = f"world.drones[{k!r}]"
            v = _record(v, where, _DRONE_FIELDS)
            v["waypoints"] = [
                Waypoint(**_record(w, f"{where}.waypoints[{i}]", _WAYPOINT_FIELDS))
                for i, w in enumerate(v["waypoints"])
            ]
            v["mission"] = (
                None if v["mission"] is None else Mission(**_record(v["mission"], f"{where}.mission", _MISSION_FIELDS))
            )
            drone = Drone(**v)
            if drone.id != k:
                raise ValueError(f"{where}.id must be its key, got {drone.id!r}")
            for lat, lon in [
                (drone.lat, drone.lon),
                (drone.base_lat, drone.base_lon),
                *((w.lat, w.lon) for w in drone.waypoints),
            ]:
                _on_earth(lat, lon, where)
            drones[k] = drone
        return cls(clock=d["clock"], zones=zones, drones=drones)

    # -- seeded worlds --------------------------------------------------------------------------
    @classmethod
    def seeded(cls, seed: int = 0, n_drones: int = 6, n_zones: int = 3, area_deg: float | None = None) -> World:
        """A world drawn from ``seed``: drones with train-range ids (D-1 ... D-799) and zones with
        validation-split names (so a test task's names never collide with them), anywhere on Earth.
        ``area_deg``: the same drones, zones, states and clock, moved into one square of that many
        degrees around a centre drawn from the seed (each drone with its base and waypoints), as a
        map of one airspace shows them (the playground's agent mode)."""
        world = cls._drawn(seed, n_drones, n_zones)
        if area_deg is not None:
            world._gather(random.Random(f"clover-agent-area-{seed}"), area_deg)
        return world

    @classmethod
    def _drawn(cls, seed: int, n_drones: int, n_zones: int) -> World:
        rng = random.Random(f"clover-agent-world-{seed}")
        world = cls(clock=f"{rng.randint(6, 21):02d}:{rng.choice((0, 15, 30, 45)):02d}")
        while len(world.drones) < n_drones:
            did = f"D-{drone_number(rng, 'train')}"
            if did not in world.drones:
                world.drones[did] = _random_drone(rng, did)
        while len(world.zones) < n_zones:
            name = zone_name(rng, "validation")
            if name not in world.zones:
                world.zones[name] = _random_zone(rng, name)
        return world

    def _gather(self, rng: random.Random, area_deg: float) -> None:
        if not 0 < area_deg <= 20:
            raise ValueError(f"area_deg must be in (0, 20], got {area_deg}")
        clat, clon, half = rng.uniform(-60, 60), rng.uniform(-150, 150), area_deg / 2
        margin = min(0.06, half / 2)  # a drone's waypoints lie within 0.05 degrees of it

        def spot() -> tuple[float, float]:
            return (
                round(clat + rng.uniform(-half + margin, half - margin), 4),
                round(clon + rng.uniform(-half + margin, half - margin), 4),
            )

        for d in self.drones.values():
            lat, lon = spot()
            dlat, dlon = lat - d.lat, lon - d.lon
            d.lat, d.lon, d.base_lat, d.base_lon = lat, lon, round(d.base_lat + dlat, 4), round(d.base_lon + dlon, 4)
            for w in d.waypoints:
                w.lat, w.lon = round(w.lat + dlat, 4), round(w.lon + dlon, 4)
        for z in self.zones.values():
            z.lat, z.lon = spot()

    @classmethod
    def for_task(cls, calls: list[dict], seed: int = 0, results: list[dict | None] | None = None) -> World:
        """A seeded world (``seeded(seed)``) extended so that the task's gold ``calls`` (``{"name",
        "arguments"}``, in order) can all succeed: every drone they name exists, flies, has the
        battery for a mission and the waypoints they move; every zone they lift exists before it is
        lifted; no zone they create exists before it is created; no zone covers a waypoint they
        set. ``results``: the corpus's tool results for those calls, if any; a status result sets
        the drone's battery, position, altitude and state (when its state is airborne)."""
        world = cls.seeded(seed)
        rng = random.Random(f"clover-agent-task-{seed}-{json.dumps(calls, sort_keys=True)}")
        present = set(world.zones)
        for i, call in enumerate(calls):
            args = call.get("arguments") or {}
            did, zname = args.get("drone_id"), args.get("zone_name")
            if isinstance(did, str):
                did = drone_key(did)  # as written ("drone 17"): the world's D-17
                d = world.drones.get(did)
                if d is None:
                    d = world.drones[did] = _random_drone(rng, did, airborne=True)
                elif d.status not in AIRBORNE or d.battery_pct < 30:
                    d.status, d.battery_pct = rng.choice(AIRBORNE), max(d.battery_pct, rng.randint(30, 100))
                    d.altitude_m = d.altitude_m or rng.randint(3, 30) * 10
                res = results[i] if results and i < len(results) else None
                if call.get("name") == "get_drone_status" and isinstance(res, dict) and "error" not in res:
                    _apply_status(d, res)
                wp = args.get("waypoint_index")
                if isinstance(wp, int) and wp > len(d.waypoints):
                    d.waypoints += [_random_waypoint(rng, d.lat, d.lon) for _ in range(wp - len(d.waypoints))]
            if call.get("name") == "update_waypoint" and _is_num(args.get("lat")) and _is_num(args.get("lon")):
                for name in [z.name for z in world.zones.values() if z.contains(args["lat"], args["lon"])]:
                    world.zones.pop(name)
                    present.discard(name)
            if isinstance(zname, str) and call.get("name") == "lift_no_fly_zone":
                if zname not in present:
                    world.zones[zname] = _random_zone(rng, zname)
                present.discard(zname)
            elif isinstance(zname, str) and call.get("name") == "create_no_fly_zone":
                if zname in present:
                    world.zones.pop(zname, None)
                present.add(zname)
        return world

    # -- what changed ---------------------------------------------------------------------------
    def diff(self, after: World) -> list[str]:
        """What changed from this world to ``after``, one line per change."""
        out = []
        if after.clock != self.clock:
            out.append(f"clock {self.clock} -> {after.clock}")
        for name in sorted(set(self.zones) | set(after.zones)):
            a, b = self.zones.get(name), after.zones.get(name)
            if a is None:
                out.append(f"+ no-fly zone {b.describe()}")
            elif b is None:
                out.append(f"- no-fly zone {name!r} lifted")
            elif a != b:
                out.append(f"~ no-fly zone {a.describe()} -> {b.describe()}")
        for did in sorted(set(self.drones) | set(after.drones), key=_id_key):
            a, b = self.drones.get(did), after.drones.get(did)
            if a is None or b is None:
                out.append(f"{'+' if a is None else '-'} drone {did}")
                continue
            for f in ("status", "battery_pct", "lat", "lon", "altitude_m", "base_lat", "base_lon"):
                if getattr(a, f) != getattr(b, f):
                    out.append(f"{did} {f}: {getattr(a, f)} -> {getattr(b, f)}")
            if a.mission != b.mission:
                was = a.mission.describe() if a.mission else "none"
                out.append(f"{did} mission: {was} -> {b.mission.describe() if b.mission else 'none'}")
            for i in range(max(len(a.waypoints), len(b.waypoints))):
                wa = a.waypoints[i] if i < len(a.waypoints) else None
                wb = b.waypoints[i] if i < len(b.waypoints) else None
                if wa != wb:
                    out.append(
                        f"{did} waypoint {i + 1}: {wa.describe() if wa else 'none'} -> "
                        f"{wb.describe() if wb else 'none'}"
                    )
        return out


_NUM, _OPT_STR = (int, float), (str, type(None))
_ZONE_FIELDS = {"name": str, "lat": _NUM, "lon": _NUM, "radius_m": int, "start_time": _OPT_STR, "end_time": _OPT_STR}
_WAYPOINT_FIELDS = {"lat": _NUM, "lon": _NUM, "altitude_m": int}
_MISSION_FIELDS = {"id": str, "type": str, "target": str}
_DRONE_FIELDS = {
    "id": str,
    "lat": _NUM,
    "lon": _NUM,
    "altitude_m": int,
    "base_lat": _NUM,
    "base_lon": _NUM,
    "battery_pct": int,
    "status": str,
    "waypoints": list,
    "mission": (dict, type(None)),
}


def _record(v, where: str, fields: dict) -> dict:
    """``v`` checked to be an object of exactly ``fields`` (name -> type or types), numbers finite."""
    if not isinstance(v, dict):
        raise ValueError(f"{where} must be an object, got {type(v).__name__}")
    unknown = [k for k in v if k not in fields]
    if unknown:
        raise ValueError(f"{where} has an unknown field {unknown[0]!r}")
    for k, t in fields.items():
        if k not in v:
            raise ValueError(f"{where} lacks the field {k!r}")
        x = v[k]
        if not isinstance(x, t) or (isinstance(x, bool) and t is not bool):
            raise ValueError(f"{where}.{k} has the wrong type ({type(x).__name__})")
        if isinstance(x, float) and not math.isfinite(x):
            raise ValueError(f"{where}.{k} must be a finite number")
    return dict(v)


def _hhmm(t: str, where: str) -> None:
    if not _HHMM.match(t):
        raise ValueError(f"{where} must be a 24-hour HH:MM time, got {t!r}")


def _on_earth(lat: float, lon: float, where: str) -> None:
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        raise ValueError(f"{where}: position ({lat}, {lon}) is not on Earth")


def _id_key(did: str):
    return (0, int(did[2:]), did) if _DRONE_ID.match(did) else (1, 0, did)


def _is_num(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def distance_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in metres (haversine, mean Earth radius)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6_371_000 * math.asin(min(1.0, math.sqrt(h)))


def _coord(rng: random.Random, lim: float) -> float:
    return round(rng.uniform(-lim, lim), 4)


def _near(rng: random.Random, x: float, spread: float, lim: float) -> float:
    return round(max(-lim, min(lim, x + rng.uniform(-spread, spread))), 4)


def _random_waypoint(rng: random.Random, lat: float, lon: float) -> Waypoint:
    return Waypoint(_near(rng, lat, 0.05, 90), _near(rng, lon, 0.05, 180), rng.randint(3, 30) * 10)


def _random_drone(rng: random.Random, did: str, airborne: bool = False) -> Drone:
    lat, lon = _coord(rng, 80), _coord(rng, 179)
    status = rng.choice(AIRBORNE if airborne else STATES)
    grounded = status in ("on the ground", "charging")
    battery = rng.randint(30, 100) if airborne else rng.randint(5, 100)
    d = Drone(
        did,
        lat,
        lon,
        0 if grounded else rng.randint(3, 30) * 10,
        _near(rng, lat, 0.03, 90),
        _near(rng, lon, 0.03, 180),
        battery,
        status,
    )
    if grounded:
        d.lat, d.lon = d.base_lat, d.base_lon
    d.waypoints = [_random_waypoint(rng, lat, lon) for _ in range(rng.randint(3, 12))]
    if status == "en route" and rng.random() < 0.7:
        mt = rng.choice(MISSION_TYPES)
        d.mission = Mission(mission_id(did, mt, "patrol area"), mt, "patrol area")
    return d


def _random_zone(rng: random.Random, name: str) -> Zone:
    z = Zone(name, _coord(rng, 80), _coord(rng, 179), rng.choice((300, 500, 1000, 2000, 5000)))
    if rng.random() < 0.3:
        z.start_time, z.end_time = f"{rng.randint(0, 11):02d}:00", f"{rng.randint(12, 23):02d}:00"
    return z


def _apply_status(d: Drone, res: dict) -> None:
    if res.get("state") in AIRBORNE:
        d.status = res["state"]
        for key, attr in (("battery_pct", "battery_pct"), ("lat", "lat"), ("lon", "lon"), ("altitude_m", "altitude_m")):
            if _is_num(res.get(key)):
                setattr(d, attr, res[key])


def mission_id(drone_id: str, mission_type: str, target: str) -> str:
    """A mission's id, from what it is (so two orders of the same assignments give one world)."""
    return f"M-{1000 + zlib.crc32(f'{drone_id}|{mission_type}|{target}'.encode()) % 9000}"


# -- checking a call against its schema -----------------------------------------------------------
_TYPES = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def check_arguments(parameters: dict, arguments) -> tuple[dict | None, str | None]:
    """``arguments`` checked against a tool's ``parameters`` schema (the subset the airspace tools
    use: an object of typed properties, ``required``, ``enum``); unknown arguments are refused.
    Returns (the arguments, integral numbers given as ``5.0`` made ints; None) or (None, error)."""
    if not isinstance(arguments, dict):
        return None, f"arguments must be a JSON object, got {type(arguments).__name__}"
    props = parameters.get("properties") or {}
    missing = [k for k in parameters.get("required") or [] if k not in arguments]
    if missing:
        return None, "missing required argument" + ("s " if len(missing) > 1 else " ") + ", ".join(map(repr, missing))
    out = {}
    for k, v in arguments.items():
        spec = props.get(k)
        if spec is None:
            return None, f"unknown argument {k!r}; this tool takes {', '.join(map(repr, props))}"
        t = spec.get("type")
        ok = t is None or (isinstance(v, _TYPES.get(t, object)) and not (isinstance(v, bool) and t != "boolean"))
        if t == "integer" and isinstance(v, float) and v.is_integer():
            v, ok = int(v), True
        if t == "number" and isinstance(v, float) and not math.isfinite(v):
            ok = False
        if not ok:
            return None, f"{k} must be {'an' if t[0] in 'aeiou' else 'a'} {t}, got {json.dumps(v)}"
        if "enum" in spec and v not in spec["enum"]:
            return None, f"{k} must be one of {', '.join(spec['enum'])}, got {json.dumps(v)}"
        out[k] = v
    return out, None


# -- the six tools --------------------------------------------------------------------------------
class ToolError(Exception):
    """A call the world refuses; its message is the ``error`` the model reads."""


def execute(world: World, name: str, arguments) -> dict:
    """Run one tool call on ``world`` (changed in place on success). ``arguments``: a dict or the
    OpenAI form's JSON text. Returns the tool's result, or ``{"error": ...}`` with the world unchanged."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return {"error": f"arguments are not valid JSON ({e.msg})"}
    try:
        spec = tool_by_name(name)
    except KeyError:
        return {"error": f"unknown tool {name!r}"}
    arguments, problem = as_written(name, arguments)  # "drone 17", "2.5 km", "6pm": read into the world's forms
    if problem:
        return {"error": problem}
    if uses_units(name, arguments):  # a length as given (the extraction tools): converted here, in code
        schema = extraction_tool(name)["function"]["parameters"]
        args, problem = check_arguments(schema, with_unit_names(name, arguments))
        args, problem = in_metres(name, args) if args is not None else (None, problem)
    else:
        args, problem = check_arguments(spec["function"]["parameters"], arguments)
    if problem:
        return {"error": problem}
    try:
        return _TOOLS[name](world, **args)
    except ToolError as e:
        return {"error": str(e)}


def _drone(world: World, did: str) -> Drone:
    d = world.drones.get(did)
    if d is None:
        hint = "" if _DRONE_ID.match(did) else " (drone ids are D-<number>)"
        raise ToolError(f"unknown drone {did}{hint}")
    return d


def _check_position(lat: float, lon: float) -> None:
    if not -90 <= lat <= 90:
        raise ToolError(f"lat must be between -90 and 90, got {lat}")
    if not -180 <= lon <= 180:
        raise ToolError(f"lon must be between -180 and 180, got {lon}")


def create_no_fly_zone(
    world: World,
    zone_name: str,
    lat: float,
    lon: float,
    radius_m: int,
    start_time: str | None = None,
    end_time: str | None = None,
) -> dict:
    if not zone_name.strip():
        raise ToolError("zone_name must not be empty")
    _check_position(lat, lon)
    if radius_m <= 0:
        raise ToolError(f"radius_m must be a positive number of metres, got {radius_m}")
    for k, t in (("start_time", start_time), ("end_time", end_time)):
        if t is not None and not _HHMM.match(t):
            raise ToolError(f"{k} must be a 24-hour HH:MM time, got {t!r}")
    if zone_name in world.zones:
        raise ToolError("zone already exists")
    world.zones[zone_name] = Zone(zone_name, lat, lon, radius_m, start_time, end_time)
    return {"zone_name": zone_name, "status": "active"}


def lift_no_fly_zone(world: World, zone_name: str) -> dict:
    if zone_name not in world.zones:
        raise ToolError("no such zone")
    del world.zones[zone_name]
    return {"zone_name": zone_name, "status": "lifted"}


def update_waypoint(
    world: World, drone_id: str, waypoint_index: int, lat: float, lon: float, altitude_m: int | None = None
) -> dict:
    d = _drone(world, drone_id)
    n = len(d.waypoints)
    if not 1 <= waypoint_index <= n:
        have = f"waypoints 1-{n}" if n else "no waypoints"
        raise ToolError(f"waypoint {waypoint_index} out of range: {drone_id} has {have}")
    _check_position(lat, lon)
    if altitude_m is not None and altitude_m < 0:
        raise ToolError(f"altitude_m must not be negative, got {altitude_m}")
    for z in world.zones.values():
        if z.active_at(world.clock) and z.contains(lat, lon):
            raise ToolError(f"waypoint inside the active no-fly zone {z.name}")
    old = d.waypoints[waypoint_index - 1]
    d.waypoints[waypoint_index - 1] = Waypoint(lat, lon, old.altitude_m if altitude_m is None else altitude_m)
    return {"drone_id": drone_id, "waypoint_index": waypoint_index, "status": "updated"}


def assign_mission(world: World, drone_id: str, mission_type: str, target: str) -> dict:
    d = _drone(world, drone_id)
    if not target.strip():
        raise ToolError("target must not be empty")
    if d.battery_pct < MIN_MISSION_BATTERY:
        raise ToolError(f"battery too low for a mission: {drone_id} has {d.battery_pct}%")
    d.mission = Mission(mission_id(drone_id, mission_type, target), mission_type, target)
    d.status = "en route"
    d.altitude_m = d.altitude_m or 50
    return {"drone_id": drone_id, "mission_id": d.mission.id, "status": "assigned"}


def recall_drone(world: World, drone_id: str) -> dict:
    d = _drone(world, drone_id)
    if d.status in ("on the ground", "charging"):
        return {"drone_id": drone_id, "status": "at base", "eta_min": 0}
    d.status, d.mission = "returning to base", None
    eta = max(1, math.ceil(distance_m(d.lat, d.lon, d.base_lat, d.base_lon) / SPEED_M_S / 60))
    return {"drone_id": drone_id, "status": "returning", "eta_min": eta}


def get_drone_status(world: World, drone_id: str) -> dict:
    d = _drone(world, drone_id)
    out = {
        "drone_id": drone_id,
        "battery_pct": d.battery_pct,
        "lat": d.lat,
        "lon": d.lon,
        "altitude_m": d.altitude_m,
        "state": d.status,
    }
    if d.mission:
        out["mission"] = f"{d.mission.type} of {d.mission.target} ({d.mission.id})"
    return out


_TOOLS = {
    f.__name__: f
    for f in (create_no_fly_zone, lift_no_fly_zone, update_waypoint, assign_mission, recall_drone, get_drone_status)
}
READ_ONLY = frozenset({"get_drone_status"})
