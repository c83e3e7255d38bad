"""The playground page: served at /, and in headless Chromium it runs a streamed chat, draws the
active block step by step and shows the completion and its stats (screenshot in the tmp dir); in
agent mode it draws the airspace world and runs a compound message's calls against it."""

import re
import time

import httpx
import pytest

from clover.engine import POLICIES as ENGINE_POLICIES
from clover.engine import Engine
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD
from tests.server.browser import Chromium, colours_in, need_chromium, png_pixels

POLICIES = ["ar", "threshold", "prefix", "fixed", "edit"]


def test_page_is_served(live):
    with live() as srv:
        r = httpx.get(srv.url + "/")
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        assert "Clover playground" in r.text and "include_steps" in r.text
        cfg = httpx.get(srv.url + "/playground/config").json()
        assert cfg["model"] == "clover" and cfg["block_size"] == 8 and len(cfg["tools"]) == 6
        assert cfg["auth"] is False  # the page shows no API-key box then
        # the policy selector is the engine's registry, its defaults the engine's
        assert set(POLICIES) <= set(cfg["policies"]) and cfg["policies"] == sorted(ENGINE_POLICIES)
        assert (cfg["policy"], cfg["threshold"]) == (DEFAULT_POLICY, DEFAULT_THRESHOLD)
        # a first visitor reads what the model does (the served model's task) and what to type
        from clover.data.task import DEFAULT_TASK

        assert cfg["task"]["name"] == DEFAULT_TASK and "airspace" in cfg["task"]["summary"]
        page = r.text
        assert httpx.get(srv.url + "/favicon.ico").status_code == 404  # so the page declares none:
    assert '<link rel="icon" href="data:,">' in page
    assert 'id="intro"' in page and "cfg.task.summary" in page and "press Enter" in page
    assert 'id="policy"' in page and 'policy: $("policy").value' in page and "cfg.policies" in page
    assert "0.9" not in page  # the threshold shown is the engine's default, from the config
    assert "[hidden] { display:none !important; }" in page  # a hidden label stays hidden despite display:flex
    with live(api_key="k") as srv:
        assert httpx.get(srv.url + "/playground/config").json()["auth"] is True


@pytest.mark.timeout(180)
@pytest.mark.alone  # a browser and a server beside the test: under a full parallel run its timeout is too near
def test_playground_in_chromium_shows_a_completion(live, tmp_path):
    need_chromium()
    with live(api_key="pg-key") as srv:
        browser = Chromium()
        try:
            url = srv.url + "/?key=pg-key&autorun=1&max_tokens=24&delay=10&system=Be%20brief&prompt=Recall%20drone%2017"
            done = browser.open(url, "['done', 'error'].includes(document.getElementById('status').dataset.state)")
            shot = tmp_path / "playground.png"
            browser.screenshot(shot)
            status = browser.evaluate(
                "document.getElementById('status').dataset.state + ': ' + document.getElementById('status').textContent"
            )
            text = browser.evaluate("document.querySelector('.msg.assistant .body').textContent")
            filled = browser.evaluate("document.querySelectorAll('#block .cell.done, #block .cell.new').length")
            tpf = browser.evaluate("document.getElementById('s-tpf').textContent")
            system = browser.evaluate("document.getElementById('system').value")
            keybox = browser.evaluate("getComputedStyle(document.getElementById('keybox')).display")
            viewport = browser.evaluate("[innerWidth, innerHeight].map(v => Math.round(v * devicePixelRatio))")
            reply = "document.querySelector('.msg.assistant .body')"
            box = browser.evaluate(
                f"(r => [r.x, r.y, r.width, r.height].map(v => v * devicePixelRatio))({reply}.getBoundingClientRect())"
            )
        finally:
            browser.close()
    assert done and status.startswith("done"), status
    assert text and text != "(empty)"
    assert filled > 0 and float(tpf) > 0
    assert system == "Be brief"  # the system prompt field, sent as a system message before the chat
    assert keybox != "none"  # this server takes a key: the box is shown
    # the screenshot is the page as shown: the viewport's size, and text drawn where the reply is
    png = shot.read_bytes()
    assert list(png_pixels(png)[:2]) == viewport
    assert colours_in(png, box) > 3, "the reply's box is blank in the screenshot"


@pytest.mark.timeout(180)
@pytest.mark.alone  # a browser and a server beside the test: under a full parallel run its timeout is too near
def test_playground_without_a_key_and_with_a_policy(live, tiny_model, tokenizer):
    """A server without an API key: no key box. The policy selector sets the request's policy,
    and the block-size field shows the model's block size instead of a cut-off word."""
    need_chromium()

    class Recording(Engine):
        def add_request(self, prompt_ids, params=None, request_id=None):
            self.policies = [*getattr(self, "policies", []), params.policy]
            return super().add_request(prompt_ids, params, request_id)

    engine = Recording(tiny_model, tokenizer)
    with live(engine) as srv:
        browser = Chromium()
        try:
            url = srv.url + "/?autorun=1&max_tokens=8&delay=0&policy=ar&prompt=Recall%20drone%2017"
            done = browser.open(url, "['done', 'error'].includes(document.getElementById('status').dataset.state)")
            status = browser.evaluate("document.getElementById('status').dataset.state")
            keybox = browser.evaluate("getComputedStyle(document.getElementById('keybox')).display")
            options = browser.evaluate("[...document.querySelectorAll('#policy option')].map(o => o.value).join(',')")
            placeholder = browser.evaluate("document.getElementById('bs').placeholder")
        finally:
            browser.close()
    assert done and status == "done", status
    assert keybox == "none"
    assert options.split(",") == sorted(ENGINE_POLICIES) and engine.policies == ["ar"]  # the engine's registry
    assert placeholder == "8"  # the model's block size (the field is narrow: no word to cut)


def test_agent_mode_is_on_the_page(live):
    with live() as srv:
        page = httpx.get(srv.url + "/").text
    assert '<option value="agent">agent</option>' in page and 'id="map"' in page
    assert "/v1/agent/world" in page and "/v1/agent/execute" in page and "const MAX_STEPS = 4;" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        '"http://www.w3.org/2000/svg"', ""
    )  # one self-contained file: no external assets, no CDN
    assert re.findall("<link[^>]*>", page) == ['<link rel="icon" href="data:,">'] and "src=" not in page  # no icon


def _map(browser) -> dict:
    """The map as drawn: each zone's state and each drone's status, from the SVG."""
    return browser.evaluate(
        "({zones: Object.fromEntries([...document.querySelectorAll('#map g.zone')].map(g => [g.dataset.zone, "
        "{state: g.dataset.state, circles: g.querySelectorAll('circle').length}])), "
        "drones: Object.fromEntries([...document.querySelectorAll('#map g.drone')].map(g => [g.dataset.drone, "
        "{status: g.dataset.status, label: g.querySelector('text.status').textContent, "
        "markers: g.querySelectorAll('circle.marker').length}])), "
        "waypoints: document.querySelectorAll('#map circle.wp').length})"
    )


@pytest.mark.timeout(300)
@pytest.mark.alone  # a browser and a server beside the test: under a full parallel run its timeout is too near
def test_agent_mode_in_chromium_runs_the_calls_and_the_map_shows_it(live, tmp_path):
    """Agent mode on the bundled model (``ar``): the map draws the seeded world; a compound
    message's two calls run on the server (POST /v1/agent/execute), the results go back to the
    model, which replies in words; the map shows the drone returning and the zone lifted."""
    need_chromium()
    from clover.airspace.world import World
    from clover.api.loading import load_engine

    world = World.seeded(0, area_deg=0.4)
    assert world.drones["D-18"].status == "hovering" and "Lower Arena" in world.zones
    with live(load_engine(None, threads=1), api_key="pg-key") as srv:
        browser = Chromium(1440, 900)
        try:
            url = srv.url + "/?key=pg-key&mode=agent&world=0&policy=ar&delay=0&view=top"  # the top-down (SVG) view
            drawn = browser.open(url, "document.querySelectorAll('#map g.drone').length > 0")
            before = _map(browser)
            browser.evaluate(
                "document.getElementById('prompt').value = "
                "'recall drone 18 and lift no-fly zone Lower Arena'; "
                "document.getElementById('send').click()"
            )
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                if browser.evaluate("['done', 'error'].includes(document.getElementById('status').dataset.state)"):
                    break
                time.sleep(0.2)
            status = browser.evaluate("document.getElementById('status').textContent")
            after = _map(browser)
            log = browser.evaluate("document.getElementById('log').innerText")
            changed = browser.evaluate(
                "[...document.querySelectorAll('#map .changed')].map(g => "
                "g.dataset.drone || g.dataset.zone).sort().join(',')"
            )
            shot = tmp_path / "agent.png"
            browser.screenshot(shot)
            map_box = browser.evaluate(
                "(r => [r.x, r.y, r.width, r.height].map(v => v * devicePixelRatio))"
                "(document.getElementById('map').getBoundingClientRect())"
            )
            # a wrong key: the world route answers 401 like the other /v1 routes, and the page says so
            browser.evaluate("localStorage.clear()")
            state_is_error = "document.getElementById('status').dataset.state === 'error'"
            refused = browser.open(srv.url + "/?key=wrong&mode=agent", state_is_error)
            refusal = browser.evaluate("document.getElementById('status').textContent")
        finally:
            browser.close()
    assert drawn
    # the seeded world, drawn: a circle per zone (state from the world's rules), a marker per drone
    assert before["zones"] == {
        name: {"state": "active" if z.active_at(world.clock) else "inactive", "circles": 1}
        for name, z in world.zones.items()
    }
    assert {d: (v["status"], v["markers"]) for d, v in before["drones"].items()} == {
        did: (d.status, 1) for did, d in world.drones.items()
    }
    assert before["waypoints"] == sum(len(d.waypoints) for d in world.drones.values())
    assert before["zones"]["Lower Arena"]["state"] == "active"
    # the loop ran: two calls, their results, a reply in words
    assert status.startswith("done: a reply after 2 step(s)"), (status, log)
    assert 'recall_drone({"drone_id": "D-18"})' in log and '"status":"returning"' in log
    assert 'lift_no_fly_zone({"zone_name": "Lower Arena"})' in log and '"status":"lifted"' in log
    # ... and the map changed: the zone drawn as lifted, the drone's status label
    assert after["zones"]["Lower Arena"]["state"] == "lifted"
    assert after["drones"]["D-18"]["status"] == "returning to base"
    assert after["drones"]["D-18"]["label"].startswith("returning to base")
    assert before["drones"]["D-18"]["label"].startswith("hovering")
    assert {d: v for d, v in after["drones"].items() if d != "D-18"} == {
        d: v for d, v in before["drones"].items() if d != "D-18"
    }
    assert changed == "D-18,Lower Arena"  # highlighted as what this message changed
    assert refused and "401" in refusal and "incorrect API key" in refusal, refusal
    png = shot.read_bytes()
    assert colours_in(png, map_box) > 3, "the map is blank in the screenshot"


@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4])
def test_png_reader_undoes_each_filter(kind):
    """The screenshots' PNG reader (tests/server/browser.py) against an image written here with
    each scanline filter of the PNG specification."""
    import struct
    import zlib

    w, h, bpp = 7, 5, 4
    rows = [bytes((x * 37 + y * 91 + c * 53) % 256 for x in range(w) for c in range(bpp)) for y in range(h)]

    def paeth(a, b, c):
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        return a if pa <= pb and pa <= pc else b if pb <= pc else c

    raw, prev = b"", bytes(w * bpp)
    for row in rows:
        out = bytearray()
        for i, x in enumerate(row):
            a, b, c = row[i - bpp] if i >= bpp else 0, prev[i], prev[i - bpp] if i >= bpp else 0
            pred = (0, a, b, (a + b) // 2, paeth(a, b, c))[kind]
            out.append((x - pred) & 255)
        raw += bytes([kind]) + bytes(out)
        prev = row

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    assert png_pixels(png) == (w, h, bpp, rows)
    assert colours_in(png, (0, 0, 1, 1)) == 1 and colours_in(png) == len(
        {r[i : i + 4] for r in rows for i in range(0, 28, 4)}
    )
