"""The agent loop against a live ``clover serve`` (a subprocess on 127.0.0.1, a free port) makes
the same calls, replies and world as in process, for the bundled model with the ``ar`` policy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest

from clover.airspace.loop import LocalModel, OpenAIModel, run_agent
from clover.airspace.tasks import operator_tasks, task_success

httpx = pytest.importorskip("httpx")
pytest.importorskip("openai")

API_KEY = "agent-test-key"


@pytest.fixture(scope="module")
def served():
    # --port 0: the server binds a port the system chooses and names it in its banner, so no
    # other process can take it between a test finding it free and the server binding it
    cmd = [
        sys.executable,
        "-m",
        "clover",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--threads",
        "1",
        "--log-level",
        "warning",
        "--api-key",
        API_KEY,
    ]
    proc = subprocess.Popen(
        cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        port = None
        for line in proc.stderr:  # the banner comes once the model is loaded and the port bound
            m = re.match(r"clover serve: http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            pytest.fail(f"clover serve exited with {proc.wait()} before listening")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its log from filling the pipe
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.fail(f"clover serve exited with {proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=60).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > 600:  # a guard against a hang, not a bound on speed
                pytest.fail("clover serve never answered /health")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _calls(result) -> list:
    return [(c.step, c.name, c.arguments, c.result) for c in result.calls]


def test_served_and_in_process_agents_make_the_same_world(served):
    tasks = operator_tasks(12)
    picked = [next(t for t in tasks if t.kind == "compound"), next(t for t in tasks if t.kind == "tool_result")]
    local = LocalModel(policy="ar", threads=1)
    remote = OpenAIModel(served, API_KEY, policy="ar", grounded_reply=True)  # as LocalModel asks by default
    assert remote.model == "clover"  # the first model the server lists
    for t in picked:
        a = run_agent(local, t.messages, t.world, t.tools)
        b = run_agent(remote, t.messages, t.world, t.tools)
        assert a.world == b.world
        assert _calls(a) == _calls(b) and a.calls  # the same calls, arguments as the same JSON text
        assert (a.reply, a.steps, a.stopped, a.forward_passes) == (b.reply, b.steps, b.stopped, b.forward_passes)
        assert task_success(t, a) == task_success(t, b)
