"""``clover eval airspace``: the figures the training issue asks for, per policy."""

import json
import subprocess
import sys
from pathlib import Path

from clover.bench.results import scrub


def _eval(*args):
    cmd = [
        sys.executable,
        "-m",
        "clover",
        "eval",
        "airspace",
        "--n",
        "3",
        "--groups",
        "1",
        "--text",
        "0",
        "--multiturn",
        "0",
        "--plain",
        "0",
        "--json",
        *map(str, args),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_eval_reports_each_policy_on_the_bundled_model():
    r = _eval("--policy", "ar,threshold")
    assert r.returncode == 0, r.stderr[-2000:]
    ar, th = json.loads(r.stdout)
    assert (ar["policy"], th["policy"]) == ("ar+grammar", "threshold+grammar")  # as the server decodes
    for res in (ar, th):
        assert {"exact_match", "n", "decision_group_acc", "tpf", "tokens_per_s"} <= set(res)
        assert res["n"] == 3 and 0 <= res["exact_match"] <= 1 and res["tpf"] > 0
    assert ar["tpf"] <= 1.0  # one token per forward at most


def test_eval_writes_a_result_file_with_the_tables_it_would_print(tmp_path):
    """``--results PATH``: the command, the figures ``--json`` prints, and both tables (recorded even
    though ``--json`` prints none)."""
    path = tmp_path / "results" / "eval.json"
    r = _eval("--policy", "ar", "--results", path)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(path.read_text())
    assert res["figures"] == json.loads(r.stdout)
    typed = "clover eval airspace --n 3 --groups 1 --text 0 --multiturn 0 --plain 0 --json --policy ar --results"
    assert res["command"] == scrub(f"{typed} {path}")  # the temporary folder written as $TMPDIR
    head, misses, runs, edges = res["tables"]
    assert head["columns"] == ["metric", "ar+grammar"] and ["n", "3"] in head["rows"]
    assert misses["columns"] == ["", "ar+grammar"] and any(row[0].startswith("field: ") for row in misses["rows"])
    # one row per run, only the kinds of turn asked (no words, no conversations here)
    assert runs["columns"] == ["policy", "τ", "tool calls (3)", "decision groups (1)", "all turns", "TPF", "AUP"]
    # the gold names by where the answer's name ends: one row per family, then all of them
    assert edges["columns"][:4] == ["run", "name family", "names", "right"] and edges["rows"][-1][1] == "all"
    f = res["figures"]
    assert runs["rows"] == [
        [
            "ar+grammar",
            "-",
            f"{100 * f['exact_match']:.1f} %",
            f"{100 * f['decision_group_acc']:.0f} %",
            f"{100 * f['overall_acc']:.1f} %",
            f"{f['tpf']:.2f}",
            f"{f['aup']:.1f}",
        ]
    ]


def test_the_run_table_names_the_default_and_gives_a_policys_aup_once():
    from clover.commands.eval import run_table
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    def run(policy, tau, acc, tpf, aup):
        return {
            "policy": policy,
            "threshold": tau,
            "n": 200,
            "exact_match": acc,
            "text_turns": 0,
            "text_acc": 0.0,
            "multiturn_n": 100,
            "multiturn_acc": acc,
            "overall_acc": acc,
            "tpf": tpf,
            "aup": aup,
        }

    p = DEFAULT_POLICY
    results = [
        run("ar", DEFAULT_THRESHOLD, 0.495, 0.97, 56.6),
        run(p, 0.9, 0.475, 4.17, 240.3),
        run(p, DEFAULT_THRESHOLD, 0.495, 3.5, 240.3),
    ]
    _, columns, rows = run_table(results)
    assert columns == ["policy", "τ", "tool calls (200)", "conversations (100)", "all turns", "TPF", "AUP"]
    assert rows == [
        ["ar", "-", "49.5 %", "50 %", "49.5 %", "0.97", "56.6"],
        [p, "0.9", "47.5 %", "48 %", "47.5 %", "4.17", "240.3"],
        [f"{p} (default)", f"{DEFAULT_THRESHOLD:g}", "49.5 %", "50 %", "49.5 %", "3.50", ""],
    ]


def test_eval_says_where_misses_come_from_and_writes_them(tmp_path):
    errors = tmp_path / "errors.jsonl"
    r = _eval("--policy", "ar", "--n", "4", "--errors", str(errors))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert {"tool", "call_count"} <= set(res["fields"]) and all(0 <= v <= 1 for v in res["fields"].values())
    assert sum(res["by_kind"].values()) >= 0 and set(res["by_kind"]) <= {"tool_call", "compound"}
    assert set(res["by_system_prompt"]) <= {"with", "without"}
    units = {"m", "km", "ft", "nm"}  # the units a turn's lengths were given in, or none
    assert all(k == "none" or set(k.split("+")) <= units for k in res["by_unit_arithmetic"])
    lines = [json.loads(x) for x in errors.read_text().splitlines()]
    assert len(lines) == round(4 * (1 - res["exact_match"]))
    assert all({"message", "gold", "predicted", "text"} <= set(x) for x in lines)


def test_eval_scores_replies_in_words_and_conversations_with_earlier_turns():
    r = _eval("--policy", "ar", "--n", "0", "--groups", "0", "--text", "3", "--multiturn", "5")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["n"] == 0 and res["text_turns"] == 3 and res["multiturn_n"] == 5
    assert 0 <= res["text_acc"] <= 1 and 0 <= res["multiturn_acc"] <= 1
    words = {"no_tool", "unserved", "missing_tool", "clarify", "no_tools"}  # kinds answered in words
    assert set(res["text_by_kind"]) <= words
    assert set(res["multiturn_by_kind"]) <= {"tool_call", "compound", "follow_up", *words}


def test_eval_default_policy_and_a_threshold_sweep_with_its_aup():
    from clover.bench.aup import aup
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    r = _eval("--policy", "default,ar", "--threshold", "0.5,0.99", "--text", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    # the default policy at each threshold, ar once (it reads none)
    g = DEFAULT_POLICY + "+grammar"  # the server's decoding, the default
    assert [(x["policy"], x["threshold"]) for x in res] == [(g, 0.5), (g, 0.99), ("ar+grammar", 0.5)]
    y_max = max(100 * x["overall_acc"] for x in res)
    sweep = [(x["tpf"], 100 * x["overall_acc"]) for x in res[:2]]
    assert res[0]["aup"] == res[1]["aup"] == aup(sweep, y_max)
    assert res[2]["aup"] == aup([(res[2]["tpf"], 100 * res[2]["overall_acc"])], y_max)
    assert all(0 <= x["text_stutter"] <= 1 for x in res)
    one = json.loads(_eval("--n", "1", "--groups", "0").stdout)  # no --policy, no --threshold: the default's own
    assert (one["policy"], one["threshold"]) == (g, DEFAULT_THRESHOLD)


def test_a_stutter_is_a_word_said_twice_that_the_gold_text_does_not_repeat():
    from clover.airspace.evaluate import repeated_words, stutters

    assert repeated_words("I can fly fly fly waypoints") == {"fly"} and repeated_words(None) == set()
    assert repeated_words('<tool_call>{"lon": , "lon": 7}</tool_call> ok ok <tool_call>{"a a') == {"ok"}
    ex = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello, I fly drones."}]}
    assert stutters("Hello    can create and fly fly waypoints", ex) and not stutters("Hello, I fly drones.", ex)


def test_eval_refuses_an_unknown_policy():
    r = _eval("--policy", "beam")
    assert r.returncode != 0 and "unknown policy" in r.stderr


def test_eval_scores_hand_written_cases(tmp_path):
    cases = tmp_path / "cases.jsonl"
    lines = (Path(__file__).parents[2] / "benchmarks" / "operator_messages.jsonl").read_text().splitlines()
    cases.write_text("\n".join(lines[:3]) + "\n")
    r = _eval("--policy", "ar", "--cases", cases, "--groups", "0")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["split"] == "cases" and res["n"] == 3 and res["decision_groups"] == 0
    cases.write_text('{"message": "recall drone 1"}\n')
    r = _eval("--cases", cases)
    assert r.returncode != 0 and f"{cases}:1" in r.stderr


def test_eval_under_the_tool_call_grammar_reports_both_and_only_valid_calls(tmp_path):
    from clover.airspace.extraction_tools import EXTRACTION_TOOLS

    props = {t["function"]["name"]: t["function"]["parameters"] for t in EXTRACTION_TOOLS}
    errors = tmp_path / "errors.jsonl"
    r = _eval("--policy", "threshold", "--n", "6", "--groups", "0", "--grammar", "both", "--errors", errors)
    assert r.returncode == 0, r.stderr[-2000:]
    free, held = json.loads(r.stdout)
    assert (free["policy"], held["policy"]) == ("threshold", "threshold+grammar") and held["n"] == 6
    for x in (json.loads(x) for x in errors.read_text().splitlines()):
        if x["policy"] == "threshold+grammar":  # a miss under the grammar is still a well-formed call
            for c in x["predicted"]:
                schema = props[c["name"]]
                assert set(schema["required"]) <= set(c["arguments"]) <= set(schema["properties"])


def test_replies_after_tool_results_are_judged_and_the_others_left_out():
    """``replies_after_tools``: only answers in words after a tool result count, judged by the
    judge given (here ``clover.bench.replies.reply_check`` with a small vocabulary)."""
    from types import SimpleNamespace

    from clover.airspace.evaluate import _replies_after_tools
    from clover.bench.replies import reply_check

    tool = [{"role": "user", "content": "recall drone 26"}, {"role": "tool", "content": '{"eta_min": 2}'}]
    convs = [
        {"messages": [*tool, {"role": "assistant", "content": "ETA 2 minutes."}]},
        {"messages": [*tool, {"role": "assistant", "content": "ETA 2 minutes."}]},
        {"messages": [*tool, {"role": "assistant", "content": "ETA 2 minutes."}]},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]},
    ]
    outs = [SimpleNamespace(text=t) for t in ("ETA 2 minutes.", "ETA 29 minutes.", "ETA 2 minutesa.", "Hi 7")]
    vocab = frozenset({"eta", "minutes"})
    r = _replies_after_tools(outs, convs, lambda reply, msgs: reply_check(reply, msgs, vocab))
    assert r == {"n": 3, "ids_grounded": 2 / 3, "well_formed": 2 / 3, "faithful": 1 / 3}
