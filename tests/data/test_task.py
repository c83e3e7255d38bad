"""The task seam (clover.data.task): a task is a plug-in the generic layers reach by name."""

from __future__ import annotations

from clover.data import task as seam
from clover.model import preset


def test_a_registered_task_is_found_by_name_and_by_the_model_that_names_it():
    echo = seam.Task(name="echo-test", summary="repeats what it is told", tools=lambda: [])
    seam.register(echo)
    try:
        assert seam.get_task("echo-test") is echo and "echo-test" in seam.task_names()
        assert seam.model_task(preset("tiny", extra={"task": "echo-test"})) is echo
        assert seam.model_task(preset("tiny", extra={"recipe": "echo-test"})) is echo
    finally:
        seam.TASKS.pop("echo-test")
        seam._loaded.pop("echo-test")
    assert seam.model_task(preset("tiny", extra={"task": "echo-test"})) is None


def test_an_unknown_task_names_the_known_ones():
    try:
        seam.get_task("nope")
    except KeyError as e:
        assert "airspace" in str(e)
    else:
        raise AssertionError("no KeyError")


def test_a_former_name_is_read_as_the_task_with_a_note_once_per_use(capsys):
    assert seam.deprecated("airspace", "clover x") == "airspace" and capsys.readouterr().err == ""
    assert seam.deprecated("airspace2", "clover x") == "airspace"
    assert seam.deprecated("airspace2-greet", "clover x") == "airspace-greet"  # a recipe's variant too
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "clover x: note: 'airspace2' is now called 'airspace'; the old name goes in a later release",
        "clover x: note: 'airspace2-greet' is now called 'airspace-greet'; the old name goes in a later release",
    ]
    assert seam.canonical("airspace-ar") == "airspace-ar" and seam.canonical("nope") == "nope"
    assert seam.model_task(preset("tiny", extra={"recipe": "airspace2-greet"})).name == "airspace"


def test_clover_tools_lists_the_task_s_tools_by_default_and_by_its_former_name(capsys):
    from clover.cli import main

    def run(*argv) -> int:
        try:
            return main(list(argv))
        except SystemExit as e:  # the command line ends with the command's status
            return e.code

    assert run("tools", "--json") in (0, None)
    default = capsys.readouterr()
    assert run("tools", "airspace2", "--json") in (0, None)
    former = capsys.readouterr()
    assert default.out == former.out and '"radius_unit"' in default.out  # the extraction tools
    assert default.err == "" and "'airspace2' is now called 'airspace'" in former.err
