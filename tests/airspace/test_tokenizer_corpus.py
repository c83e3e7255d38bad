"""The first corpus (what the tokenizer is trained on): deterministic, split-disjoint, and its gold
answers follow the conventions."""

import json
import random
import re
import subprocess
import sys

import pytest

from clover.airspace import decision_groups
from clover.airspace import tokenizer_corpus as corpus
from clover.airspace.calls import gold_calls
from clover.airspace.tools import tool_by_name
from clover.data.chat import render


@pytest.fixture(scope="module")
def by_split():
    return {s: corpus.generate(s, 1500, seed=11) for s in corpus.SPLITS}


def _user_texts(exs):
    return [m["content"] for e in exs for m in e["messages"] if m["role"] == "user"]


def test_deterministic_per_seed_and_across_processes():
    a = corpus.generate("train", 60, seed=3)
    assert a == corpus.generate("train", 60, seed=3) and a != corpus.generate("train", 60, seed=4)
    code = (
        "import json; from clover.airspace import tokenizer_corpus as c; "
        "print(json.dumps(c.generate('test', 30, seed=5)))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    ).stdout
    assert json.loads(other) == corpus.generate("test", 30, seed=5)  # no dependence on hash seeds


def test_splits_are_disjoint(by_split):
    users = {s: {t.lower() for t in _user_texts(exs)} for s, exs in by_split.items()}
    assert not users["train"] & users["test"]
    assert not users["train"] & users["validation"]
    assert not users["validation"] & users["test"]
    pools = [set(corpus.heldout_words(s)) for s in corpus.SPLITS]
    assert not (pools[0] & pools[1] or pools[0] & pools[2] or pools[1] & pools[2])


def test_heldout_entities_never_reach_train(by_split):
    train_text = "\n".join(render(e["messages"], e["tools"]) for e in by_split["train"])
    train_text += "\n".join(render(e["messages"]) for e in decision_groups.decision_examples("train", 300))
    train_words = set(re.findall(r"\w+", train_text.lower()))
    for split in ("validation", "test"):
        for w in corpus.heldout_words(split):  # a multi-word object ("wind farm") is held out as a phrase
            assert (w.lower() not in train_words) if " " not in w else (w.lower() not in train_text.lower()), w
    ids = {
        s: {
            c["arguments"]["drone_id"]
            for e in exs
            for t in range(2)
            for c in gold_calls(e, t)
            if "drone_id" in c["arguments"]
        }
        for s, exs in by_split.items()
    }
    nums = {s: {int(d[2:]) for d in v} for s, v in ids.items()}
    assert max(nums["train"]) < 800 and min(nums["test"]) >= 900 and all(800 <= n < 900 for n in nums["validation"])


def test_heldout_phrasing_only_outside_train(by_split):
    assert not any(e["novel"] for e in by_split["train"])
    novel = [e for e in by_split["test"] if e["novel"]]
    assert 0.1 < len(novel) / len(by_split["test"]) < 0.7
    train_users, test_users = "\n".join(_user_texts(by_split["train"])), "\n".join(_user_texts(by_split["test"]))
    for held in (
        "deactivate the no-fly zone",
        "relocate waypoint",
        "close the airspace around",
        "any news from",
        "recommend a museum",
    ):  # the last template of a list: test/validation only
        assert held not in train_users.lower() and held in test_users.lower(), held
    # only pairs are held out: each form is still trained with most templates
    templates = [f"create{i}" for i in range(11)]
    for forms in (corpus.time_forms(16, 45), corpus.coord_forms("1.5", "2.5"), corpus.drone_forms(7)):
        for fid, *_ in forms:
            assert sum(corpus.heldout_combo(t, fid, forms) for t in templates) <= 6, fid
        assert not any(corpus.heldout_combo(t, forms[0][0], forms) for t in templates)


def test_hand_checked_conventions():
    assert corpus.to_metres("3000", "ft") == 914 and corpus.to_metres("3,000", "ft") == 914
    assert corpus.to_metres("2.5", "km") == 2500 and corpus.to_metres("1", "nm") == 1852
    assert corpus.to_metres("800", "m") == 800 and corpus.to_metres("0.5", "nm") == 926
    assert corpus.to_metres("5", "ft") == 2  # 1.524 -> 2; exact halves round up: 0.5 km of 1 m steps below
    assert corpus.to_metres("0.0025", "km") == 3
    times = {text: gold for h in range(24) for m in range(60) for _, text, gold in corpus.time_forms(h, m)}
    for text, gold in {
        "6pm": "18:00",
        "6 pm": "18:00",
        "18:00": "18:00",
        "1800": "18:00",
        "1800 hrs": "18:00",
        "half past nine in the morning": "09:30",
        "quarter to 5 pm": "16:45",
        "noon": "12:00",
        "midnight": "00:00",
        "12am": "00:00",
        "12pm": "12:00",
        "quarter to 12 am": "23:45",
        "six o'clock in the evening": "18:00",
        "quarter past 7 am": "07:15",
        "9:05 pm": "21:05",
        "9:30": "09:30",
        "half past two in the afternoon": "14:30",
    }.items():
        assert times[text] == gold, text
    forms = dict(corpus.coord_forms("-33.8688", "151.2093"))
    assert forms["hemi_comma"] == "33.8688 S, 151.2093 E" and forms["paren"] == "(-33.8688, 151.2093)"
    assert dict(corpus.coord_forms("47.3769", "8.5417"))["hemi"] == "47.3769 N 8.5417 E"
    assert dict(corpus.coord_forms("47.3769", "-8.5417"))["lat_lon"] == "lat 47.3769 lon -8.5417"
    assert {t for _, t in corpus.drone_forms(17)} >= {"drone 17", "d17", "D-17", "UAV 17", "uav-17", "unit 17"}
    rng, ctx = random.Random(0), None
    ctx = corpus.Ctx(rng, "train")
    seen = {}
    for _ in range(400):
        seen.update([corpus.drone_surface(ctx, "recall0")])
    assert all(gold == "D-" + re.search(r"\d+", text).group() for text, gold in seen.items())
    units = {}
    for _ in range(3000):
        for _, text, gold in corpus.radius_forms(rng):
            units[text] = gold
    assert all(isinstance(v, int) for v in units.values())
    for text, gold in {"2.5 km": 2500, "800m": 800, "1 nm": 1852, "3000 ft": 914, "2 nautical miles": 3704}.items():
        if text in units:
            assert units[text] == gold


def test_gold_arguments_are_copied_from_the_message(by_split):
    for exs in by_split.values():
        for e in exs:
            user = _dialogue(e)[0]["content"]
            for c in gold_calls(e):
                a = c["arguments"]
                for k in ("zone_name", "target"):
                    if k in a:
                        assert a[k] in user, (a[k], user)
                if "drone_id" in a:
                    assert re.fullmatch(r"D-\d+", a["drone_id"]) and re.search(
                        rf"(?<!\d){a['drone_id'][2:]}(?!\d)", user
                    )
                for k in ("lat", "lon"):
                    if k in a:  # same digits as written; S/W or a minus sign gives the sign
                        assert isinstance(a[k], float) and json.dumps(abs(a[k])) in user
                        assert len(json.dumps(abs(a[k])).split(".")[1]) <= 4
                for k in ("start_time", "end_time"):
                    if k in a:
                        assert re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", a[k])
                for k in ("radius_m", "altitude_m", "waypoint_index"):
                    if k in a:
                        assert isinstance(a[k], int) and a[k] > 0
                if c["name"] == "assign_mission":
                    assert a["mission_type"] in corpus.MISSION_TYPES
                assert list(a) == [k for k in tool_by_name(c["name"])["function"]["parameters"]["properties"] if k in a]


def test_kinds_tools_and_calls_per_message(by_split):
    exs = by_split["train"]
    kinds = {k: [e for e in exs if e["kind"] == k] for k in corpus.KINDS}
    assert all(kinds[k] for k in corpus.MIX)
    assert all(len(gold_calls(e)) == 1 for e in kinds["tool_call"])
    assert {len(gold_calls(e)) for e in kinds["compound"]} == {2, 3, 4, 5}
    for e in kinds["missing_tool"]:
        offered = {t["function"]["name"] for t in e["tools"] or []}
        assert not any(n.replace("_", " ") in offered for n in offered) and "can't" in _dialogue(e)[1]["content"]
    for e in kinds["tool_call"] + kinds["compound"]:
        offered = {t["function"]["name"] for t in e["tools"]}
        assert {c["name"] for c in gold_calls(e)} <= offered
    assert any(len(e["tools"]) < 6 for e in kinds["tool_call"])
    for e in kinds["tool_result"]:
        ids = [c["id"] for c in _dialogue(e)[1]["tool_calls"]]
        assert [m["tool_call_id"] for m in e["messages"] if m["role"] == "tool"] == ids
        assert e["messages"][-1]["role"] == "assistant" and e["messages"][-1]["content"]
    assert max(len(gold_calls(e)) for e in corpus.generate("train", 300, max_actions=2)) == 2
    assert max(len(gold_calls(e)) for e in corpus.generate("train", 300, max_actions=1)) == 1
    with pytest.raises(ValueError):
        corpus.generate("dev", 1)


def test_train_coins_entity_words_that_no_pool_holds():
    """Half of the train entity words are made up (names must be copied, not recalled); they
    never collide with a pool word of any split, and validation/test never coin."""
    import random

    from clover.airspace import phrasing

    rng = random.Random(0)
    words = {phrasing.coined_word(rng) for _ in range(2000)}
    assert len(words) > 1500 and not words & phrasing._pool_words()
    pool = {w.lower() for s in corpus.SPLITS for x in corpus.heldout_words(s) for w in x.split()}
    for split in ("validation", "test"):
        for _ in range(200):
            name = phrasing.zone_name(rng, split)
            known = pool | phrasing._pool_words() | {"zone"}
            assert all(w.lower() in known or not w.isalpha() for w in name.replace("-", " ").split()), name
    coined = [phrasing.zone_name(rng, "train") for _ in range(400)]
    fresh = [z for z in coined if any(w.lower() not in phrasing._pool_words() and w.isalpha() for w in z.split())]
    assert 0.3 < len(fresh) / len(coined) < 0.95


def test_train_names_coined_from_the_tokenizers_word_pieces():
    """With the tokenizer's word pieces, train names put far more of the vocabulary's pieces
    where the model must copy them (a piece no train name holds was never copied: the stage-11
    model wrote "Quebec" as "ofebec"); a one-piece word is that very token; validation and test
    names are unchanged, and no coined word is a pool word of any split."""
    import random

    from clover.airspace import phrasing
    from clover.data import default_model_dir
    from clover.data.tokenizer import CloverTokenizer

    tok = CloverTokenizer.load(default_model_dir())
    pieces = tok.word_pieces()
    assert pieces and all(p.isalpha() and len(tok.encode(p)) == 1 for p in pieces)
    assert not {tok.token_to_id(p) for p in pieces} & set(tok.tok.get_added_tokens_decoder())

    def copied(use: tuple) -> set[int]:
        rng, ids = random.Random(3), set()
        for _ in range(1500):
            for name in (phrasing.zone_name(rng, "train", use), phrasing.target_name(rng, "train", use)):
                ids.update(tok.encode(" " + name))
        return {i for i in ids if tok.decode([i]) in set(pieces)}

    assert len(copied(pieces)) > 1.5 * len(copied(()))
    rng = random.Random(4)
    words = [phrasing.coined_word(rng, pieces) for _ in range(3000)]
    assert not {w.lower() for w in words} & phrasing._pool_words()
    assert sum(w in pieces for w in words) > 600  # one-piece words: exactly one token each
    for split in ("validation", "test"):
        a, b = random.Random(5), random.Random(5)
        assert [phrasing.zone_name(a, split, pieces) for _ in range(50)] == [
            phrasing.zone_name(b, split) for _ in range(50)
        ]


def _dialogue(e: dict) -> list[dict]:
    """The messages after a client-style system prompt, if the example has one."""
    return [m for m in e["messages"] if m["role"] != "system"]


def test_a_share_of_examples_carries_a_system_prompt_from_its_own_split():
    from clover.airspace.phrasing import SYSTEM_PROMPTS, SYSTEM_SHARE, _pool

    seen = {}
    for split in corpus.SPLITS:
        exs = corpus.generate(split, 400, seed=3)
        systems = [e["messages"][0]["content"] for e in exs if e["messages"][0]["role"] == "system"]
        assert abs(len(systems) / len(exs) - SYSTEM_SHARE) < 0.08
        assert all(m["role"] != "system" for e in exs for m in e["messages"][1:])
        assert set(systems) <= set(_pool(SYSTEM_PROMPTS, split))
        seen[split] = set(systems)
    assert not seen["train"] & (seen["validation"] | seen["test"])  # held-out prompts are never trained on


def test_tool_result_summaries_read_as_sentences():
    """A summary ends with one period and counts in words that agree ("ETA 1 minute", "ETA 5
    minutes"), never an abbreviation's period before the sentence's ("ETA 2 min..")."""
    import random

    from clover.airspace.replies import tool_result

    for seed in range(300):
        result, text = tool_result(random.Random(seed), "recall_drone", {"drone_id": "D-17"})
        if "eta_min" in result:
            n = result["eta_min"]
            assert text.endswith(f"ETA {n} minute{'' if n == 1 else 's'}."), text
        assert not text.endswith(".."), text
