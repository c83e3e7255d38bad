"""The airspace tool set of the default model, as an OpenAI-format ``tools`` list.

Conventions the model is trained to follow (and the corpus's gold answers obey):

* drone ids are normalised to ``D-<number>`` ("uav 17", "d17", "unit 17" → ``D-17``);
* radii and altitudes are whole metres (km, nm = 1852 m, ft = 0.3048 m converted, rounded half up);
* times are 24-hour ``HH:MM`` ("6pm" → ``18:00``, "quarter to 5 pm" → ``16:45``);
* coordinates are signed decimal degrees, N/E positive, S/W negative, with the digits as written;
* zone names and mission targets are copied exactly as the operator wrote them.
"""

from __future__ import annotations

MISSION_TYPES = ["survey", "mapping", "delivery", "medical_delivery", "inspection", "search_and_rescue"]

_DRONE = {"type": "string", "description": "Drone id normalised to D-<number>, e.g. 'drone 17' -> 'D-17'."}
_LAT = {"type": "number", "description": "Latitude in decimal degrees, N positive, S negative."}
_LON = {"type": "number", "description": "Longitude in decimal degrees, E positive, W negative."}
_NAME = {"type": "string", "description": "Zone name exactly as the operator wrote it."}


def _time(what: str) -> dict:
    return {"type": "string", "description": f"{what} time, 24-hour HH:MM, e.g. '6pm' -> '18:00'."}


def _fn(name: str, description: str, props: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


AIRSPACE_TOOLS: list[dict] = [
    _fn(
        "create_no_fly_zone",
        "Create a circular no-fly zone around a point. Radius in whole metres (1 nm = 1852 m, 1 ft = 0.3048 m); "
        "optional activation window as 24-hour HH:MM times.",
        {
            "zone_name": _NAME,
            "lat": _LAT,
            "lon": _LON,
            "radius_m": {"type": "integer", "description": "Radius in whole metres, rounded to the nearest metre."},
            "start_time": _time("Activation start"),
            "end_time": _time("Activation end"),
        },
        ["zone_name", "lat", "lon", "radius_m"],
    ),
    _fn("lift_no_fly_zone", "Lift (remove) an existing no-fly zone by name.", {"zone_name": _NAME}, ["zone_name"]),
    _fn(
        "update_waypoint",
        "Move one waypoint of a drone's route to new coordinates (decimal degrees).",
        {
            "drone_id": _DRONE,
            "waypoint_index": {"type": "integer", "description": "Waypoint number as given."},
            "lat": _LAT,
            "lon": _LON,
            "altitude_m": {"type": "integer", "description": "New altitude in whole metres."},
        },
        ["drone_id", "waypoint_index", "lat", "lon"],
    ),
    _fn(
        "assign_mission",
        "Assign a mission to a drone (drone ids D-<number>).",
        {
            "drone_id": _DRONE,
            "mission_type": {"type": "string", "enum": list(MISSION_TYPES)},
            "target": {"type": "string", "description": "Mission target exactly as the operator wrote it."},
        },
        ["drone_id", "mission_type", "target"],
    ),
    _fn("recall_drone", "Recall a drone to its base (drone ids D-<number>).", {"drone_id": _DRONE}, ["drone_id"]),
    _fn(
        "get_drone_status",
        "Get a drone's status: battery, position, altitude, state, mission.",
        {"drone_id": _DRONE},
        ["drone_id"],
    ),
]

TOOL_NAMES: list[str] = [t["function"]["name"] for t in AIRSPACE_TOOLS]


def tool_by_name(name: str) -> dict:
    """The tool spec called ``name`` (KeyError if it is not an airspace tool)."""
    for t in AIRSPACE_TOOLS:
        if t["function"]["name"] == name:
            return t
    raise KeyError(name)
