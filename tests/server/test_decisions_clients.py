"""/v1/decisions as real clients call it: explicit nulls, odd options, contexts at the model's
limit, oversized options. Every answer is a success (each question one of its options) or an
OpenAI-shaped error naming what the client sent, never a 500."""

import httpx
import pytest

from clover.api.joint_decisions import plan_joint
from clover.data.decision_chat import DecisionGroup, Question
from tests.server.conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}
YES_NO = [{"question": f"Is zone {i} active?", "options": ["yes", "no"]} for i in range(8)]


def _post(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/v1/decisions", json=body, headers=AUTH, timeout=60)


def _error(r: httpx.Response, status: int, param: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param, err
    return err


def _answered(r: httpx.Response, questions: list[dict]) -> dict:
    assert r.status_code == 200, r.text
    d = r.json()
    assert len(d["answers"]) == len(questions) and {"wall_s", "requests", "forward_passes"} <= set(d["timing"])
    for a, q in zip(d["answers"], questions):
        assert a["option"] in q["options"] and 0 <= a["probability"] <= 1
    return d


def test_nullable_fields_sent_as_null(server):
    """A client that serialises every field sends null for mode too: the default (joint)."""
    body = {
        "model": None,
        "context": "Alpha is active.",
        "questions": YES_NO[:2],
        "mode": None,
        "threshold": None,
        "block_size": None,
        "policy": None,
    }
    assert _answered(_post(server, body), YES_NO[:2])["mode"] == "joint"


@pytest.mark.parametrize("mode", ["joint", "independent"])
def test_odd_options_are_answered(server, mode):
    questions = [
        {"question": "Which zone?", "options": ["Zürich Süd", "Ørland", "日本"]},
        {"question": "Mood?", "options": ["👍", "👎 nope"]},
        {"question": "How many drones?", "options": ["1", "2", "10", "100"]},
        {"question": "Case?", "options": ["Yes", "yes", " yes"]},
    ]
    _answered(_post(server, {"context": "Alpha is active.", "questions": questions, "mode": mode}), questions)


def _context_at_the_limit(tokenizer, config, max_prompt: int) -> str:
    """A context whose joint prompt fits (<= max_prompt tokens) while prompt + answers do not."""
    for reps in range(1, 4000):
        ctx = "Alpha active 09:00. " * reps
        (plan,) = plan_joint(
            tokenizer, config, DecisionGroup(ctx, [Question(q["question"], q["options"]) for q in YES_NO])
        )
        n = len(plan.prompt_ids)
        if n > max_prompt:
            break
        if n + plan.max_tokens > config.max_position_embeddings:
            return ctx
    raise AssertionError("no context between the two limits")


def test_answers_that_overrun_the_context_are_a_400_naming_the_context(server, tokenizer, tiny_model):
    """The prompt fits but its answer slots would run past the model's context: a clear 400 on
    the context, not an engine message about a max_tokens the client never sent."""
    cfg = tiny_model.config
    ctx = _context_at_the_limit(tokenizer, cfg, cfg.max_position_embeddings - 1)
    err = _error(_post(server, {"context": ctx, "questions": YES_NO}), 400, "context")
    assert err["code"] == "context_length_exceeded" and "max_tokens" not in err["message"]
    assert httpx.get(server.url + "/health").json()["outstanding"] == 0


def test_an_oversized_option_is_refused_before_any_work(server):
    """Options are bounded like questions: a huge one is a quick 400 naming it (it would be
    tokenised with the whole prompt, holding up every other client)."""
    questions = [{"question": "Which?", "options": ["a" * 3000, "no"]}]

    def engine_counts() -> list[str]:
        text = httpx.get(server.url + "/metrics").text
        return [
            ln for ln in text.splitlines() if ln.startswith(("clover_engine_requests_total", "clover_prompt_tokens"))
        ]

    before = engine_counts()
    err = _error(_post(server, {"context": "Alpha is active.", "questions": questions}), 400, "questions.0.options.0")
    assert "2000" in err["message"]
    assert engine_counts() == before  # refused before the engine saw it: no request, no prompt tokens
    assert httpx.get(server.url + "/health").json()["outstanding"] == 0


def test_stream_true_is_refused_not_ignored(server):
    body = {"context": "Zone 1 is active.", "questions": YES_NO[:1]}
    assert _post(server, {**body, "stream": False}).status_code == 200
    assert "does not stream" in _error(_post(server, {**body, "stream": True}), 400, "stream")["message"]
