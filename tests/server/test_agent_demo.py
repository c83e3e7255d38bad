"""POST /v1/agent/demo: the zone demo run by the server on its own chat path, streamed as events;
the same run as in process; one at a time; stopped when its client goes away."""

import json
import threading
import time

import httpx
import pytest

from clover.api.llm import LLM
from clover.api.loading import load_model_dir
from clover.data.task import DEFAULT_TASK, get_task
from clover.engine import Engine

TIMED = ("seconds", "elapsed_s", "speedup")


def _events(lines) -> list:
    out = []
    for line in lines:
        if line.startswith("data: "):
            out.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return out


@pytest.fixture(scope="module")
def bundled():
    """The bundled model (it answers a zone message in a call or two, where a random one writes
    to max_tokens) and its tokenizer."""
    return load_model_dir(None, threads=1)


def _untimed(ev):
    if isinstance(ev, dict):
        return {k: _untimed(v) for k, v in ev.items() if k not in TIMED}
    return ev


def test_the_demo_streams_the_run_the_command_line_makes(live, bundled):
    with live(Engine(*bundled)) as srv:
        r = httpx.post(srv.url + "/v1/agent/demo", json={"messages": 1}, timeout=300)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text.splitlines())
    assert events[-1] == "[DONE]"
    served = events[:-1]
    kinds = [e["type"] for e in served]
    assert kinds[:2] == ["start", "run"] and kinds[-1] == "done" and kinds.count("message") == 2
    assert served[0]["messages"] == 1 and served[0]["policies"] == ["default", "ar"]
    done = served[-1]
    assert set(done) == {"type", "messages", "default", "ar", "speedup"}
    assert done["default"]["seconds"] > 0 and done["ar"]["seconds"] > 0
    # in this process, through LLM.chat (as clover bench agent --demo), on the same model: the same
    # events (each model call decodes the same), the times aside
    here = []
    get_task(DEFAULT_TASK).agent_demo(LLM(Engine(*bundled)).chat, 1, on_event=here.append)
    assert [_untimed(e) for e in served] == [_untimed(e) for e in here]
    assert any(e["type"] == "step" and e["zones"] for e in here)  # zones landed: the comparison covers them


def test_bad_requests_get_the_openai_error_shape(live):
    with live(api_key="k") as srv:
        assert httpx.post(srv.url + "/v1/agent/demo", json={"messages": 1}).status_code == 401
        for body in ({"messages": 0}, {"messages": 51}, {"messages": "twenty"}):
            r = httpx.post(srv.url + "/v1/agent/demo", json=body, headers={"Authorization": "Bearer k"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "messages", body


class Gated(Engine):
    """Each engine step waits for ``go`` (set: runs as usual)."""

    go = threading.Event()

    def step(self):
        self.go.wait(30)
        return super().step()


def test_one_demo_at_a_time_and_a_client_gone_stops_it(live, bundled):
    engine = Gated(*bundled)
    engine.go.clear()
    with live(engine) as srv:
        url = srv.url + "/v1/agent/demo"
        with httpx.Client(timeout=60) as client:
            with client.stream("POST", url, json={"messages": 2}) as first:
                lines = first.iter_lines()
                assert json.loads(next(lines)[6:])["type"] == "start"
                second = client.post(url, json={"messages": 1})
                assert second.status_code == 429
                err = second.json()["error"]
                assert (err["code"], err["type"]) == ("demo_running", "rate_limit_error") and "one runs at a time" in (
                    err["message"]
                )
            # the first client went away: its demo stops and frees the server at once, its model call
            # aborted (the engine is still held: the call never finished)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with client.stream("POST", url, json={"messages": 1}) as again:
                    if again.status_code != 429:
                        break
                time.sleep(0.2)
            assert again.status_code == 200 and not engine.go.is_set()
            engine.go.set()
            deadline = time.monotonic() + 60
            while (r := client.post(url, json={"messages": 1})).status_code == 429 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert r.status_code == 200 and _events(r.text.splitlines())[-1] == "[DONE]"
