"""Every error comes back in OpenAI's shape with the right status; nothing takes the server down."""

import httpx
import openai
import pytest

from clover.airspace.tools import AIRSPACE_TOOLS
from clover.engine import Engine
from tests.server.conftest import API_KEY

MSG = [{"role": "user", "content": "hello"}]
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _error(r: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def _post(server, body, path="/v1/chat/completions", **kw):
    return httpx.post(server.url + path, json=body, headers=kw.pop("headers", AUTH), timeout=60, **kw)


def test_malformed_json(server):
    r = httpx.post(
        server.url + "/v1/chat/completions",
        content=b'{"model": "clover", "messages": [',
        headers={**AUTH, "Content-Type": "application/json"},
    )
    _error(r, 400, "invalid_json")
    _error(_post(server, None, content=b"[1, 2]"), 400)


def test_unknown_model(server, client):
    _error(_post(server, {"model": "gpt-9", "messages": MSG}), 404, "model_not_found", "model")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=MSG)
    _error(httpx.get(server.url + "/v1/models/gpt-9", headers=AUTH), 404, "model_not_found")


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": 5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": 10_000}, "block_size"),
        ({"threshold": 0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"n": 17}, "n"),
        ({"policy": "bogus"}, "policy"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, None),
        ({"stop": [""]}, "stop"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": AIRSPACE_TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages.0.content",
        ),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_bad_parameters(server, extra, param):
    _error(_post(server, {"model": "clover", "messages": MSG, **extra}), 400, param=param)


def test_bad_parameter_through_the_client(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="clover", messages=MSG, temperature=-1)
    assert e.value.body["param"] == "temperature"


def test_too_many_tools(server):
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": {}}} for i in range(129)]
    _error(_post(server, {"model": "clover", "messages": MSG, "tools": tools}), 400, "too_many_tools", "tools")


def test_context_length(server):
    r = _post(server, {"model": "clover", "messages": MSG, "max_tokens": 5000})
    _error(r, 400, "context_length_exceeded", "max_tokens")


def test_api_key(server):
    _error(_post(server, {"model": "clover", "messages": MSG}, headers={}), 401, "invalid_api_key")
    _error(_post(server, {"model": "clover", "messages": MSG}, headers={"Authorization": "Bearer nope"}), 401)
    _error(httpx.get(server.url + "/v1/models", headers={"Authorization": "Basic abc"}), 401)
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert httpx.get(server.url + "/health").status_code == 200  # health and the playground stay open


def test_unknown_route_and_method(server):
    _error(httpx.get(server.url + "/v1/nothing", headers=AUTH), 404)
    _error(httpx.get(server.url + "/v1/chat/completions", headers=AUTH), 405)


def test_prompt_too_long_and_body_too_large(live):
    with live(max_prompt_tokens=32, max_body_bytes=4096) as srv:
        long = [{"role": "user", "content": "drone " * 50}]
        _error(_post(srv, {"model": "clover", "messages": long}, headers={}), 413, "prompt_too_long")
        _error(_post(srv, {"model": "clover", "prompt": "x " * 60}, "/v1/completions", headers={}), 413)
        huge = [{"role": "user", "content": "x" * 10_000}]
        _error(_post(srv, {"model": "clover", "messages": huge}, headers={}), 413, "request_too_large")
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as e:
            c.chat.completions.create(model="clover", messages=long)
        assert e.value.status_code == 413
        assert httpx.get(srv.url + "/health").status_code == 200


def test_engine_failure_is_a_500_and_the_server_lives_on(live, tiny_model, tokenizer):
    class Flaky(Engine):
        fail = True

        def step(self):
            if Flaky.fail and self.num_active + self.num_waiting:
                Flaky.fail = False
                raise RuntimeError("boom")
            return super().step()

    with live(Flaky(tiny_model, tokenizer)) as srv:
        err = _error(_post(srv, {"model": "clover", "messages": MSG, "max_tokens": 4}, headers={}), 500)
        assert "boom" in err["message"] and err["type"] == "server_error"
        r = _post(srv, {"model": "clover", "messages": MSG, "max_tokens": 4}, headers={})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 0
        assert httpx.get(srv.url + "/health").json()["outstanding"] == 0


def test_unexpected_exception_is_a_500(live, tiny_model, tokenizer):
    class Tok:
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def encode(self, text):
            if "BOOM" in text:
                raise KeyError("tokenizer exploded")
            return tokenizer.encode(text)

    with live(Engine(tiny_model, Tok())) as srv:
        boom = [{"role": "user", "content": "BOOM"}]
        _error(_post(srv, {"model": "clover", "messages": boom}, headers={}), 500, "internal_error")
        assert _post(srv, {"model": "clover", "messages": MSG, "max_tokens": 2}, headers={}).status_code == 200
