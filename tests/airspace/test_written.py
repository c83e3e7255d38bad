"""Values as written in the corpus (``chats.written_chat``), tool lists drawn as users pass theirs
(``tool_lists.drawn_tools``), and the recipe that trains on both."""

import hashlib
import json
import random

import pytest
import regex

from clover.airspace import chats as corpus
from clover.airspace.calls import gold_calls
from clover.airspace.compare import in_metres_calls
from clover.airspace.evaluate import ungrounded_args
from clover.airspace.extraction_tools import EXTRACTION_TOOLS, PATTERNS, WRITTEN_TOOLS, written_form
from clover.airspace.replies import declined
from clover.airspace.tool_lists import called, drawn_tools
from clover.airspace.values import as_written
from clover.engine.grammar.grounding import source_texts

WRITTEN_KEYS = ("drone_id", "start_time", "end_time", "radius", "altitude")


def _calls(m: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []]


@pytest.fixture(scope="module")
def train_chats():
    rng = random.Random(11)
    return (
        corpus.generate("train", 1500)
        + [corpus.multi_turn(rng, "train") for _ in range(300)]
        + [corpus.greeting(rng, "train") for _ in range(200)]
    )


def test_every_gold_value_as_written_is_a_span_the_world_reads_to_the_old_gold(train_chats):
    written = 0
    for ex in train_chats:
        w = corpus.written_chat(ex)
        assert w["written_spans"], ex["messages"]
        for i, (m0, m1) in enumerate(zip(ex["messages"], w["messages"])):
            user = "\n".join(m["content"] for m in ex["messages"][:i] if m["role"] == "user")
            said = "\n".join(str(m.get("content") or "") for m in ex["messages"][:i])
            for (name, old), (name1, new) in zip(_calls(m0), _calls(m1)):
                assert name == name1
                for k in set(WRITTEN_KEYS) & new.keys():
                    assert isinstance(new[k], str) and new[k] in (said if k == "drone_id" else user), (k, new, user)
                    written += 1
                assert "radius_unit" not in new and "altitude_unit" not in new
                for k in set(WRITTEN_KEYS) & new.keys():  # the pattern a copy is held to takes it
                    assert regex.search(PATTERNS[k], new[k], regex.ASCII), (k, new[k])
                read, problem = as_written(name, new)
                assert problem is None, (name, new, problem)
                assert in_metres_calls([{"name": name, "arguments": new}]) == in_metres_calls(
                    [{"name": name, "arguments": old}]
                )
    assert written > 2000


def test_every_gold_value_as_written_is_a_span_of_its_grounded_source(train_chats):
    """The written tools' grounded arguments ("#16", ".5 nm", "1250 hrs" of "1250 hrs-0045", "St.
    Tar's Pyna") are spans of their sources under the span rule (``grounding.span_edges``), and the
    grounded grammar accepts each gold call as written."""
    from clover.engine.grammar import json_grammar

    grammars: dict[str, object] = {}
    checked = 0
    for ex in train_chats:
        w = corpus.written_chat(ex)
        tools = {t["function"]["name"]: t for t in w["tools"] or []}
        for i, m in enumerate(w["messages"]):
            for name, args in _calls(m):
                src = source_texts(w["messages"][:i])
                n, bad = ungrounded_args([{"name": name, "arguments": args}], [tools[name]], src)
                assert bad == 0, (name, args, src["user"])
                g = grammars.setdefault(name, json_grammar(tools[name]["function"]["parameters"]))
                assert g.with_sources(src).accepts(json.dumps(args, ensure_ascii=False)), (name, args, src["user"])
                checked += n
    assert checked > 5000


def test_written_chat_offers_the_written_tools_in_the_chats_order():
    ex = next(e for e in corpus.generate("train", 200) if e["tools"] and len(e["tools"]) < 6)
    w = corpus.written_chat(ex)
    assert [t["function"]["name"] for t in w["tools"]] == [t["function"]["name"] for t in ex["tools"]]
    assert all(t in WRITTEN_TOOLS for t in w["tools"])
    assert written_form(None) is None


def test_the_written_tools_take_lengths_times_and_ids_as_grounded_strings():
    by = {t["function"]["name"]: t["function"]["parameters"] for t in WRITTEN_TOOLS}
    assert set(by) == {t["function"]["name"] for t in EXTRACTION_TOOLS}
    zone = by["create_no_fly_zone"]
    assert "radius_unit" not in zone["properties"] and "radius" in zone["required"]
    for k in ("radius", "start_time", "end_time"):
        assert zone["properties"][k]["type"] == "string" and zone["properties"][k]["x-grounded"] == "user"
    assert "altitude_unit" not in by["update_waypoint"]["properties"]
    for name in ("recall_drone", "get_drone_status", "assign_mission", "update_waypoint"):
        assert by[name]["properties"]["drone_id"]["x-grounded"] == "user"
    time = zone["properties"]["end_time"]["pattern"]
    for good in ("0030", "0045 hrs", "9 am", "6:30 p.m.", "18h30", "noon", "half past eight in the evening"):
        assert regex.search(time, good, regex.ASCII), good
    for bad in ("0030 PLEASE", "0:55 - over", "11 kilometres", "0000 and 5", "Stadium"):
        assert not regex.search(time, bad, regex.ASCII), bad
    length = zone["properties"]["radius"]["pattern"]
    assert all(regex.search(length, x, regex.ASCII) for x in ("2.5 km", "1,500 ft", "400-foot", ".5 nmi", "2 miles"))
    assert not any(regex.search(length, x, regex.ASCII) for x in ("2.5", "3 km radius", "two km"))
    drone = by["recall_drone"]["properties"]["drone_id"]["pattern"]
    assert all(regex.search(drone, x, regex.ASCII) for x in ("drone 17", "#901", "uav-941", "UAV 23", "d17", "D-17"))
    assert not any(regex.search(drone, x, regex.ASCII) for x in ("drone", "the big one", "d-849 return"))


# validation and test chats (and their multi-turn and greeting sets) as they were before the
# training-only draws (names past "&", tool lists, values as written) were added
SPLITS_SHA256 = "a050fc06e3b4f2edfc60a9f3261b9c0f3106ca7fc19d7a270f4f519fdea963bd"


def test_training_only_draws_leave_validation_and_test_as_they_were():
    h = hashlib.sha256()
    for s in ("validation", "test"):
        for e in corpus.load_split(s, 2000) + corpus.multiturn_set(s, 100) + corpus.greeting_set(s):
            h.update(json.dumps({k: e[k] for k in ("messages", "tools", "kind")}, sort_keys=True).encode())
    assert h.hexdigest() == SPLITS_SHA256


def test_drawn_tool_lists_hold_every_tool_the_calls_use_and_a_missing_tool_is_declined(train_chats):
    rng = random.Random(3)
    sizes, orders, missing = set(), 0, 0
    for ex in train_chats:
        if not ex.get("tools"):
            continue
        d = drawn_tools(ex, rng, missing=0.3)
        offered = [t["function"]["name"] for t in d["tools"] or []]
        if d["kind"] == "missing_tool" and ex["kind"] == "tool_call":
            missing += 1
            need = gold_calls(ex)[0]["name"]
            assert need not in offered
            assert d["messages"][-1] == {"role": "assistant", "content": declined(need)}
            continue
        assert called(d) <= set(offered), (called(d), offered)
        sizes.add(len(offered))
        orders += offered != [n for n in (t["function"]["name"] for t in EXTRACTION_TOOLS) if n in offered]
    assert missing > 20 and {1, 2, 3, 4, 5, 6} <= sizes and orders > 100


def test_the_recipe_refuses_an_unknown_values_form():
    from clover.airspace.diffusion_recipe import Airspace2Recipe

    r = Airspace2Recipe()
    r.values = "metres"
    with pytest.raises(ValueError, match="'units' or 'written'"):
        r.check()


def test_the_written_recipe_trains_on_written_values():
    from clover.airspace.diffusion_recipe import Airspace2Recipe, shaped

    r = Airspace2Recipe(values="written", tool_list_frac=1.0)
    rng = random.Random(0)
    ex = next(e for e in corpus.generate("train", 50) if e["kind"] == "tool_call" and "radius" in str(e["messages"]))
    out = shaped(ex, r, rng, "train")
    args = _calls(out["messages"][-1])[0][1]
    assert isinstance(args.get("radius", args.get("drone_id")), str) and "radius_unit" not in args
    assert shaped(ex, Airspace2Recipe(), rng, "train") is ex  # the default recipe: the chat as it was


@pytest.mark.parametrize(
    "said, kind",
    [
        (["Old Harbour Quay"], "right"),
        (["Old Harbour"], "cut_short"),
        (["Old Harbour Quay and"], "run_long"),
        (["Quay Gate"], "overlap"),
        (["Kessel Yard"], "other_span"),
        ([], "missing"),
    ],
)
def test_a_wrong_name_is_told_by_where_it_ends(said, kind):
    from clover.airspace.evaluate import name_edge

    assert name_edge("Old Harbour Quay", said) == kind


def test_a_model_of_values_as_written_is_evaluated_on_them():
    from types import SimpleNamespace

    from clover.airspace.scoring import SCORING, WRITTEN_SCORING, scoring_for

    model = lambda extra: SimpleNamespace(config=SimpleNamespace(extra=extra))
    assert scoring_for(model({"task": "airspace", "values": "written"})) is WRITTEN_SCORING
    assert scoring_for(model({"task": "airspace2"})) is SCORING  # the bundled model's
    exs = WRITTEN_SCORING.chats("validation", 20)[0]
    assert all(t in WRITTEN_TOOLS for e in exs for t in e["tools"] or [])
