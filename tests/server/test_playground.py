"""The playground page: served at /, and in headless Chromium it runs a streamed chat, draws the
active block step by step and shows the completion and its stats (screenshot in the tmp dir)."""

import httpx
import pytest

from tests.server.browser import CHROMIUM, Chromium


def test_page_is_served(live):
    with live() as srv:
        r = httpx.get(srv.url + "/")
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        assert "Clover playground" in r.text and "include_steps" in r.text
        cfg = httpx.get(srv.url + "/playground/config").json()
        assert cfg["model"] == "clover" and cfg["block_size"] == 8 and len(cfg["tools"]) == 6


@pytest.mark.timeout(180)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium); CI installs it")
def test_playground_in_chromium_shows_a_completion(live, tmp_path):
    with live(api_key="pg-key") as srv:
        browser = Chromium()
        try:
            url = srv.url + "/?key=pg-key&autorun=1&max_tokens=24&delay=10&system=Be%20brief&prompt=Recall%20drone%2017"
            done = browser.open(url, "['done', 'error'].includes(document.getElementById('status').dataset.state)")
            shot = tmp_path / "playground.png"
            browser.screenshot(shot)
            status = browser.evaluate("document.getElementById('status').dataset.state + ': ' + "
                                      "document.getElementById('status').textContent")  # fmt: skip
            text = browser.evaluate("document.querySelector('.msg.assistant .body').textContent")
            filled = browser.evaluate("document.querySelectorAll('#block .cell.done, #block .cell.new').length")
            tpf = browser.evaluate("document.getElementById('s-tpf').textContent")
            system = browser.evaluate("document.getElementById('system').value")
        finally:
            browser.close()
    assert done and status.startswith("done"), status
    assert text and text != "(empty)"
    assert filled > 0 and float(tpf) > 0
    assert system == "Be brief"  # the system prompt field, sent as a system message before the chat
    assert shot.stat().st_size > 10_000
