import json

import pytest

from clover.data import chat, corpus, decisions
from clover.data.tools import AIRSPACE_TOOLS


@pytest.fixture(scope="module")
def tok():
    from clover.data.tokenizer import build_default_tokenizer

    return build_default_tokenizer(n_texts=1500)


def test_generator_is_deterministic_per_seed():
    assert corpus.generate("train", 50, seed=3) == corpus.generate("train", 50, seed=3)
    assert corpus.generate("train", 50, seed=3) != corpus.generate("train", 50, seed=4)


def test_splits_do_not_overlap():
    # chit-chat ("hello") is a small closed set shared by all splits; everything else must differ
    users = {
        s: {e["messages"][0]["content"] for e in corpus.generate(s, 400, seed=1) if e["kind"] != "text"}
        for s in corpus.SPLITS
    }
    assert not users["train"] & users["test"] and not users["train"] & users["validation"]
    assert not set(corpus.zone_names("train")) & set(corpus.zone_names("test"))
    assert not set(corpus.targets("train")) & set(corpus.targets("test"))
    train_ids = {c["arguments"].get("drone_id") for e in corpus.generate("train", 400) for c in corpus.gold_calls(e)}
    test_ids = {c["arguments"].get("drone_id") for e in corpus.generate("test", 400) for c in corpus.gold_calls(e)}
    assert not (train_ids - {None}) & (test_ids - {None})


def test_unit_and_time_conventions():
    import random

    rng = random.Random(0)
    seen_units, seen_times = {}, {}
    for _ in range(3000):
        txt, m = corpus.radius(rng, "test")
        seen_units[txt] = m
        t, g = corpus.time_surface(rng, "test")
        seen_times[t] = g
    expect = {"3000 ft": 914, "2.5 km": 2500, "1 nm": 1852, "800m": 800}
    for k, v in expect.items():
        if k in seen_units:
            assert seen_units[k] == v
    assert all(isinstance(v, int) for v in seen_units.values())
    for k, v in {"6pm": "18:00", "6 pm": "18:00", "half past nine in the morning": "09:30", "noon": "12:00"}.items():
        if k in seen_times:
            assert seen_times[k] == v
    assert any("half past" in t for t in seen_times) and any("pm" in t for t in seen_times)
    assert corpus.coord_surface(random.Random(1), -33.8688, 151.2093) in {
        "33.8688 S 151.2093 E",
        "33.8688S 151.2093E",
        "lat -33.8688 lon 151.2093",
        "(-33.8688, 151.2093)",
        "33.8688 S, 151.2093 E",
        "-33.8688, 151.2093",
        "coordinates -33.8688 151.2093",
        "position 33.8688S/151.2093E",
    }


def test_drone_ids_are_normalised():
    for e in corpus.generate("train", 300):
        for c in corpus.gold_calls(e):
            if "drone_id" in c["arguments"]:
                assert c["arguments"]["drone_id"].startswith("D-") and c["arguments"]["drone_id"][2:].isdigit()


def test_score_is_order_insensitive_and_number_aware():
    a = [{"name": "f", "arguments": {"x": 1, "y": "a"}}, {"name": "g", "arguments": {}}]
    b = [{"name": "g", "arguments": {}}, {"name": "f", "arguments": {"y": "a", "x": 1.0}}]
    assert corpus.score_tool_calls(a, b)
    assert not corpus.score_tool_calls(a, b[:1])
    assert not corpus.score_tool_calls(a, [b[0], {"name": "f", "arguments": {"x": 2, "y": "a"}}])


def test_render_parse_round_trip_for_every_kind():
    kinds = set()
    for e in corpus.generate("validation", 300, seed=2):
        kinds.add(e["kind"])
        segs = chat.render_segments(e["messages"], e["tools"])
        answer = next(t for t, is_t in segs if is_t)
        content, calls = chat.parse_assistant(answer)
        assert corpus.score_tool_calls(calls, corpus.gold_calls(e))
    assert {"tool_call", "compound", "text", "tool_result", "missing_tool"} <= kinds


def test_parse_is_robust():
    t = '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n<tool_call>{bad json}</tool_call> hi <tool_call>{"name": "b", "arguments": {}}'
    content, calls = chat.parse_assistant(t)
    assert [c["name"] for c in calls] == ["a", "b"] and content == "hi"


def test_arbitrary_tool_schemas_render():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "q": {"type": "string"},
                        "filters": {
                            "type": "object",
                            "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
                        },
                        "mode": {"enum": ["a", "b"]},
                        "n": {"type": ["integer", "null"]},
                    },
                    "required": ["q"],
                },
            },
        },
        {"type": "function", "function": {"name": "ping"}},
    ]
    s = chat.render([{"role": "user", "content": "x"}], tools, add_generation_prompt=True)
    assert "search(q: string, filters?: {tags: array[string]}, mode?: a|b, n?: integer|null)" in s and "ping()" in s
    assert s.endswith("<|im_start|>assistant\n")


def test_tokenizer_round_trip_digits_names_fragments(tok):
    for s in ["héllo wörld ✈ 123", "D-917 at 47.3769 N", '{"name": "lift_no_fly_zone"}']:
        assert tok.decode(tok.encode(s)) == s
    assert [tok.id_to_token(i) for i in tok.encode("2025")] == ["2", "0", "2", "5"]
    assert tok.encode("Harbor")[0] in tok.encode(' "Harbor')  # same token in message and JSON
    for frag in ['{"name": "', '", "arguments": {', "create_no_fly_zone", '"zone_name": "']:
        assert len(tok.encode(frag)) == 1, frag
    assert tok.mask_token_id is not None and tok.eos_token_id == tok.token_to_id("<|im_end|>")


def test_tools_list_matches_the_issue():
    names = [t["function"]["name"] for t in AIRSPACE_TOOLS]
    assert names == [
        "create_no_fly_zone",
        "lift_no_fly_zone",
        "update_waypoint",
        "assign_mission",
        "recall_drone",
        "get_drone_status",
    ]
    req = {t["function"]["name"]: t["function"]["parameters"]["required"] for t in AIRSPACE_TOOLS}
    assert req["create_no_fly_zone"] == ["zone_name", "lat", "lon", "radius_m"]
    json.dumps(AIRSPACE_TOOLS)


def test_decision_groups_are_consistent():
    for g in decisions.generate_groups("test", 50):
        assert 2 <= len(g.questions) <= 6
        text = decisions.joint_answer(g)
        assert decisions.parse_joint(text, g.questions) == [q.answer for q in g.questions]
    a = {g.context for g in decisions.generate_groups("train", 200)}
    b = {g.context for g in decisions.generate_groups("test", 200)}
    assert not a & b
