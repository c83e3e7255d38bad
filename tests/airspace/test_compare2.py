"""Comparing models of either airspace task: calls scored by what they do (lengths in metres)."""

from __future__ import annotations

from clover.airspace.compare import case_chats, in_metres_calls, score, validation_chats


def test_either_length_form_is_the_same_call():
    a = in_metres_calls(
        [
            {
                "name": "create_no_fly_zone",
                "arguments": {"zone_name": "Z", "lat": 1.5, "lon": 2.5, "radius": 1.5, "radius_unit": "NM"},
            }
        ]
    )
    b = in_metres_calls(
        [
            {
                "function": {
                    "name": "create_no_fly_zone",
                    "arguments": '{"zone_name": "Z", "lat": 1.5, "lon": 2.5, "radius_m": 2778}',
                }
            }
        ]
    )
    assert a == b
    bad = [{"name": "create_no_fly_zone", "arguments": {"radius": "far", "radius_unit": "km"}}]
    assert in_metres_calls(bad)[0]["arguments"] == bad[0]["arguments"]  # unreadable: kept, matches nothing


def test_the_hand_written_messages_read_as_chats():
    chats = case_chats("benchmarks/newcomer_messages.jsonl")
    assert len(chats) == 40 and sum(not c["messages"][-1]["tool_calls"] for c in chats) == 5


class _Echo:
    """A fake model that answers every chat with the calls in ``answers`` (by user message)."""

    def __init__(self, task: str, answers: dict):
        self.config = type("C", (), {"extra": {"task": task}})()
        self.answers = answers
        self.tools_seen = []

    def chat(self, convs, tools=None, **_):
        self.tools_seen.append(tools)
        outs = []
        for conv in convs:
            calls = self.answers.get(conv[-1]["content"], [])
            msg = {"role": "assistant", "content": "" if calls else "words", "tool_calls": calls or None}
            outs.append({"choices": [{"message": msg}], "clover": {"tokens": 8, "forward_passes": 4}})
        return outs


def test_score_offers_each_model_its_own_tools_and_reads_calls_in_metres():
    chats = validation_chats(30)
    gold = {c["messages"][-2]["content"]: c["messages"][-1].get("tool_calls") or [] for c in chats}
    perfect = _Echo("airspace2", gold)  # the task's former name, as the bundled model records it
    res = score(perfect, chats)
    assert res["exact"] == 1.0 and res["tpf"] == 2.0 and res["tokens_per_s"] > 0
    assert all(
        "radius" in t[0]["function"]["parameters"]["properties"]
        for t in perfect.tools_seen
        if t and t[0]["function"]["name"] == "create_no_fly_zone"
    )
    from clover.airspace.tools import AIRSPACE_TOOLS
    from clover.data import task as seam

    seam.register(seam.Task(name="metres-test", summary="the tools in whole metres", tools=lambda: AIRSPACE_TOOLS))
    try:  # a model of another task is offered that task's tools
        old = _Echo("metres-test", {})
        score(old, chats)
    finally:
        seam.TASKS.pop("metres-test")
        seam._loaded.pop("metres-test")
    assert old.tools_seen and all(
        "radius_m" in t[0]["function"]["parameters"]["properties"]
        for t in old.tools_seen
        if t and t[0]["function"]["name"] == "create_no_fly_zone"
    )
