"""The one place for the chat template and for parsing tool calls out of generated text.

Qwen-style ChatML. Tools go in the system turn inside ``<tools>…</tools>`` as one compact
signature per line (derived from any OpenAI JSON schema, so client tools render too); the
assistant calls a tool as ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``; tool results
come back in a user turn inside ``<tool_response>…</tool_response>``, as Qwen does.
Training, evaluation and the server all use these functions.
"""

from __future__ import annotations

import json
import re

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def _type(schema: dict) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "|".join(str(v) for v in schema["enum"])
    t = schema.get("type", "any")
    if isinstance(t, list):
        t = "|".join(str(x) for x in t)
    if t == "array":
        return f"array[{_type(schema.get('items', {}))}]"
    if t == "object" and isinstance(schema.get("properties"), dict):
        return "{" + ", ".join(f"{k}: {_type(v)}" for k, v in schema["properties"].items()) + "}"
    return str(t)


def tool_signature(tool: dict) -> str:
    """``name(arg: type, opt?: type)`` for one OpenAI-format tool (or a bare function dict)."""
    fn = tool.get("function", tool) if isinstance(tool, dict) else {}
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    args = ", ".join(f"{k}{'' if k in required else '?'}: {_type(v)}" for k, v in props.items())
    return f"{fn.get('name', 'unnamed')}({args})"


def tool_call_text(name: str, arguments: dict | str) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = {"_raw": arguments}
    return TOOL_OPEN + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + TOOL_CLOSE


def _content(m: dict) -> str:
    c = m.get("content") or ""
    if isinstance(c, list):  # OpenAI content parts
        c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return str(c)


def assistant_text(m: dict) -> str:
    """The assistant turn's body: its text, then one ``<tool_call>`` per call."""
    parts = [_content(m)] if _content(m) else []
    for call in m.get("tool_calls") or []:
        fn = call.get("function", call)
        parts.append(tool_call_text(fn.get("name", ""), fn.get("arguments", {})))
    return "\n".join(parts)


def render_segments(
    messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
) -> list[tuple[str, bool]]:
    """The conversation as (text, is_assistant) segments; assistant bodies + ``<|im_end|>`` are
    the trainable parts, everything else is prompt."""
    segs: list[tuple[str, bool]] = []
    system = [_content(m) for m in messages if m.get("role") in ("system", "developer")]
    if tools or system:
        body = "\n".join(s for s in system if s)
        if tools:
            body = (
                (body + "\n" if body else "") + "<tools>\n" + "\n".join(tool_signature(t) for t in tools) + "\n</tools>"
            )
        segs.append((f"{IM_START}system\n{body}{IM_END}\n", False))
    i, rest = 0, [m for m in messages if m.get("role") not in ("system", "developer")]
    while i < len(rest):
        m = rest[i]
        role = m.get("role")
        if role == "assistant":
            segs.append((f"{IM_START}assistant\n", False))
            segs.append((assistant_text(m) + IM_END, True))
            segs.append(("\n", False))
        elif role == "tool":  # consecutive tool results share one user turn
            bodies = []
            while i < len(rest) and rest[i].get("role") == "tool":
                bodies.append(f"<tool_response>{_content(rest[i])}</tool_response>")
                i += 1
            segs.append((f"{IM_START}user\n" + "\n".join(bodies) + f"{IM_END}\n", False))
            continue
        else:
            segs.append((f"{IM_START}{role}\n{_content(m)}{IM_END}\n", False))
        i += 1
    if add_generation_prompt:
        segs.append((f"{IM_START}assistant\n", False))
    return segs


def render(messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False) -> str:
    return "".join(t for t, _ in render_segments(messages, tools, add_generation_prompt))


_CALL = re.compile(re.escape(TOOL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CLOSE) + r"|$)", re.S)


def parse_assistant(text: str) -> tuple[str, list[dict]]:
    """Generated assistant text → (content, [{"name", "arguments": dict}]).

    Several calls, surrounding whitespace and a missing final ``</tool_call>`` are fine; a call
    whose JSON does not parse is skipped (its text stays out of the content).
    """
    text = text.split(IM_END)[0]
    calls = []
    for m in _CALL.finditer(text):
        try:
            obj = json.loads(m.group(1).strip())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", {})
            calls.append({"name": obj["name"], "arguments": args if isinstance(args, dict) else {}})
    content = _CALL.sub("", text).strip()
    return content, calls
