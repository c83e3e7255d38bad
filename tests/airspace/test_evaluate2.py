"""``clover eval airspace2``: the second corpus's figures, and its scoring checked on gold answers."""

import json
import subprocess
import sys
from types import SimpleNamespace

from clover.airspace.calls import answers
from clover.airspace.evaluate import _figures
from clover.airspace.scoring import SCORING, eval_chats2, length_units, plain_prompts, reply_right2
from clover.data.chat import assistant_text


def _out(text):
    return SimpleNamespace(text=text, token_ids=[1, 2], stats={"forward_passes": 1})


def _gold_text(ex):
    return assistant_text(answers(ex)[0])


def test_gold_answers_score_full_marks_and_broken_ones_do_not():
    exs, texts, convs = eval_chats2("validation", 12, 6, 4)
    plains = plain_prompts("validation", 3)
    assert {e["kind"] for e in exs} <= {"tool_call", "compound"} and len(exs) == 12
    assert len(texts) == 6 and [e["kind"] for e in convs] == ["follow_up"] * 2 + ["multi_turn"] * 2
    gold = [_out(_gold_text(e)) for e in exs + texts + convs] + [_out(p["text"][len(p["prompt"]) :]) for p in plains]
    res = _figures(gold, (exs, texts, convs, plains), [], "ar", None, 1.0, SCORING)
    assert res["exact_match"] == res["text_acc"] == res["text_exact"] == res["multiturn_acc"] == 1.0
    assert res["plain_acc"] == 1.0 and set(res["names_copied"].values()) <= {1.0} and res["text_no_call"] == 1.0
    # every call dropped, a call for no drone instead of words or the right call, nothing continued
    call = '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-0"}}</tool_call>'
    bad = [_out("")] * len(exs) + [_out(call)] * (len(texts) + len(convs)) + [_out("")] * 3
    res = _figures(bad, (exs, texts, convs, plains), [], "ar", None, 1.0, SCORING)
    assert (
        res["exact_match"] == res["text_acc"] == res["multiturn_acc"] == res["plain_acc"] == res["text_no_call"] == 0.0
    )
    assert set(res["names_copied"].values()) <= {0.0}


def test_a_length_in_metres_is_the_same_call_as_the_length_with_its_unit():
    ex = {
        "messages": [
            {"role": "user", "content": "zone"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {
                            "name": "create_no_fly_zone",
                            "arguments": json.dumps(
                                {"zone_name": "Pier", "lat": 1.0, "lon": 2.0, "radius": 1.5, "radius_unit": "nm"}
                            ),
                        },
                    }
                ],
            },
        ],
        "kind": "tool_call",
        "tools": None,
        "names": [("place", "Pier")],
    }
    metres = (
        '<tool_call>{"name": "create_no_fly_zone", "arguments": {"zone_name": "Pier", "lat": 1.0, '
        '"lon": 2.0, "radius_m": 2778}}</tool_call>'
    )
    off = metres.replace("2778", "2777")
    res = _figures([_out(metres), _out(off)], ([ex, ex], [], [], []), [], "ar", None, 1.0, SCORING)
    assert res["exact_match"] == 0.5 and res["by_unit_arithmetic"] == {"nm": 0.5}
    assert length_units(ex, "") == "nm" and res["names_copied"] == {"trained": 1.0}


def test_a_reply_in_words_is_scored_by_its_words_not_by_having_words():
    ex = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Which drone?"}]}
    assert reply_right2("Which drone?", ex) and not reply_right2("Which zone?", ex)
    assert not reply_right2("  ", ex) and not reply_right2(None, ex)
    assert not reply_right2('<tool_call>{"name": "recall_drone", "arguments": {}}</tool_call>', ex)


def test_eval_airspace2_reports_the_second_corpus_figures():
    cmd = [
        sys.executable,
        "-m",
        "clover",
        "eval",
        "airspace2",
        "--n",
        "3",
        "--groups",
        "1",
        "--text",
        "2",
        "--multiturn",
        "2",
        "--plain",
        "2",
        "--policy",
        "ar",
        "--json",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert (res["n"], res["text_turns"], res["multiturn_n"], res["plain_n"]) == (3, 2, 2, 2)
    for k in ("exact_match", "text_acc", "text_exact", "multiturn_acc", "plain_acc", "decision_group_acc"):
        assert 0 <= res[k] <= 1
    assert set(res["names_copied"]) <= {"held out", "trained"} and res["tpf"] <= 1.0
    assert all(set(k.split("+")) <= {"m", "km", "ft", "nm", "none"} for k in res["by_unit_arithmetic"])


def test_the_eval_reports_each_name_by_where_it_ends_per_family():
    """``name_edges`` in the figures and ``clover eval``'s table of them: gold answers give every
    name right; the same answers with each name of several words cut to its first word give
    those names cut short, in the family's row and the total."""
    from clover.commands.eval import edge_table

    exs = eval_chats2("validation", 40)[0]
    gold = [_gold_text(e) for e in exs]
    res = _figures([_out(t) for t in gold], (exs, [], [], []), [], "ar", None, 1.0, SCORING)
    total = sum(sum(c.values()) for c in res["name_edges"].values())
    assert total > 20 and sum(c["right"] for c in res["name_edges"].values()) == total
    cut, n_cut = [], 0
    for e, t in zip(exs, gold):
        for _, name in SCORING.names(e):
            if " " in name and json.dumps(name, ensure_ascii=False) in t:
                t = t.replace(json.dumps(name, ensure_ascii=False), json.dumps(name.split()[0], ensure_ascii=False))
                n_cut += 1
        cut.append(_out(t))
    res2 = _figures(cut, (exs, [], [], []), [], "ar", None, 1.0, SCORING)
    assert n_cut > 5 and sum(c["cut_short"] for c in res2["name_edges"].values()) == n_cut
    assert set(res2["held_out_families"]) <= set(res2["name_edges"])
    title, columns, rows = edge_table([{**res2, "policy": "ar+grammar", "threshold": 0.97}])
    assert columns[2:5] == ["names", "right", "cut short"]
    assert rows[-1][1] == "all" and rows[-1][2] == str(total) and rows[-1][4] == str(n_cut)
    assert any("(held out)" in r[1] for r in rows) == bool(res2["held_out_families"])
