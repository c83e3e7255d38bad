"""The airspace demo, one plug-in task (``clover.data.task``; ``TASK`` is ``task.TASK``).

* the tools: ``extraction_tools`` (what a chat offers: lengths as a number and a unit), built on
  ``tools`` (the same six in the world's metres form), values read as written (``values``);
* the corpus of operator chats: ``chats``, from message ``templates``, name families (``names``),
  shared ``phrasing`` (split entity pools, surface forms), the assistant's ``replies`` and
  ``calls``; joint yes/no ``decision_groups``;
* training: the model's ``tokenizer`` (trained on ``tokenizer_corpus``, the first corpus, kept for
  it), ``diffusion_recipe`` (the bundled model's recipe) and ``recipes`` (the shared shape and the
  autoregressive twin's recipe);
* a ``world`` the tools act on, an agent ``loop`` that runs a model's tool calls against it until
  the model answers in words, operator ``tasks`` scored by the state they leave, and the zone
  ``demo`` (``clover bench agent --demo``, the playground's demo button);
* the evaluation ``clover eval airspace`` runs: ``evaluate`` (the engine over the chats),
  ``scoring`` (what the task draws and how it scores), ``textscore`` (answers in words),
  ``tool_lists`` (tool lists as agent frameworks send them), ``compare`` (models side by side).
  See docs/agent.md.

Nothing in the generic layers imports this package: they reach it through ``TASK``.
"""

from __future__ import annotations

from clover.airspace.extraction_tools import EXTRACTION_TOOLS
from clover.airspace.loop import AgentResult, CallRecord, LocalModel, ModelReply, OpenAIModel, run_agent
from clover.airspace.task import TASK
from clover.airspace.world import Drone, Mission, Waypoint, World, Zone, execute

__all__ = [
    "EXTRACTION_TOOLS",
    "TASK",
    "AgentResult",
    "CallRecord",
    "Drone",
    "LocalModel",
    "Mission",
    "ModelReply",
    "OpenAIModel",
    "Waypoint",
    "World",
    "Zone",
    "execute",
    "run_agent",
]
