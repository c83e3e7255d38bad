"""The tools a model is offered follow the form of values it was trained on (``Task.offered``,
``run_agent``): a model of values as written gets ``WRITTEN_TOOLS``, any other the extraction
tools, wherever the tools come from (the task, a corpus chat's own list, a client's subset)."""

from __future__ import annotations

from clover.airspace.extraction_tools import (
    EXTRACTION_TOOLS,
    WRITTEN_TOOLS,
    bundled_values_form,
    tools_in_form,
    values_form,
)
from clover.airspace.loop import CompletionModel, ModelReply, run_agent
from clover.airspace.tasks import operator_tasks
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data import task as seam
from clover.data.task import get_task
from clover.model import preset

from .fakes import ScriptedModel


def test_the_task_offers_each_model_its_own_form():
    task = get_task("airspace")
    written, units = preset("tiny", extra={"values": "written"}), preset("tiny", extra={"task": "airspace"})
    assert task.offered(written) == WRITTEN_TOOLS and task.offered(units) == EXTRACTION_TOOLS
    assert WRITTEN_TOOLS != EXTRACTION_TOOLS
    bundled = WRITTEN_TOOLS if bundled_values_form() == "written" else EXTRACTION_TOOLS
    assert task.offered() == bundled and values_form(None) == bundled_values_form()


def test_a_task_whose_tools_take_no_config_is_still_asked_the_same_way():
    metres = seam.Task(name="metres-offered-test", summary="the tools in whole metres", tools=lambda: AIRSPACE_TOOLS)
    assert metres.offered(preset("tiny", extra={"values": "written"})) == AIRSPACE_TOOLS == metres.offered()


def test_a_subset_keeps_its_order_in_either_form():
    subset = [EXTRACTION_TOOLS[3], EXTRACTION_TOOLS[0]]
    assert tools_in_form(subset, "units") is subset
    names = [t["function"]["name"] for t in tools_in_form(subset, "written")]
    assert names == [t["function"]["name"] for t in subset]
    assert all(t in WRITTEN_TOOLS for t in tools_in_form(subset, "written"))


class Recording(ScriptedModel):
    def __init__(self, values, *replies):
        super().__init__(*replies)
        self.values, self.seen = values, []

    def chat(self, messages, tools):
        self.seen.append(tools)
        return super().chat(messages, tools)


def test_the_agent_loop_offers_a_corpus_task_in_the_model_s_form():
    task = operator_tasks(1)[0]  # a corpus chat's own list, in the extraction form
    assert all(t in EXTRACTION_TOOLS for t in task.tools)
    for values, form in (("written", WRITTEN_TOOLS), ("units", EXTRACTION_TOOLS)):
        model = Recording(values, ModelReply("ok", [], 1))
        run_agent(model, task.messages, task.world, task.tools)
        assert model.seen[0] == tools_in_form(task.tools, values) and all(t in form for t in model.seen[0])


def test_a_completion_model_takes_the_form_it_is_given_or_the_bundled_one():
    def complete(messages, tools=None, **request):
        raise AssertionError("not called")

    assert CompletionModel(complete, values="written").values == "written"
    assert CompletionModel(complete).values == bundled_values_form()
