"""``--tool-call-parser clover``: Clover's tool-call markup, ``<tool_call>{"name": …, "arguments":
{…}}</tool_call>`` (one per call, ``\\n`` between them), read by SGLang's OpenAI layer.

SGLang's ``hermes`` parser reads the same markup, but not in a stream of a diffusion model: such
a model sends a whole block of tokens at a time, so one chunk often holds the end of a call and
the start of the next, and ``hermes``'s incremental parser (built for one token at a time) drops
the arguments of such calls. This one holds text back until a call is complete and then sends it
whole (name and arguments in one delta), and reads an unstreamed reply the same way, call by
call (a call cut short or not valid JSON stays text), so a reply carries the same calls streamed
or not.
"""

from __future__ import annotations

import json

from sglang.srt.function_call.core_types import StreamingParseResult, ToolCallItem
from sglang.srt.function_call.hermes_detector import HermesDetector


class CloverDetector(HermesDetector):
    def __init__(self):
        super().__init__()
        self._pending = ""  # text not yet sent: an open call, or what may be the start of one
        self._calls = 0  # calls sent so far (the index of the next)

    def detect_and_parse(self, text: str, tools) -> StreamingParseResult:
        return CloverDetector().parse_streaming_increment(text, tools)

    def parse_streaming_increment(self, new_text: str, tools) -> StreamingParseResult:
        self._pending += new_text
        names = {t.function.name for t in tools or []}
        text, calls = "", []
        while True:
            start = self._pending.find(self.bot_token)
            if start < 0:  # keep a tail that could still become "<tool_call>"
                keep = next(
                    (n for n in range(len(self.bot_token) - 1, 0, -1) if self._pending.endswith(self.bot_token[:n])), 0
                )
                text += self._pending[: len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep :]
                break
            text += self._pending[:start]
            end = self._pending.find(self.eot_token, start)
            if end < 0:  # an open call: wait for the rest
                self._pending = self._pending[start:]
                break
            raw = self._pending[start + len(self.bot_token) : end]
            self._pending = self._pending[end + len(self.eot_token) :]
            try:
                call = json.loads(raw)
            except json.JSONDecodeError:
                text += self.bot_token + raw + self.eot_token  # not a call after all: it stays text
                continue
            name = call.get("name") if isinstance(call, dict) else None
            if name not in names:
                continue  # an undefined function: dropped, as the unstreamed parse drops it
            args = json.dumps(call.get("arguments", {}), ensure_ascii=False)
            calls.append(ToolCallItem(tool_index=self._calls, name=name, parameters=args))
            self._calls += 1
        if self._calls and not text.strip():
            text = ""  # the newlines between calls: no content, as in the unstreamed reply
        return StreamingParseResult(normal_text=text, calls=calls)


def register() -> None:
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    FunctionCallParser.ToolCallParserEnum["clover"] = CloverDetector
