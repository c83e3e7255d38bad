"""Tool calls as the airspace task compares them: exact match and where a miss comes from."""

from clover.airspace.calls import field_scores, score_tool_calls


def test_score_tool_calls():
    a = [{"name": "f", "arguments": {"x": 1, "y": "a"}}, {"name": "g", "arguments": {}}]
    b = [{"name": "g", "arguments": {}}, {"name": "f", "arguments": {"y": "a", "x": 1.0}}]
    assert score_tool_calls(a, b) and score_tool_calls([], [])
    assert not score_tool_calls(a, b[:1])
    assert not score_tool_calls(a, a + a[:1])  # multisets: duplicates count
    assert not score_tool_calls(a, [b[0], {"name": "f", "arguments": {"x": 2, "y": "a"}}])
    assert not score_tool_calls([{"name": "f", "arguments": {"x": True}}], [{"name": "f", "arguments": {"x": 1}}])
    assert not score_tool_calls([{"name": "f", "arguments": {"x": "1"}}], [{"name": "f", "arguments": {"x": 1}}])
    openai = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1.0, "y": "a"}'}}]
    assert score_tool_calls(openai, a[:1])


def test_field_scores_say_where_a_miss_comes_from():
    zone = {"zone_name": "Alpha", "lat": 1.5, "lon": 2, "radius_m": 300}
    gold = [
        {"name": "recall_drone", "arguments": {"drone_id": "D-7"}},
        {"name": "create_no_fly_zone", "arguments": zone},
    ]
    assert field_scores(gold[::-1], gold) == {
        "tool": [2, 2],
        "drone_id": [1, 1],
        "zone_name": [1, 1],
        "lat": [1, 1],
        "lon": [1, 1],
        "radius_m": [1, 1],
        "no_extra_args": [2, 2],
        "call_count": [1, 1],
    }
    wrong = [
        {
            "name": "create_no_fly_zone",
            "arguments": {"zone_name": "Alpha", "lat": 1.5, "lon": 2.0, "radius_m": 30, "end_time": "10:00"},
        }
    ]
    s = field_scores(wrong, gold)
    assert s["tool"] == [1, 2] and s["drone_id"] == [0, 1] and s["radius_m"] == [0, 1] and s["lon"] == [1, 1]
    assert s["no_extra_args"] == [0, 1] and s["call_count"] == [0, 1]
    assert field_scores([], []) == {"call_count": [1, 1]}
