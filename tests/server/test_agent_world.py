"""``/v1/agent/world`` and ``/v1/agent/execute``: the playground's agent mode runs tool calls on the
server against a world the page keeps (stateless), with the world's own rules, bounded requests,
OpenAI-shaped errors and the API key of the other ``/v1`` routes."""

from __future__ import annotations

import copy
import json

import httpx
import pytest

from clover.airspace.world import MAX_ITEMS as MAX_DRONES
from clover.airspace.world import World, execute
from clover.server.agent import MAX_BODY_BYTES, MAX_CALLS
from tests.server.conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def url(server):
    return server.url


def _post(url: str, path: str, body, headers=AUTH, **kw) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=headers, timeout=30, **kw)


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def _world(url: str, seed: int = 0) -> dict:
    r = _post(url, "/v1/agent/world", {"seed": seed})
    assert r.status_code == 200, r.text
    return r.json()["world"]


def test_a_seeded_world(url):
    r = _post(url, "/v1/agent/world", {"seed": 0})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "clover.agent.world" and body["seed"] == 0
    assert body["world"] == World.seeded(0, area_deg=0.4).to_dict()
    assert set(body["world"]["drones"]) == set(World.seeded(0).drones) and len(body["world"]["zones"]) == 3
    assert body["active_zones"] == ["Lower Arena"]  # the clock is 16:45; the other two end at 12:00 and 14:00
    assert _post(url, "/v1/agent/world", {"seed": 0}).json() == body  # reproducible
    assert _post(url, "/v1/agent/world", {"seed": 1}).json()["world"] != body["world"]
    # area_deg null: the world of `clover agent --world 0`, anywhere on Earth
    assert _post(url, "/v1/agent/world", {"seed": 0, "area_deg": None}).json()["world"] == World.seeded(0).to_dict()
    assert _post(url, "/v1/agent/world", {}).json()["world"] == body["world"]  # seed 0 by default
    for bad in ({"seed": -1}, {"seed": "zero"}, {"seed": 2**40}, {"seed": 0, "area_deg": 0}):
        err = _error(_post(url, "/v1/agent/world", bad), 400)
        assert err["type"] == "invalid_request_error" and err["param"] in ("seed", "area_deg")


def test_execute_runs_good_calls_and_returns_the_new_world(url):
    state = _world(url)
    calls = [
        {"name": "recall_drone", "arguments": {"drone_id": "D-18"}},
        {
            "id": "call_7",
            "type": "function",  # OpenAI's tool_calls form, arguments as JSON text
            "function": {"name": "lift_no_fly_zone", "arguments": '{"zone_name": "Lower Arena"}'},
        },
    ]
    r = _post(url, "/v1/agent/execute", {"world": state, "calls": calls})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "clover.agent.execution"
    assert body["results"][0]["status"] == "returning" and body["results"][1] == {
        "zone_name": "Lower Arena",
        "status": "lifted",
    }
    assert body["changes"] == [["D-18 status: hovering -> returning to base"], ["- no-fly zone 'Lower Arena' lifted"]]
    assert body["messages"] == [  # what the agent loop sends the model back
        {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(body["results"][0])},
        {"role": "tool", "tool_call_id": "call_7", "content": '{"zone_name": "Lower Arena", "status": "lifted"}'},
    ]
    new = body["world"]
    assert new["drones"]["D-18"]["status"] == "returning to base" and "Lower Arena" not in new["zones"]
    assert body["active_zones"] == []
    world = World.from_dict(state)  # the same as running the calls in process
    for c in (
        {"name": "recall_drone", "arguments": {"drone_id": "D-18"}},
        {"name": "lift_no_fly_zone", "arguments": {"zone_name": "Lower Arena"}},
    ):
        execute(world, c["name"], c["arguments"])
    assert new == world.to_dict()
    # stateless: the page sends the new state with the next call
    again = _post(url, "/v1/agent/execute", {"world": new, "calls": calls[1:]}).json()
    assert again["results"] == [{"error": "no such zone"}] and again["world"] == new


def test_bad_calls_are_error_results_and_leave_the_world_unchanged(url):
    state = _world(url)
    calls = [
        {"name": "recall_drone", "arguments": {"drone_id": "D-999"}},
        {"name": "lift_no_fly_zone", "arguments": {"zone_name": "lower arena"}},
        {"name": "update_waypoint", "arguments": {"drone_id": "D-18", "waypoint_index": 9, "lat": 1.0, "lon": 2.0}},
        {"name": "assign_mission", "arguments": '{"drone_id": "D-18"'},
        {"name": "launch_missiles", "arguments": {}},
    ]
    r = _post(url, "/v1/agent/execute", {"world": state, "calls": calls})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [set(x) for x in body["results"]] == [{"error"}] * 5
    assert body["results"][0] == {"error": "unknown drone D-999"} and "out of range" in body["results"][2]["error"]
    assert body["changes"] == [[]] * 5 and body["world"] == state
    assert _post(url, "/v1/agent/execute", {"world": state, "calls": []}).json()["world"] == state


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"calls": []}, "world"),
        ({"world": {}, "calls": []}, "world"),  # no clock, zones, drones
        ({"world": "state", "calls": []}, "world"),
        ({"world": None, "calls": [{"name": "recall_drone"}]}, "world"),
        (None, "calls"),  # the seeded world, calls not a list
        ("nameless", "calls.0.name"),
        ("spoiled", "world"),
    ],
)
def test_a_bad_request_is_a_400_in_openais_shape(url, body, param):
    state = _world(url)
    if body is None:
        body = {"world": state, "calls": {"name": "recall_drone"}}
    elif body == "nameless":
        body = {"world": state, "calls": [{"arguments": {}}]}
    elif body == "spoiled":
        state = copy.deepcopy(state)
        state["drones"]["D-18"]["lat"] = "north"
        body = {"world": state, "calls": []}
    err = _error(_post(url, "/v1/agent/execute", body), 400)
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    r = httpx.post(
        url + "/v1/agent/execute", content=b"{not json", headers={**AUTH, "Content-Type": "application/json"}
    )
    assert _error(r, 400)["code"] == "invalid_json"


def test_oversize_requests_are_refused(url):
    state = _world(url)
    big = {
        "world": state,
        "calls": [{"name": "get_drone_status", "arguments": {"drone_id": "D-18" + "x" * 1000}}] * 300,
    }
    assert len(json.dumps(big)) > MAX_BODY_BYTES
    err = _error(_post(url, "/v1/agent/execute", big), 413)
    assert err["code"] == "request_too_large"
    many = {
        "world": state,
        "calls": [{"name": "get_drone_status", "arguments": {"drone_id": "D-18"}}] * (MAX_CALLS + 1),
    }
    assert _error(_post(url, "/v1/agent/execute", many), 413)["param"] == "calls"
    crowded = copy.deepcopy(state)
    d = crowded["drones"]["D-18"]
    crowded["drones"] = {f"D-{i}": {**d, "id": f"D-{i}"} for i in range(1, MAX_DRONES + 2)}
    assert _error(_post(url, "/v1/agent/execute", {"world": crowded, "calls": []}), 413)["param"] == "world.drones"
    crowded = copy.deepcopy(state)
    crowded["drones"]["D-18"]["waypoints"] *= 100
    assert _error(_post(url, "/v1/agent/execute", {"world": crowded, "calls": []}), 413)["param"] == "world"


def test_the_api_key_is_checked_as_on_the_other_v1_routes(url):
    state = _world(url)
    for path, body in (("/v1/agent/world", {"seed": 0}), ("/v1/agent/execute", {"world": state, "calls": []})):
        err = _error(_post(url, path, body, headers={}), 401)
        assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key"
        err = _error(_post(url, path, body, headers={"Authorization": "Bearer wrong"}), 401)
        assert err["message"] == "incorrect API key"
        assert _post(url, path, body).status_code == 200


def test_without_a_key_configured_no_key_is_needed(live):
    with live() as srv:
        r = httpx.post(srv.url + "/v1/agent/world", json={"seed": 2}, timeout=30)
        assert r.status_code == 200 and r.json()["world"] == World.seeded(2, area_deg=0.4).to_dict()
