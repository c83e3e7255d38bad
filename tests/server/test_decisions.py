"""/v1/decisions: joint (one request, one block of constrained slots) and independent."""

import httpx
import pytest
import torch

from clover.api.joint_decisions import decide_sync, plan_independent, plan_joint
from clover.data.chat import render
from clover.data.decision_chat import DecisionGroup, Question, answer_text, decision_messages
from clover.engine import Engine

CONTEXT = "Alpha: active 09:00-10:30, ceiling 120 m.\nFlight D-17 crosses Alpha 10:15-10:45 at 90 m."
QUESTIONS = [
    {"question": "Is Alpha active during the flight?", "options": ["yes", "no"]},
    {"question": "Does the flight conflict with Alpha?", "options": ["yes", "no"]},
    {"question": "What should the operator do?", "options": ["approve", "hold", "reroute", "deny"]},
]


def _post(server, body):
    from tests.server.conftest import API_KEY

    return httpx.post(
        server.url + "/v1/decisions", json=body, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60
    )


@pytest.mark.parametrize("mode", ["joint", "independent"])
def test_decisions(server, mode):
    r = _post(server, {"context": CONTEXT, "questions": QUESTIONS, "mode": mode})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "clover.decisions" and d["mode"] == mode
    assert [a["index"] for a in d["answers"]] == [0, 1, 2]
    for a, q in zip(d["answers"], QUESTIONS):
        assert a["option"] in q["options"] and q["options"][a["option_index"]] == a["option"]
        assert 0 < a["probability"] <= 1 and abs(sum(a["probabilities"].values()) - 1) < 1e-4
        assert a["probabilities"][a["option"]] == a["probability"]
        if mode == "independent":  # one slot, one pass: the engine's greedy choice is the argmax
            assert a["probability"] == max(a["probabilities"].values())
    t = d["timing"]
    assert t["requests"] == (1 if mode == "joint" else 3) and t["wall_s"] > 0
    assert d["blocks"] == 1 and d["usage"]["completion_tokens"] == (11 if mode == "joint" else 3)


def test_decision_errors(server):
    nine = [{"question": f"Q{i}?", "options": ["yes", "no"]} for i in range(9)]
    r = _post(server, {"context": CONTEXT, "questions": nine})
    assert r.status_code == 400 and "at most 8" in r.json()["error"]["message"]
    r = _post(server, {"context": CONTEXT, "questions": [{"question": "Q?", "options": ["yes", "not\nsure"]}]})
    err = r.json()["error"]
    assert r.status_code == 400 and "line break" in err["message"] and err["param"] == "questions.0.options"
    for bad in (
        {"questions": []},
        {"questions": [{"question": "Q?", "options": ["yes"]}]},
        {"questions": [{"question": "Q?", "options": ["yes", "yes"]}]},
        {"questions": QUESTIONS, "mode": "both"},
        {"questions": QUESTIONS, "threshold": 2},
        {"questions": QUESTIONS, "block_size": 999},
    ):
        r = _post(server, {"context": CONTEXT, **bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["message"]


def _group():
    return DecisionGroup(CONTEXT, [Question(q["question"], q["options"]) for q in QUESTIONS])


def test_joint_layout_is_the_training_format(tokenizer, tiny_model):
    """prompt + forced tokens (slots filled) == the tokens of the rendered joint chat."""
    g = _group()
    (plan,) = plan_joint(tokenizer, tiny_model.config, g)
    choice = [1, 0, 2]
    gen = list(plan.forced)
    for s, c in zip(plan.slots, choice):
        gen[s.index] = s.option_ids[c]
    gold = DecisionGroup(g.context, [Question(q.text, q.options, c) for q, c in zip(g.questions, choice)])
    text = render(decision_messages(gold, "joint"))
    assert tokenizer.encode(text).__getitem__(slice(0, len(plan.prompt_ids) + len(gen))) == plan.prompt_ids + gen
    assert answer_text(gold) == "1: no\n2: yes\n3: reroute"
    assert len(plan.prompt_ids) % plan.block_size + len(gen) <= plan.block_size  # all slots in one block


@torch.inference_mode()
def test_independent_probabilities_equal_a_full_forward(tokenizer, tiny_model):
    """Each answer's probabilities (the engine's logprobs over the slot) == softmax over the
    options of a plain full forward of prompt + masked slot (no caches, no engine)."""
    engine = Engine(tiny_model, tokenizer)
    r = decide_sync(engine, tokenizer, _group(), "independent")
    cfg = tiny_model.config
    for a, plan in zip(r["answers"], plan_independent(tokenizer, cfg, _group())):
        bs, P = plan.block_size, len(plan.prompt_ids)
        start = P // bs * bs
        x = torch.tensor([plan.prompt_ids + [cfg.mask_token_id] * (start + bs - P)])
        logits = tiny_model.forward_train(x, x, bs).logits[0, P]
        want = logits[plan.slots[0].option_ids].float().softmax(-1).tolist()
        got = [a["probabilities"][o] for o in _group().questions[plan.slots[0].question].options]
        assert got == pytest.approx(want, abs=1e-4)


MULTI = [
    {"question": "What should the operator do?", "options": ["approve", "escalate to supervisor", "reject"]},
    {"question": "Is the flight safe?", "options": ["yes", "no", "not sure"]},  # "no" is a prefix of "not sure"
    {"question": "Risk level?", "options": ["low", "medium", "high"]},
]


@pytest.mark.parametrize("mode", ["joint", "independent"])
def test_options_of_several_tokens_take_the_grammar_path(server, tokenizer, tiny_model, mode):
    """Options that are several tokens for the tokenizer: decoded under a choice grammar, so every
    answer is one of its options whatever the model (here random weights)."""
    g = DecisionGroup(CONTEXT, [Question(q["question"], q["options"]) for q in MULTI])
    plans = (plan_joint if mode == "joint" else plan_independent)(tokenizer, tiny_model.config, g)
    assert all(p.layout is not None for p in plans) and len(plans) == (1 if mode == "joint" else 3)
    grammar = plans[0].params().grammar
    if mode == "joint":
        assert grammar.accepts("escalate to supervisor\n2: not sure\n3: low") and grammar.accepts(
            "reject\n2: no\n3: high"
        )
        assert not grammar.accepts("reject\n2: maybe\n3: high") and not grammar.accepts("reject\n2: no")
    for body in (
        {"context": CONTEXT, "questions": MULTI, "mode": mode},
        {"context": CONTEXT, "questions": MULTI, "mode": mode, "threshold": 0.3},
    ):
        r = _post(server, body)
        assert r.status_code == 200, r.text
        d = r.json()
        assert [a["index"] for a in d["answers"]] == [0, 1, 2]
        for a, q in zip(d["answers"], MULTI):
            assert a["option"] in q["options"] and q["options"][a["option_index"]] == a["option"]
            assert 0 < a["probability"] <= 1 and a["probabilities"] == {a["option"]: a["probability"]}
