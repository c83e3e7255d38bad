"""The playground page: served at /, and in headless Chromium it runs a streamed chat, draws the
active block step by step and shows the completion and its stats (screenshot in the tmp dir)."""

import httpx
import pytest

from clover.engine import Engine
from tests.server.browser import CHROMIUM, Chromium

POLICIES = ["ar", "threshold", "prefix", "fixed", "edit"]


def test_page_is_served(live):
    with live() as srv:
        r = httpx.get(srv.url + "/")
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        assert "Clover playground" in r.text and "include_steps" in r.text
        cfg = httpx.get(srv.url + "/playground/config").json()
        assert cfg["model"] == "clover" and cfg["block_size"] == 8 and len(cfg["tools"]) == 6
        assert cfg["auth"] is False  # the page shows no API-key box then
        page = r.text
    for p in POLICIES:  # a policy selector, as the API takes ``policy``
        assert f"<option>{p}</option>" in page or f"<option selected>{p}</option>" in page
    assert 'id="policy"' in page and 'policy: $("policy").value' in page
    assert "[hidden] { display:none !important; }" in page  # a hidden label stays hidden despite display:flex
    with live(api_key="k") as srv:
        assert httpx.get(srv.url + "/playground/config").json()["auth"] is True


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
            keybox = browser.evaluate("getComputedStyle(document.getElementById('keybox')).display")
        finally:
            browser.close()
    assert done and status.startswith("done"), status
    assert text and text != "(empty)"
    assert filled > 0 and float(tpf) > 0
    assert system == "Be brief"  # the system prompt field, sent as a system message before the chat
    assert keybox != "none"  # this server takes a key: the box is shown
    assert shot.stat().st_size > 10_000


@pytest.mark.timeout(180)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium); CI installs it")
def test_playground_without_a_key_and_with_a_policy(live, tiny_model, tokenizer):
    """A server without an API key: no key box. The policy selector sets the request's policy,
    and the block-size field shows the model's block size instead of a cut-off word."""

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
    assert options.split(",") == POLICIES and engine.policies == ["ar"]
    assert placeholder == "8"  # the model's block size (the field is narrow: no word to cut)
