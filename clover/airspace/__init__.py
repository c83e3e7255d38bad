"""The airspace agent: a world the six airspace tools act on (``world``), an agent loop that runs
a model's tool calls against it until the model answers in words (``loop``), and operator tasks
scored by the state they leave (``tasks``). See docs/agent.md.

Built on ``clover.llm`` (in process) or any OpenAI-compatible endpoint, never on the server's code.
"""

from __future__ import annotations

from clover.agent.loop import AgentResult, CallRecord, LocalModel, ModelReply, OpenAIModel, run_agent
from clover.agent.world import Drone, Mission, Waypoint, World, Zone, execute

__all__ = ["AgentResult", "CallRecord", "Drone", "LocalModel", "Mission", "ModelReply", "OpenAIModel", "Waypoint",
           "World", "Zone", "execute", "run_agent"]  # fmt: skip
