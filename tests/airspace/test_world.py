"""The airspace world: every tool call is checked against its schema and the world; a refused
call is an error result the model reads, and the world stays as it was."""

from __future__ import annotations

import json
import re

import pytest

from clover.airspace.world import MIN_MISSION_BATTERY, World, Zone, execute


@pytest.fixture()
def world() -> World:
    w = World.seeded(7)
    d = w.drones["D-5"] = World.for_task([{"name": "recall_drone", "arguments": {"drone_id": "D-5"}}], 7).drones["D-5"]
    d.waypoints = d.waypoints[:4]
    d.battery_pct, d.status = 80, "hovering"
    w.zones["Harbor East"] = Zone("Harbor East", 10.0, 20.0, 1000)
    return w


BAD_CALLS = [
    ("recall_drone", {"drone_id": "D-123456"}, "unknown drone D-123456"),
    ("get_drone_status", {"drone_id": "the drone"}, "unknown drone the drone"),  # "d5" is D-5: ids as written
    ("assign_mission", {"drone_id": "D-404", "mission_type": "survey", "target": "x"}, "unknown drone"),
    ("lift_no_fly_zone", {"zone_name": "Nowhere"}, "no such zone"),
    ("lift_no_fly_zone", {"zone_name": "harbor east"}, "no such zone"),  # names match exactly
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 5, "lat": 1.5, "lon": 2.5}, "out of range"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 0, "lat": 1.5, "lon": 2.5}, "out of range"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": -1, "lat": 1.5, "lon": 2.5}, "out of range"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": "2", "lat": 1.5, "lon": 2.5}, "must be an integer"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 2.5, "lat": 1.5, "lon": 2.5}, "must be an integer"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 2, "lat": "north", "lon": 2.5}, "must be a number"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 2, "lat": True, "lon": 2.5}, "must be a number"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 2, "lat": 95.0, "lon": 2.5}, "between -90 and 90"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 2, "lat": 1.5, "lon": 2.5, "altitude_m": -3}, "negative"),
    ("update_waypoint", {"drone_id": "D-5", "waypoint_index": 2, "lat": 1.5}, "missing required argument 'lon'"),
    ("recall_drone", {"drone_id": 5}, "must be a string"),
    ("recall_drone", {}, "missing required argument 'drone_id'"),
    ("recall_drone", {"drone_id": "D-5", "force": True}, "unknown argument 'force'"),
    ("recall_drone", ["D-5"], "must be a JSON object"),
    ("recall_drone", '{"drone_id": "D-5"', "not valid JSON"),
    ("assign_mission", {"drone_id": "D-5", "mission_type": "patrol", "target": "x"}, "must be one of"),
    ("assign_mission", {"drone_id": "D-5", "mission_type": "survey"}, "missing required argument 'target'"),
    ("assign_mission", {"drone_id": "D-5", "mission_type": "survey", "target": " "}, "must not be empty"),
    ("create_no_fly_zone", {"zone_name": "A", "lat": 1.0, "lon": 2.0}, "missing required argument 'radius_m'"),
    ("create_no_fly_zone", {"zone_name": "A", "lat": 1.0, "lon": 2.0, "radius_m": "500"}, "must be an integer"),
    ("create_no_fly_zone", {"zone_name": "A", "lat": 1.0, "lon": 2.0, "radius_m": 0}, "positive"),
    ("create_no_fly_zone", {"zone_name": "A", "lat": 1.0, "lon": 200.0, "radius_m": 5}, "between -180 and 180"),
    ("create_no_fly_zone", {"zone_name": "A", "lat": 1.0, "lon": 2.0, "radius_m": 5, "start_time": "25:00"}, "HH:MM"),
    ("create_no_fly_zone", {"zone_name": "Harbor East", "lat": 1.0, "lon": 2.0, "radius_m": 5}, "already exists"),
    ("launch_missiles", {"drone_id": "D-5"}, "unknown tool"),
]


@pytest.mark.parametrize(("name", "args", "message"), BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)])
def test_a_bad_call_is_an_error_and_leaves_the_world_unchanged(world, name, args, message):
    before = world.copy()
    result = execute(world, name, args)
    assert set(result) == {"error"} and message in result["error"], result
    assert world == before and world.to_dict() == before.to_dict()


def test_errors_read_like_the_corpus_results(world):
    """The bundled model was trained on these error texts in tool results."""
    assert execute(world, "recall_drone", {"drone_id": "D-999"}) == {"error": "unknown drone D-999"}
    assert execute(world, "lift_no_fly_zone", {"zone_name": "X"}) == {"error": "no such zone"}


def test_good_calls_change_the_world(world):
    d = world.drones["D-5"]
    old_alt = d.waypoints[1].altitude_m
    r = execute(
        world, "update_waypoint", json.dumps({"drone_id": "D-5", "waypoint_index": 2, "lat": -1.25, "lon": 3.5})
    )
    assert r == {"drone_id": "D-5", "waypoint_index": 2, "status": "updated"}
    assert (d.waypoints[1].lat, d.waypoints[1].lon, d.waypoints[1].altitude_m) == (-1.25, 3.5, old_alt)
    execute(
        world, "update_waypoint", {"drone_id": "D-5", "waypoint_index": 4.0, "lat": 1.0, "lon": 1.0, "altitude_m": 120}
    )  # 4.0 is an integer in JSON Schema
    assert d.waypoints[3].altitude_m == 120
    r = execute(world, "assign_mission", {"drone_id": "D-5", "mission_type": "survey", "target": "Lake 4"})
    assert r["status"] == "assigned" and r["mission_id"] == d.mission.id and d.mission.target == "Lake 4"
    assert d.status == "en route"
    r = execute(world, "recall_drone", {"drone_id": "D-5"})
    assert r["status"] == "returning" and r["eta_min"] >= 1 and d.status == "returning to base" and d.mission is None
    r = execute(
        world,
        "create_no_fly_zone",
        {
            "zone_name": "Zone Kilo",
            "lat": 1.5,
            "lon": -2.25,
            "radius_m": 800,
            "start_time": "08:00",
            "end_time": "18:00",
        },
    )
    assert r == {"zone_name": "Zone Kilo", "status": "active"}
    assert world.zones["Zone Kilo"] == Zone("Zone Kilo", 1.5, -2.25, 800, "08:00", "18:00")
    assert execute(world, "lift_no_fly_zone", {"zone_name": "Harbor East"}) == {
        "zone_name": "Harbor East",
        "status": "lifted",
    }
    assert "Harbor East" not in world.zones


def test_a_status_query_reads_and_changes_nothing(world):
    before = world.copy()
    r = execute(world, "get_drone_status", {"drone_id": "D-5"})
    d = world.drones["D-5"]
    assert r == {
        "drone_id": "D-5",
        "battery_pct": 80,
        "lat": d.lat,
        "lon": d.lon,
        "altitude_m": d.altitude_m,
        "state": "hovering",
    }
    assert world == before


def test_rules_no_waypoint_in_an_active_zone_and_no_mission_on_a_low_battery(world):
    world.clock = "12:00"
    world.zones["Pier Nine"] = Zone("Pier Nine", 40.0, 5.0, 2000, "09:00", "17:00")
    call = {"drone_id": "D-5", "waypoint_index": 1, "lat": 40.001, "lon": 5.001}
    before = world.copy()
    assert "inside the active no-fly zone Pier Nine" in execute(world, "update_waypoint", call)["error"]
    assert world == before
    world.clock = "18:30"  # the zone's window is over: the waypoint may go there
    assert execute(world, "update_waypoint", call)["status"] == "updated"
    world.drones["D-5"].battery_pct = MIN_MISSION_BATTERY - 1
    before = world.copy()
    r = execute(world, "assign_mission", {"drone_id": "D-5", "mission_type": "mapping", "target": "Dam 2"})
    assert "battery too low" in r["error"] and world == before


def test_zone_windows():
    z = Zone("z", 0, 0, 10, "22:00", "06:00")  # past midnight
    assert z.active_at("23:00") and z.active_at("05:59") and not z.active_at("06:00") and not z.active_at("12:00")
    assert Zone("z", 0, 0, 10, None, "10:00").active_at("09:00") and not Zone("z", 0, 0, 10, None, "10:00").active_at(
        "10:00"
    )
    assert Zone("z", 0, 0, 10, "10:00").active_at("10:00") and not Zone("z", 0, 0, 10, "10:00").active_at("09:59")


def test_seeded_worlds_are_reproducible_and_round_trip():
    a, b = World.seeded(3), World.seeded(3)
    assert a == b and a != World.seeded(4)
    assert len(a.drones) == 6 and len(a.zones) == 3
    assert all(k.startswith("D-") and 1 <= int(k[2:]) <= 799 for k in a.drones)
    assert World.from_dict(json.loads(json.dumps(a.to_dict()))) == a


def test_a_world_in_one_area_keeps_the_seeded_world_and_round_trips():
    """``area_deg``: the playground's world, the seeded one moved into one square (its map)."""
    a, b = World.seeded(3), World.seeded(3, area_deg=0.4)
    assert b == World.seeded(3, area_deg=0.4) and b != a
    assert a.clock == b.clock and list(a.drones) == list(b.drones) and list(a.zones) == list(b.zones)
    for did, d in b.drones.items():
        old = a.drones[did]
        assert (d.status, d.battery_pct, d.mission, len(d.waypoints)) == (
            old.status,
            old.battery_pct,
            old.mission,
            len(old.waypoints),
        )
        assert abs((d.base_lat - d.lat) - (old.base_lat - old.lat)) < 1e-3  # the base moved with the drone
    lats = [p for d in b.drones.values() for p in [d.lat, d.base_lat, *(w.lat for w in d.waypoints)]]
    lats += [z.lat for z in b.zones.values()]
    assert max(lats) - min(lats) <= 0.4 + 0.2
    assert World.from_dict(json.loads(json.dumps(b.to_dict()))) == b
    assert World.from_dict(b.to_dict()).to_dict() == b.to_dict()


BAD_STATES = [
    (lambda d: d.pop("clock"), "lacks the field 'clock'"),
    (lambda d: d.update(clock="25:61"), "HH:MM"),
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d.update(drones=[]), "wrong type"),
    (lambda d: d["drones"]["D-18"].update(lat="north"), "world.drones['D-18'].lat has the wrong type"),
    (lambda d: d["drones"]["D-18"].update(battery_pct=True), "wrong type"),
    (lambda d: d["drones"]["D-18"].update(lat=float("nan")), "finite"),
    (lambda d: d["drones"]["D-18"].update(lon=190.0), "not on Earth"),
    (lambda d: d["drones"]["D-18"].update(id="D-19"), "must be its key"),
    (lambda d: d["drones"]["D-18"]["waypoints"].append({"lat": 1.0}), "waypoints[3] lacks the field 'lon'"),
    (lambda d: d["drones"]["D-18"].update(mission={"id": "M-1"}), "mission lacks the field 'type'"),
    (lambda d: d["zones"]["Lower Arena"].update(radius_m=2.5), "wrong type"),
    (lambda d: d["zones"]["Lower Arena"].update(end_time="noon"), "HH:MM"),
    (lambda d: d["zones"]["Lower Arena"].update(name="Upper Arena"), "must be its key"),
    (lambda d: d.update(zones={"Z": 5}), "world.zones['Z'] must be an object"),
]


@pytest.mark.parametrize(("spoil", "message"), BAD_STATES, ids=[m for _, m in BAD_STATES])
def test_from_dict_refuses_a_bad_state_with_its_place(spoil, message):
    d = json.loads(json.dumps(World.seeded(0).to_dict()))
    spoil(d)
    with pytest.raises(ValueError, match=re.escape(message)):
        World.from_dict(d)


def test_diff_says_what_changed(world):
    after = world.copy()
    execute(after, "recall_drone", {"drone_id": "D-5"})
    execute(after, "lift_no_fly_zone", {"zone_name": "Harbor East"})
    lines = world.diff(after)
    assert "- no-fly zone 'Harbor East' lifted" in lines
    assert "D-5 status: hovering -> returning to base" in lines
    assert world.diff(world.copy()) == []


def test_a_task_world_holds_what_its_gold_calls_name():
    calls = [
        {"name": "lift_no_fly_zone", "arguments": {"zone_name": "Zone Xray"}},
        {"name": "create_no_fly_zone", "arguments": {"zone_name": "Zone Xray", "lat": 1.0, "lon": 1.0, "radius_m": 9}},
        {"name": "update_waypoint", "arguments": {"drone_id": "D-950", "waypoint_index": 33, "lat": 2.0, "lon": 2.0}},
        {"name": "assign_mission", "arguments": {"drone_id": "D-951", "mission_type": "survey", "target": "t"}},
    ]
    w = World.for_task(calls, seed=1)
    assert "Zone Xray" in w.zones and len(w.drones["D-950"].waypoints) >= 33 and "D-951" in w.drones
    assert World.for_task(calls, seed=1) == w
    after = w.copy()
    assert all("error" not in execute(after, c["name"], c["arguments"]) for c in calls)
