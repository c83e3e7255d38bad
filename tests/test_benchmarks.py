"""The stand-alone benchmark scripts run and write what they print (tiny settings)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import benchmark_script

ROOT = Path(__file__).parents[1]


def test_profile_decode_charges_the_wall_time_to_regions(tmp_path):
    out = tmp_path / "p.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "profile_decode.py"),
        "--n",
        "1",
        "--max-tokens",
        "12",
        "--json",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script imports clover, installed or not
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())["figures"]
    assert d["tokens"] > 0 and d["passes"] > 0
    for shares in (d["regions_share"], d["op_kinds_share"]):
        assert 0.9 < sum(shares.values()) < 1.1  # operator time + Python/framework time = wall time
    assert d["regions_share"]["MoE / MLP / norms"] > 0 and "where decode time goes" in r.stdout


def test_tables_print_whole_to_a_pipe_or_a_file(tmp_path):
    """A table read from a pipe or a file has no terminal width to fit: every cell comes whole
    (rich would cut them to 80 columns: "defau…")."""
    cells = ["default (prefix τ 0.97) " * 3, "compound messages with several actions " * 2, "speed-up vs ar " * 3]
    code = (
        "from clover.bench import print_table; import sys, json; "
        "c = json.loads(sys.argv[1]); print_table(None, 't', ['decoder', 'kind', 'speed'], [c])"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-c", code, json.dumps(cells)], capture_output=True, text=True, env=env)
    with open(tmp_path / "out.txt", "w") as f:
        subprocess.run([sys.executable, "-c", code, json.dumps(cells)], stdout=f, env=env, check=True)
    for out in (piped.stdout, (tmp_path / "out.txt").read_text()):
        assert "…" not in out and all(c.strip() in out for c in cells), out
    narrow = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cells)], capture_output=True, text=True, env={**env, "COLUMNS": "60"}
    )
    assert not all(c.strip() in narrow.stdout for c in cells)  # COLUMNS, when set, still decides


def _script(name: str, *args: str, timeout: int = 300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script imports clover, installed or not
    cmd = [sys.executable, str(ROOT / "benchmarks" / name), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_accuracy_tables_prints_the_five_tables_the_docs_quote(tmp_path):
    out = tmp_path / "accuracy.json"
    small = ["--n", "2", "--text", "1", "--multiturn", "1", "--plain", "0", "--groups", "1"]
    r = _script("accuracy_tables.py", *small, "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    f, (readme, grounded, card, kinds, edges) = res["figures"], res["tables"]
    assert set(f) == {"ar calls", "default calls", "default calls alone", "ar rest", "default rest"}
    assert f["ar calls"]["n"] == 2 and f["ar rest"]["n"] == 0 and f["ar rest"]["decision_groups"] == 1
    assert f["default calls"]["policy"].endswith("+grammar") and "+" not in f["default calls alone"]["policy"]
    # README's: the kinds of turn asked (no plain texts here), ar and the default as columns
    assert [row[0].split(" (")[0] for row in readme["rows"]] == [
        "tool calls, exact match",
        "the same, the model alone",
        "replies in words, the corpus's reply: small talk, declines, questions, no tools",
        "conversations, last turn right",
        "decision groups, all answers right",
    ]
    assert readme["rows"][0][1] == f"{100 * f['ar calls']['exact_match']:.1f} %"
    assert readme["rows"][1][2].endswith(f"at {f['default calls alone']['tpf']:.1f} tokens per pass")
    assert readme["rows"][-1][1:] == [f"{100 * f[k]['decision_group_acc']:.0f} %" for k in ("ar rest", "default rest")]
    # benchmarks.md's grounded table: one row per decoding; the model card's: one column per decoding
    assert [row[0] for row in grounded["rows"]] == [
        "default, the model alone",
        "default, server's decoding (grounded)",
        "ar, server's decoding (grounded)",
    ]
    d = f["default calls"]
    assert grounded["rows"][1][4] == f"{d['ungrounded_args']} of {d['grounded_args']}" == card["rows"][1][1]
    assert card["columns"][2:] == ["ar", "the model alone (default)"] and len(card["rows"]) == 4
    # the model card's per kind: one row per kind asked, then the share that called no tool (not a score)
    assert len(kinds["rows"]) == 3 and kinds["rows"][-1][0].endswith("(not a score)")
    assert kinds["rows"][-1][2:] == [f"{100 * f[k]['text_no_call']:.0f} %" for k in ("ar rest", "default rest")]
    # the gold names by where the default's name ends: one row per family, then all of them
    names = sum(sum(c.values()) for c in d["name_edges"].values())
    assert edges["columns"][:3] == ["name family", "names", "right"] and edges["rows"][-1][:2] == ["all", str(names)]


def test_accuracy_tables_refuses_a_run_with_nothing_but_tool_calls():
    r = _script("accuracy_tables.py", "--text", "0", "--multiturn", "0", "--plain", "0", "--groups", "0")
    assert r.returncode != 0 and "nothing but tool calls" in r.stderr


def test_bench_threads_pivots_its_cases_to_one_row_per_model_and_spinners():
    mod = benchmark_script("bench_threads")

    def case(model, spinners, threads, wait, load, tps=None):
        r = {"model": model, "spinners": spinners, "threads": threads, "wait": wait, "loadavg_1m": load}
        return r | ({"tokens_per_s": tps} if tps is not None else {"timed_out_s": 150})

    results = [
        case("bundled", 0, 1, "default", 5.3, 75.7),
        case("bundled", 0, 2, "default", 5.6, 6.6),
        case("bundled", 0, 2, "PASSIVE", 6.0, 39.9),
        case("medium", 0, 1, "default", 5.6, 2.3),
        case("medium", 0, 2, "default", 6.7),  # timed out
        case("medium", 0, 2, "PASSIVE", 6.1, 1.89),
        case("bundled", 0, 1, "default", 5.4, 69.0),  # a repeat: the cell gives the range
    ]
    columns, rows = mod.by_setting(results)
    assert columns == [
        "model",
        "spinners",
        "load (1 min)",
        "1 thread",
        "2 threads, default wait",
        "2 threads, PASSIVE wait",
    ]
    assert rows == [
        ["bundled", "0", "5.3-6.0", "69-75.7", "6.6", "39.9"],
        ["medium", "0", "5.6-6.7", "2.3", "timed out (150 s)", "1.89"],
    ]


def test_bench_closing_prints_its_rows_as_the_docs_show_them():
    mod = benchmark_script("bench_closing")
    row = {"schema": "flat", "closing": "on", "max_tokens": 40, "requests": 3, "valid": 3, "stop": 2, "tokens": 117}
    row |= {"wall_s": 2.7, "s_per_token": 0.0231, "closing_us_per_token": 129.4, "closing_share_pct": 0.57}
    columns, rows = mod.table([row])
    assert columns[3:5] == ["valid", "finish `stop`"] and len(columns) == 9
    assert rows == [["flat", "on", 40, "3/3", "2/3", 117, "0.023", "129", "0.57 %"]]


def test_bench_grammar_runs_on_the_models_own_task_and_checks_calls_against_their_schemas(tmp_path):
    out = tmp_path / "g.json"
    r = _script("bench_grammar.py", "--n", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())["figures"]
    assert d["task"] == "airspace" and d["n"] == 1
    for mode in ("ar", "ar_grammar", "ar_grammar_grounded", "prefix_grammar_grounded"):
        assert 0 <= d[f"{mode}_exact_match"] <= 1 and d[f"{mode}_tpf"] > 0
    assert d["ar_grammar_schema_valid"] == 1.0  # the grammar admits only calls its schemas validate


def test_bench_grammar_schema_check_rejects_what_the_schemas_do_not_admit():
    bg = benchmark_script("bench_grammar")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "recall",
                "parameters": {
                    "type": "object",
                    "properties": {"drone_id": {"type": "string"}, "speed": {"type": "integer"}},
                    "required": ["drone_id"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    call = lambda args, name="recall": f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(args)}}}</tool_call>'
    assert bg.schema_valid(call({"drone_id": "D-1", "speed": 3}), tools)
    assert not bg.schema_valid(call({"speed": 3}), tools)  # required argument missing
    assert not bg.schema_valid(call({"drone_id": "D-1", "speed": "fast"}), tools)  # wrong type
    assert not bg.schema_valid(call({"drone_id": "D-1", "colour": "red"}), tools)  # unknown argument
    assert not bg.schema_valid(call({"drone_id": "D-1"}, name="launch"), tools)  # not offered
    assert not bg.schema_valid("Sure. " + call({"drone_id": "D-1"}), tools)  # words beside the call


def test_text_threshold_writes_the_threshold_it_prints(tmp_path):
    out = tmp_path / "t.json"
    r = _script("text_threshold.py", "--text", "20", "--multiturn", "20", "--plain", "4", "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    t = res["figures"]["threshold"]
    assert f"the threshold is chrF {t}" in r.stdout and 50 < t <= 100
    assert all(row[-1] == f"{row[1]} of {row[1]}" for row in res["tables"][0]["rows"])


def test_soak_runs_its_mix_against_a_server_of_its_own(tmp_path):
    """A few seconds and clients of ``benchmarks/soak.py``: every kind of request is sent, none
    fails, and the result file holds the figures the docs quote."""
    out = tmp_path / "soak.json"
    r = _script("soak.py", "--clients", "3", "--minutes", "0.15", "--warmup-s", "2", "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())["figures"]
    assert d["errors"] == 0 and d["server_alive"], d["first_errors"]
    assert d["short_p99_ms"] > 0 and d["rss_before_mib"] > 0
    assert sum(sum(v.values()) for v in d["outcomes"].values()) > 5


def test_bench_span_ends_writes_its_figures(tmp_path):
    out = tmp_path / "span-ends.json"
    r = _script("bench_span_ends.py", "--n", "3", "--rounds", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    f, (table,) = res["figures"], res["tables"]
    assert set(f) == {"token", "span"} and f["token"]["choices"] == 0 and f["span"]["cpu_s"] > 0
    assert [row[0] for row in table["rows"]] == ["token", "span", "span over token"]
