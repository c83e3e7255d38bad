"""The playground's 3-D map in headless Chromium: the scene (read through ``window.cloverScene()``,
which lists the three.js scene graph's objects) holds the world's zones, drones, waypoints and
bases with the world's values, before and after a compound message's calls land; the screenshot
is not blank; the "20 messages" button replays the zone demo into it. Without the vendored
library the page draws its 2-D map and says so.

``CLOVER_DOCS_SHOTS=1`` also writes the screenshot docs/agent.md shows (docs/agent-map.png)."""

import json
import math
import os
import time
from pathlib import Path

import httpx
import pytest

from clover.server import vendor
from tests.server.browser import Chromium, need_chromium, png_pixels

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "agent-map.png"
M_PER_DEG = 111320
DONE = "['done', 'error'].includes(document.getElementById('status').dataset.state)"


def need_vendored() -> None:
    """Skip where the 3-D library was not fetched (``make setup`` fetches it); under
    ``CLOVER_REQUIRE_BROWSER=1`` (CI) fail instead."""
    if vendor.vendored():
        return
    why = f"the 3-D map's library is not in {vendor.VENDOR} (make setup, or python clover/server/vendor.py)"
    if os.environ.get("CLOVER_REQUIRE_BROWSER") == "1":
        pytest.fail(why + ", and CLOVER_REQUIRE_BROWSER=1 asks for the browser tests")
    pytest.skip(why)


def _wait(browser, expression: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if browser.evaluate(expression):
            return True
        time.sleep(0.2)
    return False


def _box(browser, element_id: str) -> list[float]:
    return browser.evaluate(
        "(r => [r.x, r.y, r.width, r.height].map(v => v * devicePixelRatio))"
        f"(document.getElementById('{element_id}').getBoundingClientRect())"
    )


def luminance_spread(png: bytes, box) -> float:
    """The standard deviation of the pixels' luminance inside ``box``: near 0 for a blank area."""
    width, height, bpp, rows = png_pixels(png)
    x0, y0, w, h = (int(v) for v in box)
    vals = [
        0.299 * row[x * bpp] + 0.587 * row[x * bpp + 1] + 0.114 * row[x * bpp + 2]
        for row in rows[max(0, y0) : min(height, y0 + h)]
        for x in range(max(0, x0), min(width, x0 + w))
    ]
    mean = sum(vals) / len(vals)
    return math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))


def check_scene(scene: dict, world: dict, active: set[str]) -> None:
    """Every zone, drone, waypoint and base of ``world`` (the page's world, the server's own
    state) is an object of the scene with the world's values, placed where the frame says."""
    assert scene["available"] and scene["view"] == "3d" and scene["library"].startswith("three r")
    f = scene["frame"]
    v, top = f["exaggeration"], f["top_m"]

    def placed(o, lat, lon, metres):
        assert o["x"] == pytest.approx((lon - f["lon_c"]) * f["k"] * M_PER_DEG / 1000, abs=1e-6)
        assert o["z"] == pytest.approx(-(lat - f["lat_c"]) * M_PER_DEG / 1000, abs=1e-6)
        assert o["y"] == pytest.approx(metres / 1000 * v, abs=1e-6)

    objs = scene["objects"]
    zones = {o["name"]: o for o in objs if o["kind"] == "zone"}
    assert set(zones) == set(world["zones"])
    for name, z in world["zones"].items():
        o = zones[name]
        assert (o["lat"], o["lon"], o["radius_m"]) == (z["lat"], z["lon"], z["radius_m"])
        assert (o["start_time"], o["end_time"]) == (z["start_time"], z["end_time"])
        assert o["state"] == ("active" if name in active else "inactive")
        # no height band in this world: from the ground to the drawn top, the radius as read (or a visible least)
        assert (o["floor_m"], o["ceiling_m"]) == (0, top) and top >= 400
        assert o["height"] == pytest.approx(top / 1000 * v)
        assert o["radius"] == pytest.approx(max(z["radius_m"] / 1000, 0.012 * f["span_km"]))
        placed(o, z["lat"], z["lon"], top / 2)
    drones = {o["id"]: o for o in objs if o["kind"] == "drone"}
    assert set(drones) == set(world["drones"])
    for did, d in world["drones"].items():
        o = drones[did]
        assert (o["lat"], o["lon"], o["altitude_m"], o["status"]) == (d["lat"], d["lon"], d["altitude_m"], d["status"])
        placed(o, d["lat"], d["lon"], d["altitude_m"])
        wps = sorted((o for o in objs if o["kind"] == "waypoint" and o["drone"] == did), key=lambda o: o["index"])
        assert [(w["lat"], w["lon"], w["altitude_m"]) for w in wps] == [
            (w["lat"], w["lon"], w["altitude_m"]) for w in d["waypoints"]
        ]
        for w, o in zip(d["waypoints"], wps):
            placed(o, w["lat"], w["lon"], w["altitude_m"])
        (base,) = [o for o in objs if o["kind"] == "base" and o["drone"] == did]
        assert (base["lat"], base["lon"]) == (d["base_lat"], d["base_lon"])
        (route,) = [o for o in objs if o["kind"] == "route" and o["drone"] == did]
        assert route["points"] == 1 + len(d["waypoints"])


@pytest.mark.timeout(300)
@pytest.mark.alone  # a browser and a server beside the test: under a full parallel run its timeout is too near
def test_3d_map_in_chromium_draws_the_world_and_the_calls_as_they_land(live, tmp_path):
    """Agent mode on the bundled model (``ar``): the 3-D scene holds the seeded world; a compound
    message's two calls run, and the scene then holds the world they left, the drone they recalled
    and the zone they created lit; the screenshot of the map is not blank."""
    need_chromium()
    need_vendored()
    from clover.airspace.world import World, execute
    from clover.api.loading import load_engine

    seeded = World.seeded(0, area_deg=0.4)
    with live(load_engine(None, threads=1)) as srv:
        browser = Chromium(1440, 900)
        try:
            url = srv.url + "/?mode=agent&world=0&policy=ar&delay=0"
            drawn = browser.open(url, "window.cloverScene && cloverScene().objects.some(o => o.kind === 'drone')")
            before, world0, active0 = browser.evaluate("[cloverScene(), world, [...activeZones]]")
            browser.evaluate(
                "document.getElementById('prompt').value = "
                "'recall drone 18 and set up a 2 km no-fly zone called Harbor at 23.35, -12.2'; "
                "document.getElementById('send').click()"
            )
            finished = _wait(browser, DONE, 240)
            status = browser.evaluate("document.getElementById('status').textContent")
            log = browser.evaluate("document.getElementById('log').innerText")
            after, world1, active1 = browser.evaluate("[cloverScene(), world, [...activeZones]]")
            shot = tmp_path / "agent-map.png"
            browser.screenshot(shot)
            box = _box(browser, "map3d")
            svg_hidden = browser.evaluate("getComputedStyle(document.getElementById('map')).display")
        finally:
            browser.close()
    assert drawn and finished and status.startswith("done"), (status, log)
    # before: the seeded world, as the server drew it (World.seeded(0, area_deg=0.4))
    assert world0 == seeded.to_dict() and set(active0) == {
        n for n, z in seeded.zones.items() if z.active_at(seeded.clock)
    }
    check_scene(before, world0, set(active0))
    assert not any(o.get("lit") for o in before["objects"])
    # after: the calls landed; the scene is the world they left, with what they changed lit
    assert 'recall_drone({"drone_id": "D-18"})' in log and "create_no_fly_zone(" in log, log
    create = json.loads(log.split("create_no_fly_zone(", 1)[1].split(")\n", 1)[0])
    expected = seeded.copy()
    assert "error" not in execute(expected, "recall_drone", {"drone_id": "D-18"})
    assert "error" not in execute(expected, "create_no_fly_zone", create)
    assert world1 == expected.to_dict()
    check_scene(after, world1, set(active1))
    zones = {o["name"]: o for o in after["objects"] if o["kind"] == "zone"}
    drones = {o["id"]: o for o in after["objects"] if o["kind"] == "drone"}
    assert (zones["Harbor"]["lat"], zones["Harbor"]["lon"]) == (23.35, -12.2)
    assert zones["Harbor"]["lit"] and drones["D-18"]["lit"] and drones["D-18"]["status"] == "returning to base"
    assert [n for n, z in zones.items() if z["lit"]] == ["Harbor"]
    assert [d for d, o in drones.items() if o["lit"]] == ["D-18"]
    # the screenshot: the 3-D view shown (the SVG hidden), and the map's box is not blank
    assert svg_hidden == "none"
    png = shot.read_bytes()
    assert luminance_spread(png, box) > 5, "the 3-D map is blank in the screenshot"
    if os.environ.get("CLOVER_DOCS_SHOTS") == "1":
        DOCS_SHOT.write_bytes(png)


@pytest.mark.timeout(300)
@pytest.mark.alone  # a browser and a server beside the test: under a full parallel run its timeout is too near
def test_the_demo_button_replays_the_zone_demo_into_the_3d_map(live):
    """The "20 messages" button, with 2 (``demo_messages=2``; the full 20 take a minute or more on
    two cores: ``clover bench agent --demo 20`` is that run): each policy's run starts from an
    empty map, each landed call's zone appears lit in the scene, and both total times are shown."""
    need_chromium()
    need_vendored()
    from clover.api.loading import load_engine

    with live(load_engine(None, threads=1)) as srv:
        browser = Chromium(1440, 900)
        try:
            ready = browser.open(
                srv.url + "/?mode=agent&world=0&demo_messages=2", "window.cloverScene && cloverScene().available"
            )
            label = browser.evaluate("document.getElementById('demo').textContent")
            # each redraw's zones, as the scene holds them
            browser.evaluate(
                "window.seen = []; const drawn = setWorld; "
                "setWorld = (...a) => { drawn(...a); seen.push(cloverScene().objects.filter(o => o.kind === 'zone')"
                ".map(o => [o.name, o.lit])); };"
                "document.getElementById('demo').click()"
            )
            finished = _wait(browser, DONE, 240)
            status = browser.evaluate("document.getElementById('status').textContent")
            seen = browser.evaluate("seen")
            stat = browser.evaluate("document.getElementById('demostat').textContent")
            log = browser.evaluate("document.getElementById('log').innerText")
            final = browser.evaluate("world")
        finally:
            browser.close()
    assert ready and label == "2 messages"
    assert finished and status.startswith("demo done"), (status, log)
    assert "default · message 1 of 2" in log.lower() and "ar · message 2 of 2" in log.lower()
    # two runs, each from an empty map (the second starts once: the one drop, to no zone); within a
    # run zones only accumulate, and a zone appears lit when its call lands
    counts = [len(s) for s in seen]
    assert counts[0] == 0 and max(counts) >= 1, seen
    drops = [i for i in range(1, len(counts)) if counts[i] < counts[i - 1]]
    assert len(drops) == 1 and counts[drops[0]] == 0, seen
    for prev, cur in zip(seen, seen[1:]):
        new = {n for n, _ in cur} - {n for n, _ in prev}
        assert all(lit for n, lit in cur if n in new), (prev, cur)
    # the map at the end: the ar run's zones, no drones (the demo's messages each start their own world)
    assert set(final["zones"]) == {n for n, _ in seen[-1]} and 1 <= len(final["zones"]) <= 2 and not final["drones"]
    assert stat.startswith("2 messages: default ") and " s · ar " in stat and "zones right:" in stat, stat


@pytest.mark.timeout(180)
@pytest.mark.alone  # a browser and a server beside the test
def test_without_the_library_the_page_draws_the_2d_map_and_says_so(live, tmp_path, monkeypatch):
    need_chromium()
    monkeypatch.setattr(vendor, "VENDOR", tmp_path / "no-vendor")  # as if make setup had not fetched it
    with live() as srv:
        assert httpx.get(srv.url + "/playground/config").json()["map3d"] is None
        assert httpx.get(srv.url + "/playground/vendor/three.module.js").status_code == 404
        browser = Chromium(1440, 900)
        try:
            noted = browser.open(
                srv.url + "/?mode=agent&world=0", "!document.getElementById('mapnote').hidden", timeout=60
            )
            _wait(browser, "document.querySelectorAll('#map g.zone').length > 0", 30)
            note = browser.evaluate("document.getElementById('mapnote').textContent")
            scene = browser.evaluate("cloverScene()")
            zones = browser.evaluate("document.querySelectorAll('#map g.zone').length")
            svg = browser.evaluate("getComputedStyle(document.getElementById('map')).display")
            button = browser.evaluate("document.getElementById('view3d').disabled")
        finally:
            browser.close()
    assert noted and "3-D map unavailable" in note and "make setup" in note, note
    assert scene["available"] is False and scene["view"] == "top" and scene["objects"] == []
    assert zones == 3 and svg != "none" and button is True
