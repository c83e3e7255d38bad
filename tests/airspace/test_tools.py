"""The airspace tool set is exactly what the corpus and the model are built around."""

import json

from clover.airspace.tools import AIRSPACE_TOOLS, MISSION_TYPES, TOOL_NAMES, tool_by_name


def test_names_required_and_optional_arguments():
    assert TOOL_NAMES == [
        "create_no_fly_zone",
        "lift_no_fly_zone",
        "update_waypoint",
        "assign_mission",
        "recall_drone",
        "get_drone_status",
    ]
    params = {t["function"]["name"]: t["function"]["parameters"] for t in AIRSPACE_TOOLS}
    expect = {
        "create_no_fly_zone": (["zone_name", "lat", "lon", "radius_m"], ["start_time", "end_time"]),
        "lift_no_fly_zone": (["zone_name"], []),
        "update_waypoint": (["drone_id", "waypoint_index", "lat", "lon"], ["altitude_m"]),
        "assign_mission": (["drone_id", "mission_type", "target"], []),
        "recall_drone": (["drone_id"], []),
        "get_drone_status": (["drone_id"], []),
    }
    for name, (req, opt) in expect.items():
        assert params[name]["required"] == req
        assert set(params[name]["properties"]) == set(req) | set(opt)
    types = params["create_no_fly_zone"]["properties"]
    assert (types["lat"]["type"], types["radius_m"]["type"], types["start_time"]["type"]) == (
        "number",
        "integer",
        "string",
    )
    assert (
        params["assign_mission"]["properties"]["mission_type"]["enum"]
        == MISSION_TYPES
        == ["survey", "mapping", "delivery", "medical_delivery", "inspection", "search_and_rescue"]
    )


def test_descriptions_state_the_conventions():
    text = json.dumps(AIRSPACE_TOOLS)
    for convention in ("D-<number>", "whole metres", "HH:MM", "decimal degrees", "S negative", "W negative"):
        assert convention in text, convention
    assert all(t["type"] == "function" and t["function"]["description"] for t in AIRSPACE_TOOLS)
    assert tool_by_name("recall_drone")["function"]["name"] == "recall_drone"
