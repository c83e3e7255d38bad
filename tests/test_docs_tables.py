"""The tables in README.md and docs/*.md marked ``<!-- results: FILE … -->`` are what their result
files give (``benchmarks/docs_tables.py``), and the pieces behind that: recording a printed table,
writing a result file, rendering one of its tables as markdown, replacing a marked table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clover.bench import print_table, results, write_json
from tests.helpers import benchmark_script

ROOT = Path(__file__).parents[1]


dt = benchmark_script("docs_tables")


def test_every_marked_table_is_what_its_result_file_gives():
    stale = []
    for page in dt.pages():
        name = page.relative_to(ROOT).as_posix()
        _, changed = dt.refresh(page.read_text(encoding="utf-8"), name)
        stale += changed
    assert not stale, "stale tables (python benchmarks/docs_tables.py regenerates them): " + ", ".join(stale)


def test_every_result_file_is_a_result_file():
    """Each file in benchmarks/results has the command, the commit of a clean tree, the machine and
    its tables, and names no folder of the machine it was measured on."""
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert files
    local = re.compile(r"(?<![\w.$~])/(root|home|tmp|work|Users|var/folders)/")
    for f in files:
        r = results.read_result(f)
        assert r["command"].startswith(("clover ", "python benchmarks/")), f
        assert isinstance(r["commit"], str) and len(r["commit"]) == 40 and r["dirty"] is False, f
        assert r["machine"]["cores"] and r["date"] and r["tables"], f
        assert not local.search(f.read_text(encoding="utf-8")), f
        for t in r["tables"]:
            assert all(len(row) == len(t["columns"]) for row in t["rows"]), f


RESULT = {
    "command": "clover bench context --threads 1 --json benchmarks/results/context.json",
    "commit": "0123456789abcdef0123",
    "dirty": False,
    "date": "2026-12-06T18:00:00Z",
    "machine": {"cpu": "AMD EPYC", "cores": 2, "threads": 1},
    "tables": [
        {"title": "t0", "columns": ["prompt", "ms", "a|b"], "rows": [["1024", "4.22", "x"], ["4096", "4.46", "y"]]},
        {"title": "t1", "columns": ["mode", "acc"], "rows": [["joint", "0.32"]]},
    ],
    "figures": {},
}


def test_render_gives_the_markdown_table_and_where_it_came_from():
    assert results.render(RESULT) == (
        "| prompt | ms | a\\|b |\n"
        "| --- | --- | --- |\n"
        "| 1024 | 4.22 | x |\n"
        "| 4096 | 4.46 | y |\n"
        "\n"
        "<sub>`clover bench context --threads 1 --json benchmarks/results/context.json` at 0123456789, 2026-12-06; "
        "AMD EPYC, 2 cores, 1 thread</sub>"
    )
    assert results.render(RESULT, 1).startswith("| mode | acc |\n| --- | --- |\n| joint | 0.32 |\n")
    assert "at 0123456789+," in results.render({**RESULT, "dirty": True})


def test_render_picks_columns_and_rows_by_index_or_name():
    md = results.render(RESULT, 0, columns=["ms", "0"], rows=["4096"])
    assert md.split("\n\n")[0] == "| ms | prompt |\n| --- | --- |\n| 4.46 | 4096 |"
    with pytest.raises(ValueError, match="no column 'nope'"):
        results.render(RESULT, 0, columns=["nope"])
    with pytest.raises(ValueError, match="row 5 out of range"):
        results.render(RESULT, 0, rows=["5"])
    with pytest.raises(ValueError, match="no table 2: the result has 2"):
        results.render(RESULT, 2)
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        results.markdown_table(["a", "b"], [["1"]])


def _page(tmp_path: Path, body: str, spec: str = "res.json table 1") -> str:
    (tmp_path / "res.json").write_text(json.dumps(RESULT))
    return f"# page\n\ntext\n\n<!-- results: {spec} -->\n{body}\n<!-- /results -->\n\nmore text\n"


def test_refresh_replaces_a_stale_table_and_names_it(tmp_path):
    text = _page(tmp_path, "| old | table |\n| --- | --- |\n| 1 | 2 |")
    new, stale = dt.refresh(text, "docs/x.md", tmp_path)
    assert stale == ["docs/x.md:5 (res.json table 1)"]
    assert new == _page(tmp_path, results.render(RESULT, 1))
    assert dt.refresh(new, "docs/x.md", tmp_path) == (new, [])  # fresh: nothing changes


def test_markers_in_a_code_block_are_text(tmp_path):
    shown = "```text\n<!-- results: res.json -->\n(generated)\n<!-- /results -->\n```\n"
    assert dt.blocks(shown, "docs/x.md") == []
    assert len(dt.blocks(shown + _page(tmp_path, ""), "docs/x.md")) == 1


def test_marker_mistakes_are_named(tmp_path):
    with pytest.raises(ValueError, match="docs/x.md:5: .*never closed"):
        dt.blocks("a\n\nb\n\n<!-- results: res.json -->\n| x |\n", "docs/x.md")
    with pytest.raises(ValueError, match="docs/x.md:2: .* with no "):
        dt.blocks("a\n<!-- /results -->\n", "docs/x.md")
    with pytest.raises(ValueError, match="docs/x.md:5: .*'colums=a'"):
        dt.refresh(_page(tmp_path, "", "res.json colums=a"), "docs/x.md", tmp_path)
    with pytest.raises(ValueError, match="docs/x.md:5: nope.json: no such result file"):
        dt.refresh(_page(tmp_path, "", "nope.json"), "docs/x.md", tmp_path)
    (tmp_path / "bad.json").write_text('{"figures": {}}')
    with pytest.raises(ValueError, match="not a result file"):
        dt.refresh(_page(tmp_path, "", "bad.json"), "docs/x.md", tmp_path)


def test_spec_reads_quoted_names():
    s = dt.parse_spec('benchmarks/results/a.json table 2 columns="tool calls %",TPF rows=0,1')
    assert (s.path, s.table, s.columns, s.rows) == ("benchmarks/results/a.json", 2, ["tool calls %", "TPF"], ["0", "1"])


def test_print_table_records_what_it_prints_and_write_json_keeps_it(tmp_path, capsys):
    rec = results.Recorder(["bench", "x", "--json", "out.json"])
    print_table(
        rec, "speed", ["decoder", "tok/s", "share"], [["ar", 102.456, "5 %"], ["[b]prefix", 167.0, 1]], ["a note"]
    )
    printed = capsys.readouterr().out
    write_json(rec, str(tmp_path / "r" / "out.json"), {"ar": 102.456})
    r = json.loads((tmp_path / "r" / "out.json").read_text())
    assert r["command"] == "clover bench x --json out.json" and r["figures"] == {"ar": 102.456}
    (t,) = r["tables"]
    assert t == {
        "title": "speed",
        "columns": ["decoder", "tok/s", "share"],
        "rows": [["ar", "102", "5 %"], ["[b]prefix", "167", "1"]],
        "notes": ["a note"],
    }
    assert all(c in printed for row in t["rows"] for c in row)  # the cells as printed
    assert r["machine"]["cores"] == os.cpu_count() and r["date"].endswith("Z")
    assert r["commit"] is None or len(r["commit"]) == 40
    assert len(r["load"]["start"]) == 3 and len(r["load"]["end"]) == 3  # the machine's load, start and end


def test_each_recorder_keeps_its_own_tables(tmp_path, capsys):
    """A table lands in the recorder it is printed with, and only there: two commands in one
    process (the tests, a script calling another) do not mix their result files."""
    a, b = results.Recorder(["bench", "a"]), results.Recorder(["bench", "b"])
    print_table(a, "one", ["x"], [[1]])
    print_table(None, "shown", ["x"], [["printed only"]])
    b.record("two", ["y"], [[3.0]])
    write_json(a, str(tmp_path / "a.json"), {})
    write_json(b, str(tmp_path / "b.json"), {})
    write_json(b, None, {})  # no path: no file
    ra, rb = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert [t["title"] for t in ra["tables"]] == ["one"] and ra["command"] == "clover bench a"
    assert [t["title"] for t in rb["tables"]] == ["two"] and rb["command"] == "clover bench b"
    assert rb["tables"][0]["rows"] == [["3"]] and "printed only" in capsys.readouterr().out
    assert sorted(tmp_path.iterdir()) == [tmp_path / "a.json", tmp_path / "b.json"]
    with pytest.raises(TypeError, match="takes the command's Recorder first"):
        print_table("speed", ["x"], [[1]], ["a note"])  # the call before recorders: an error, not a table lost
    with pytest.raises(TypeError, match="takes the command's Recorder first"):
        write_json(None, str(tmp_path / "c.json"), {})


def test_a_result_file_names_no_local_folder(tmp_path):
    """The checkout, the temporary folder and the home folder are written as ``.``, ``$TMPDIR``
    and ``~``, inside any string of the result; a folder that merely starts alike is kept."""
    places = [("/work/main", "."), ("/tmp", "$TMPDIR"), ("/root", "~")]
    got = results.scrub(
        {"command": "x --out /tmp/run-1 --model /root/.cache/m", "n": 3, "rows": [["/work/main/a.txt", "/tmpx"]]},
        places,
    )
    assert got == {"command": "x --out $TMPDIR/run-1 --model ~/.cache/m", "n": 3, "rows": [["./a.txt", "/tmpx"]]}
    assert results.scrub(str(Path.home() / "f")) == "~/f"


def test_the_load_average_shows_under_a_table():
    r = {**RESULT, "load": {"start": [0.5, 0.2, 0.1], "end": [1.25, 0.4, 0.2]}}
    assert results.provenance(r).endswith("AMD EPYC, 2 cores, 1 thread, load 0.50 to 1.25</sub>")
    assert "load" not in results.provenance(RESULT)  # a file from before the load was recorded


def test_a_script_names_itself_relative_to_the_checkout(tmp_path):
    """``python benchmarks/x.py …`` from the checkout: the command as typed, the commit of the tree."""
    script = tmp_path / "prog.py"
    script.write_text(
        "from clover.bench import print_table, write_json\n"
        "from clover.bench.results import Recorder\n"
        "rec = Recorder()\n"
        "print_table(rec, 't', ['a', 'b'], [[1, 2.5]])\n"
        "write_json(rec, 'out.json', {'a': 1})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(script), "--n", "2"], cwd=tmp_path, env=env, check=True, capture_output=True)
    r = json.loads((tmp_path / "out.json").read_text())
    assert r["command"] == results.scrub(f"python {script} --n 2")  # outside the checkout: the path as given, scrubbed
    assert r["tables"][0]["rows"] == [["1", "2.5"]] and "torch" not in r["machine"]  # no torch loaded, none named
    commit, dirty = results.git_state()
    assert r["commit"] == commit and r["dirty"] == dirty


def test_rerun_runs_each_result_files_command_as_typed(tmp_path, capsys):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "prog.py").write_text("import sys; open('ran.txt', 'w').write(' '.join(sys.argv[1:]))\n")
    res = {**RESULT, "command": "python prog.py --n '2 3'"}
    (tmp_path / "benchmarks" / "results" / "prog.json").write_text(json.dumps(res))
    assert dt._rerun(["prog"], tmp_path) == 0
    assert (tmp_path / "ran.txt").read_text() == "--n 2 3"  # run from the checkout's root, quoting kept
    with pytest.raises(SystemExit, match="no result file nope; there are prog"):
        dt._rerun(["nope"], tmp_path)
    assert dt.rerun_argv("clover bench decode --n 2") == [sys.executable, "-m", "clover", "bench", "decode", "--n", "2"]
    with pytest.raises(ValueError, match="starts with clover or python"):
        dt.rerun_argv("rm -rf x")
    dt._list(tmp_path)
    assert "prog: 2026-12-06T18:00:00Z at 0123456789: python prog.py --n '2 3'" in capsys.readouterr().out


def test_cells_keep_three_figures_and_read_whole_from_a_thousand_up():
    assert [results.cell(v) for v in (0.0311, 2.51, 835.4, 1082.7, 1234567.0, 1.6e-6, 7, "x")] == [
        "0.0311",
        "2.51",
        "835",
        "1,083",
        "1,234,567",
        "1.6e-06",
        "7",
        "x",
    ]
