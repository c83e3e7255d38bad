"""The airspace tool set of the default model, as an OpenAI-format ``tools`` list."""

from __future__ import annotations

_ID = {"type": "string", "description": "Drone id normalised to D-<number>, e.g. D-17."}
_LAT = {"type": "number", "description": "Latitude in decimal degrees (N positive, S negative)."}
_LON = {"type": "number", "description": "Longitude in decimal degrees (E positive, W negative)."}
_TIME = {"type": "string", "description": "24-hour time HH:MM."}
MISSION_TYPES = ["survey", "mapping", "delivery", "medical_delivery", "inspection", "search_and_rescue"]


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
        "Create a circular no-fly zone. Radius in whole metres; times HH:MM.",
        {
            "zone_name": {"type": "string", "description": "Zone name as the operator wrote it."},
            "lat": _LAT,
            "lon": _LON,
            "radius_m": {"type": "integer", "description": "Radius in whole metres."},
            "start_time": _TIME,
            "end_time": _TIME,
        },
        ["zone_name", "lat", "lon", "radius_m"],
    ),
    _fn(
        "lift_no_fly_zone",
        "Lift (remove) an existing no-fly zone.",
        {"zone_name": {"type": "string", "description": "Zone name as the operator wrote it."}},
        ["zone_name"],
    ),
    _fn(
        "update_waypoint",
        "Move one waypoint of a drone's route.",
        {
            "drone_id": _ID,
            "waypoint_index": {"type": "integer", "description": "Waypoint number."},
            "lat": _LAT,
            "lon": _LON,
            "altitude_m": {"type": "integer", "description": "Altitude in whole metres."},
        },
        ["drone_id", "waypoint_index", "lat", "lon"],
    ),
    _fn(
        "assign_mission",
        "Assign a mission to a drone.",
        {
            "drone_id": _ID,
            "mission_type": {"type": "string", "enum": MISSION_TYPES},
            "target": {"type": "string", "description": "Mission target as the operator wrote it."},
        },
        ["drone_id", "mission_type", "target"],
    ),
    _fn("recall_drone", "Recall a drone to its base.", {"drone_id": _ID}, ["drone_id"]),
    _fn("get_drone_status", "Get a drone's status (battery, position, mission).", {"drone_id": _ID}, ["drone_id"]),
]

TOOL_NAMES = [t["function"]["name"] for t in AIRSPACE_TOOLS]
