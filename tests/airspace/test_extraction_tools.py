"""The extraction tools (task airspace2): lengths as the operator gave them, converted to metres
by the world in code; the world takes the metres form too."""

from __future__ import annotations

import json

import pytest

from clover.airspace.extraction_tools import EXTRACTION_TOOLS, UNITS, extraction_tool, length_m, unit_of
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.airspace.world import World, execute


@pytest.mark.parametrize(
    "value, unit, metres",
    [
        (500, "m", 500),
        (1.5, "km", 1500),
        (2000, "ft", 610),
        (1.5, "nm", 2778),
        (1, "nm", 1852),
        (0.5, "ft", 0),
        (3, "ft", 1),
        ("2,500", "ft", 762),
        (0.25, "km", 250),
        (1000, "feet", 305),
        (2, "NM", 3704),
        (2, "nmi", 3704),
        (10, "nautical miles", 18520),
        (300, "Meters", 300),
        (3.5, "kilometres", 3500),
    ],
)
def test_length_m_converts_by_the_international_definitions_rounded_half_up(value, unit, metres):
    assert length_m(value, unit) == metres


def test_half_a_metre_rounds_up_and_unknown_units_are_refused():
    assert length_m(2.5, "m") == 3 and length_m("0.5", "m") == 1
    assert unit_of("yards") is None
    with pytest.raises(ValueError, match="unknown unit 'yd'"):
        length_m(3, "yd")


def test_the_extraction_tools_take_a_number_and_a_unit_instead_of_metres():
    names = [t["function"]["name"] for t in EXTRACTION_TOOLS]
    assert names == [t["function"]["name"] for t in AIRSPACE_TOOLS]
    create = extraction_tool("create_no_fly_zone")["function"]["parameters"]
    assert "radius_m" not in create["properties"] and create["properties"]["radius_unit"]["enum"] == list(UNITS)
    assert create["required"] == ["zone_name", "lat", "lon", "radius", "radius_unit"]
    wp = extraction_tool("update_waypoint")["function"]["parameters"]
    assert {"altitude", "altitude_unit"} <= set(wp["properties"]) and "altitude" not in wp["required"]
    # the first version's tools are untouched (the bundled model's)
    assert "radius_m" in AIRSPACE_TOOLS[0]["function"]["parameters"]["properties"]


def _world() -> World:
    w = World.for_task(
        [{"name": "update_waypoint", "arguments": {"drone_id": "D-5", "waypoint_index": 2, "lat": 1.0, "lon": 1.0}}],
        seed=3,
    )
    w.zones.clear()
    return w


@pytest.mark.parametrize(
    "args, metres",
    [
        ({"radius": 2000, "radius_unit": "ft"}, 610),
        ({"radius": 1.5, "radius_unit": "nm"}, 2778),
        ({"radius": 1.2, "radius_unit": "km"}, 1200),
        ({"radius": 500, "radius_unit": "m"}, 500),
        ({"radius": 3, "radius_unit": "NM"}, 5556),
        ({"radius_m": 777}, 777),
    ],
)
def test_the_world_creates_a_zone_from_either_argument_form(args, metres):
    w = _world()
    res = execute(w, "create_no_fly_zone", json.dumps({"zone_name": "Pier 39", "lat": 10.5, "lon": 20.25, **args}))
    assert res == {"zone_name": "Pier 39", "status": "active"}
    assert w.zones["Pier 39"].radius_m == metres


@pytest.mark.parametrize(
    "args, metres",
    [
        ({"altitude": 400, "altitude_unit": "ft"}, 122),
        ({"altitude": 120, "altitude_unit": "m"}, 120),
        ({"altitude_m": 90}, 90),
        ({}, None),
    ],
)
def test_the_world_moves_a_waypoint_with_either_altitude_form(args, metres):
    w = _world()
    before = w.drones["D-5"].waypoints[1].altitude_m
    res = execute(w, "update_waypoint", {"drone_id": "D-5", "waypoint_index": 2, "lat": 3.5, "lon": 4.5, **args})
    assert res["status"] == "updated", res
    assert w.drones["D-5"].waypoints[1].altitude_m == (before if metres is None else metres)


@pytest.mark.parametrize(
    "args, error",
    [
        ({"radius": 2}, "missing required argument 'radius_unit'"),
        ({"radius": 2, "radius_unit": "yd"}, "radius_unit must be one of m, km, ft, nm"),
        ({"radius": "2", "radius_unit": "km"}, "radius must be a number"),
        ({"radius": 0, "radius_unit": "km"}, "radius must be positive"),
        ({"radius": -1, "radius_unit": "km"}, "radius must be positive"),
        ({"radius": 0.1, "radius_unit": "ft"}, "under half a metre"),
        ({"radius": 2, "radius_unit": "km", "radius_m": 2000}, "unknown argument 'radius_m'"),
    ],
)
def test_a_bad_length_is_an_error_and_the_world_is_unchanged(args, error):
    w = _world()
    before = w.to_dict()
    res = execute(w, "create_no_fly_zone", {"zone_name": "Z", "lat": 1.5, "lon": 2.5, **args})
    assert error in res["error"]
    assert w.to_dict() == before


def test_an_altitude_without_its_unit_is_refused():
    res = execute(
        _world(), "update_waypoint", {"drone_id": "D-5", "waypoint_index": 2, "lat": 3.5, "lon": 4.5, "altitude": 300}
    )
    assert "altitude and altitude_unit go together" in res["error"]


def test_the_task_seam_knows_the_task_by_its_former_name_too_and_a_model_names_its_own():
    from clover.data.task import all_recipes, canonical, get_task, model_task, task_names

    assert get_task("airspace2") is get_task("airspace") and get_task("airspace").tools() == EXTRACTION_TOOLS
    assert task_names() == ["airspace"] and {"airspace", "airspace-ar"} <= set(all_recipes())
    assert canonical("airspace2") == "airspace" and canonical("airspace2-x") == "airspace-x"
    cfg = type("C", (), {"extra": {"recipe": "airspace2", "task": "airspace2"}})()  # as the bundled model records
    assert model_task(cfg).name == "airspace"
    old = type("C", (), {"extra": {"recipe": "airspace"}})()
    assert model_task(old).name == "airspace" and model_task(None, default=True).name == "airspace"  # the bundled
