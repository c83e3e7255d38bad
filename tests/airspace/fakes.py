"""A scripted model side for the agent loop: replies given in advance, no model."""

from __future__ import annotations

import json

from clover.airspace.loop import ModelReply


def calls_reply(calls: list[dict], passes: int | None = 3) -> ModelReply:
    """A reply made of ``{"name", "arguments"}`` calls, in the OpenAI form."""
    return ModelReply(
        None,
        [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for i, c in enumerate(calls)
        ],
        passes,
    )


class ScriptedModel:
    """Answers with ``replies`` in turn (the last one again when they run out); records each request."""

    def __init__(self, *replies: ModelReply):
        self.replies, self.requests = list(replies), []

    def chat(self, messages, tools):
        self.requests.append([dict(m) for m in messages])
        return self.replies[min(len(self.requests), len(self.replies)) - 1]
