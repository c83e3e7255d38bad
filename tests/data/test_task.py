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
