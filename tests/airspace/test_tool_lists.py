"""``clover eval airspace2 --tool-lists varied``: the tool lists users pass, drawn per chat from a
seed, and their figures."""

import json
import subprocess
import sys
from types import SimpleNamespace

from clover.airspace.calls import answers, gold_calls
from clover.airspace.chats import load_split
from clover.airspace.extraction_tools import EXTRACTION_TOOLS
from clover.airspace.scoring import eval_chats2
from clover.airspace.textscore import reply_words_right
from clover.airspace.tool_lists import (
    ARG_PHRASINGS,
    KINDS,
    PHRASINGS,
    tool_list_figures,
    varied_set,
)
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data.chat import assistant_text


def _names(tools):
    return [t["function"]["name"] for t in tools]


def _shape(tool):
    """What the grammar and the scoring read: names, types, enums, required, x-grounded."""
    params = tool["function"]["parameters"]
    keep = ("type", "enum", "x-grounded")
    props = {k: {f: v[f] for f in keep if f in v} for k, v in params["properties"].items()}
    return tool["function"]["name"], props, params["required"]


def test_the_variations_are_the_same_for_a_seed_and_differ_between_seeds():
    exs = eval_chats2("validation", 20)[0]
    assert varied_set(exs, seed=3) == varied_set(exs, seed=3)
    assert varied_set(exs, seed=3) != varied_set(exs, seed=4)
    chats = varied_set(exs)
    assert [c["variation"] for c in chats] == [k for k in KINDS for _ in exs]


def test_a_subset_holds_the_gold_calls_tools_and_the_missing_kind_does_not():
    exs = eval_chats2("validation", 40)[0]
    sizes = set()
    for c in varied_set(exs):
        names, needed = set(_names(c["tools"])), {g["name"] for g in gold_calls(c)}
        if c["variation"] == "missing":
            orig = next(e for e in exs if e["messages"][: len(c["messages"]) - 1] == c["messages"][:-1])
            assert not names & {g["name"] for g in gold_calls(orig)}
        else:
            assert needed and needed <= names
        if c["variation"] in ("subset", "varied"):
            sizes.add(len(names))
    assert len(sizes) > 2  # sometimes extra tools, sometimes only the needed ones
    orders = {tuple(_names(c["tools"])) for c in varied_set(exs) if c["variation"] == "order"}
    assert len(orders) > 5


def test_reworded_and_detailed_schemas_keep_names_types_and_grounding():
    exs = eval_chats2("validation", 20)[0]
    standard = {t["function"]["name"]: _shape(t) for t in EXTRACTION_TOOLS}
    for c in varied_set(exs):
        for t in c["tools"]:
            assert _shape(t) == standard[t["function"]["name"]]
        if c["variation"] in ("reworded", "varied"):
            assert all(t["function"]["description"] in PHRASINGS[t["function"]["name"]] for t in c["tools"])
        if c["variation"] in ("schema", "varied"):
            fn = c["tools"][0]["function"]
            assert fn["strict"] is True and fn["parameters"]["additionalProperties"] is False
            assert "title" in fn["parameters"] and all("title" in p for p in fn["parameters"]["properties"].values())
    assert EXTRACTION_TOOLS[0]["function"].get("strict") is None  # the standard list is left as it was


def test_the_phrasings_are_held_out_from_the_corpus():
    seen = set()
    for tools in (AIRSPACE_TOOLS, EXTRACTION_TOOLS, *(e["tools"] or [] for e in load_split("train", 300))):
        for t in tools:
            seen.add(t["function"]["description"])
            seen |= {p.get("description") for p in t["function"]["parameters"]["properties"].values()}
    phrasings = {p for ps in PHRASINGS.values() for p in ps} | {p for ps in ARG_PHRASINGS.values() for p in ps}
    assert not phrasings & seen
    assert set(PHRASINGS) == set(_names(EXTRACTION_TOOLS))
    assert set(ARG_PHRASINGS) == {k for t in EXTRACTION_TOOLS for k in t["function"]["parameters"]["properties"]}


def test_the_missing_kind_is_answered_in_words_and_scored_so():
    exs = eval_chats2("validation", 10)[0]
    chats = varied_set(exs)
    missing = [c for c in chats if c["variation"] == "missing"]
    for c in missing:
        assert not gold_calls(c) and answers(c)[0]["content"].startswith("Sorry, I can't")
        assert reply_words_right(answers(c)[0]["content"], c)
    gold = [SimpleNamespace(text=assistant_text(answers(c)[0])) for c in chats]
    res = tool_list_figures(gold, chats)
    assert set(res) == {*KINDS, "missing_declined"} and set(res.values()) == {1.0}
    call = '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-0"}}</tool_call>'
    res = tool_list_figures([SimpleNamespace(text=call)] * len(chats), chats)
    assert res["missing"] == res["missing_declined"] == 0.0
    # words that are not the corpus's decline: no call and words, not the decline
    res = tool_list_figures([SimpleNamespace(text="I cannot do that.")] * len(chats), chats)
    assert res["missing"] == 1.0 and res["missing_declined"] == 0.0


def test_eval_airspace2_reports_exact_match_per_tool_list_kind():
    cmd = [sys.executable, "-m", "clover", "eval", "airspace2", "--split", "validation", "--n", "3"]
    cmd += ["--groups", "0", "--text", "0", "--multiturn", "0", "--plain", "0", "--tool-lists", "varied", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert set(res["tool_lists"]) == {"standard", *KINDS, "missing_declined"} and res["tool_lists_n"] == 3
    assert res["tool_lists"]["standard"] == res["exact_match"]
    assert all(0 <= v <= 1 for v in res["tool_lists"].values())
    assert "note: 'airspace2' is now called 'airspace'" in r.stderr  # the former name, for one release
    r = subprocess.run([*cmd[:4], "airspace", *cmd[5:]], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "note:" not in r.stderr, r.stderr[-2000:]
    again = json.loads(r.stdout)
    assert again["tool_lists"] == res["tool_lists"] and again["exact_match"] == res["exact_match"]
