"""The one place for the chat template and for parsing tool calls out of generated text.

Qwen-style ChatML, made compact for a tiny model::

    <|im_start|>system
    {system text}
    <tools>
    create_no_fly_zone(zone_name: string, lat: number, lon: number, radius_m: integer, start_time?: string, ...)
    recall_drone(drone_id: string)
    </tools><|im_end|>
    <|im_start|>user
    {operator message}<|im_end|>
    <|im_start|>assistant
    <tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-17"}}</tool_call><|im_end|>
    <|im_start|>user
    <tool_response>{"status": "returning"}</tool_response><|im_end|>

* tools: one signature per line, derived from any OpenAI JSON schema (``?`` = optional, enums
  as ``a|b|c``, arrays as ``array[T]``, objects as ``{k: T}``), so client tools render too;
* assistant tool calls: one ``<tool_call>`` per call, ``\\n`` between them, after the text (if
  any); canonical JSON = ``json.dumps(obj, ensure_ascii=False)`` (separators ``, `` and ``: ``);
* tool results: consecutive ``tool`` messages share one user turn, one ``<tool_response>`` each
  (Qwen's way).

Training, evaluation and the server all use these functions; nothing here knows a tokenizer
class (``tokenize_segments`` takes any ``encode`` callable).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from datetime import datetime
from functools import lru_cache
from pathlib import Path

IM_START, IM_END, EOT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
RESP_OPEN, RESP_CLOSE = "<tool_response>", "</tool_response>"
TOOLS_OPEN, TOOLS_CLOSE = "<tools>", "</tools>"

_BARE = re.compile(r"^[\w.\-]+$")  # enum values that need no quoting


# -- tool signatures ----------------------------------------------------------------------------
def _literal(v) -> str:
    return v if isinstance(v, str) and _BARE.match(v) else json.dumps(v, ensure_ascii=False)


def schema_type(schema, depth: int = 0) -> str:
    """A JSON schema as a short type string: ``string``, ``a|b``, ``array[number]``, ``{k: T, o?: T}``."""
    if not isinstance(schema, dict) or depth > 6:  # depth guard: pathological or recursive schemas
        return "any"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return "|".join(_literal(v) for v in schema["enum"])
    if "const" in schema:
        return _literal(schema["const"])
    if isinstance(schema.get("$ref"), str):
        return schema["$ref"].rsplit("/", 1)[-1] or "any"
    for key, sep in (("anyOf", "|"), ("oneOf", "|"), ("allOf", "&")):
        if isinstance(schema.get(key), list) and schema[key]:
            return sep.join(dict.fromkeys(schema_type(s, depth + 1) for s in schema[key]))
    t = schema.get("type")
    if isinstance(t, list):
        return "|".join(schema_type({**schema, "type": x}, depth) for x in t) or "any"
    if t == "array" or (t is None and "items" in schema):
        return f"array[{schema_type(schema['items'], depth + 1)}]" if isinstance(schema.get("items"), dict) else "array"
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties")
        if isinstance(props, dict) and props:
            return "{" + _params(props, schema.get("required"), depth + 1) + "}"
        return "object"
    return str(t) if t else "any"


def _params(props: dict, required, depth: int) -> str:
    req = set(required) if isinstance(required, list) else set()
    return ", ".join(f"{k}{'' if k in req else '?'}: {schema_type(v, depth)}" for k, v in props.items())


def tool_signature(tool: dict, with_description: bool = False) -> str:
    """``name(arg: type, opt?: type)`` for one OpenAI-format tool (or a bare function dict)."""
    fn = tool.get("function", tool) if isinstance(tool, dict) else {}
    fn = fn if isinstance(fn, dict) else {}
    params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    sig = f"{fn.get('name') or 'unnamed'}({_params(props, params.get('required'), 0)})"
    desc = str(fn.get("description") or "").strip().splitlines()
    return f"{sig} - {desc[0]}" if with_description and desc else sig


def tools_block(tools: list[dict], with_descriptions: bool = False) -> str:
    return TOOLS_OPEN + "\n" + "\n".join(tool_signature(t, with_descriptions) for t in tools) + "\n" + TOOLS_CLOSE


# -- rendering ----------------------------------------------------------------------------------
def content_text(m: dict) -> str:
    """A message's text; OpenAI text parts are joined by newlines (as vLLM does), dicts (tool
    results) dumped as JSON."""
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in c)
    if isinstance(c, dict):
        return json.dumps(c, ensure_ascii=False)
    return str(c)


def tool_call_text(name: str, arguments: dict | str | None) -> str:
    """One canonical ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``."""
    if isinstance(arguments, str):  # OpenAI messages carry arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = {"_raw": arguments}
    obj = {"name": name, "arguments": arguments if arguments is not None else {}}
    return TOOL_OPEN + json.dumps(obj, ensure_ascii=False) + TOOL_CLOSE


def assistant_text(m: dict) -> str:
    """The assistant turn's body: its text, then one ``<tool_call>`` per call (``\\n``-separated)."""
    parts = [content_text(m)] if content_text(m) else []
    for call in m.get("tool_calls") or []:
        fn = call.get("function", call)
        parts.append(tool_call_text(fn.get("name", ""), fn.get("arguments", {})))
    return "\n".join(parts)


def is_answer(m: dict) -> bool:
    """An assistant message to answer (train on, score): OpenAI's per-message ``weight`` 0 marks
    one that is context only, a conversation's history."""
    return m.get("role") == "assistant" and m.get("weight", 1) != 0


def render_segments(
    messages: list[dict],
    tools: list[dict] | None = None,
    add_generation_prompt: bool = False,
    tool_descriptions: bool = False,
) -> list[tuple[str, bool]]:
    """The conversation as ``(text, is_assistant)`` segments whose concatenation is ``render(...)``.

    Each assistant body + ``<|im_end|>`` is one trainable segment (True); everything else,
    including the ``<|im_start|>assistant\\n`` header, is prompt (False). Leading system/developer
    messages and the tools block share the first system turn (system text first).
    """
    segs: list[tuple[str, bool]] = []
    i = 0
    system = []
    while i < len(messages) and messages[i].get("role") in ("system", "developer"):
        system.append(content_text(messages[i]))
        i += 1
    body = "\n".join(s for s in system if s)
    if tools:
        body = (body + "\n" if body else "") + tools_block(tools, tool_descriptions)
    if tools or system:
        segs.append((f"{IM_START}system\n{body}{IM_END}\n", False))
    while i < len(messages):
        m = messages[i]
        role = m.get("role") or "user"
        if role == "assistant":
            segs.append((f"{IM_START}assistant\n", False))
            segs.append((assistant_text(m) + IM_END, True))
            segs.append(("\n", False))
        elif role == "tool":  # consecutive tool results share one user turn, as in Qwen's template
            bodies = []
            while i < len(messages) and messages[i].get("role") == "tool":
                bodies.append(RESP_OPEN + content_text(messages[i]) + RESP_CLOSE)
                i += 1
            segs.append((f"{IM_START}user\n" + "\n".join(bodies) + f"{IM_END}\n", False))
            continue
        else:
            role = "system" if role == "developer" else role
            segs.append((f"{IM_START}{role}\n{content_text(m)}{IM_END}\n", False))
        i += 1
    if add_generation_prompt:
        segs.append((f"{IM_START}assistant\n", False))
    return segs


def render(
    messages: list[dict],
    tools: list[dict] | None = None,
    add_generation_prompt: bool = False,
    tool_descriptions: bool = False,
) -> str:
    """The whole conversation as one ChatML string."""
    return "".join(t for t, _ in render_segments(messages, tools, add_generation_prompt, tool_descriptions))


CLOVER_TEMPLATE = Path(__file__).with_name("chat_template.jinja")  # ``render`` as a Hugging Face chat template


def render_chat(
    messages: list[dict],
    tools: list[dict] | None = None,
    add_generation_prompt: bool = False,
    template: str | None = None,
) -> str:
    """The prompt text for a model whose tokenizer carries ``template`` (a Hugging Face chat
    template, e.g. a converted checkpoint's ``chat_template.jinja``): rendered by it, as
    transformers' ``apply_chat_template`` does. Without one, or with Clover's own, ``render``."""
    if template is None or template == _clover_template():
        return render(messages, tools, add_generation_prompt)
    return _compiled(template).render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)


@lru_cache(maxsize=1)
def _clover_template() -> str:
    return CLOVER_TEMPLATE.read_text()


@lru_cache(maxsize=8)
def _compiled(template: str):
    """A chat template compiled in a sandbox (templates come with checkpoints: untrusted), with the
    ``tojson`` filter and the ``raise_exception`` / ``strftime_now`` globals that Hugging Face
    templates use."""
    from jinja2 import TemplateError  # deferred: jinja2, only to render a chat template
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # deferred: jinja2, only to render a chat template

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def tokenize_segments(
    encode: Callable[[str], list[int]] | object, segments: list[tuple[str, bool]]
) -> tuple[list[int], list[bool]]:
    """Segments → (ids, is_target), one flag per token. ``encode`` is a callable or has ``.encode``.

    Segments are encoded one by one; this equals encoding the joined text whenever segment
    boundaries fall where the tokenizer never merges (after special tokens and before/after
    ``\\n``), which holds for Clover's tokenizer and Qwen's (tested for Clover's).
    """
    enc = encode if callable(encode) else encode.encode  # type: ignore[attr-defined]
    ids: list[int] = []
    target: list[bool] = []
    for text, is_target in segments:
        e = enc(text)
        ids += e
        target += [is_target] * len(e)
    return ids, target


def render_for_training(
    messages: list[dict], tools: list[dict] | None, encode: Callable[[str], list[int]] | object
) -> tuple[list[int], list[bool]]:
    """(ids, is_target) for one chat: assistant bodies + ``<|im_end|>`` are the targets."""
    return tokenize_segments(encode, render_segments(messages, tools))


def assistant_turns(messages: list[dict], tools: list[dict] | None = None) -> list[tuple[str, str]]:
    """For evaluation: one ``(prompt_text, gold_body)`` per assistant turn, where ``prompt_text``
    ends with the generation prompt and ``gold_body`` excludes ``<|im_end|>``."""
    out = []
    for j, m in enumerate(messages):
        if m.get("role") == "assistant":
            out.append((render(messages[:j], tools, add_generation_prompt=True), assistant_text(m)))
    return out


# -- parsing ------------------------------------------------------------------------------------
_DECODER = json.JSONDecoder()


_XML_FUNCTION = re.compile(r"^<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
_XML_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)", re.S)


def _parse_xml_call(body: str) -> dict | None:
    """Qwen3.5's own call format: ``<function=NAME><parameter=KEY>VALUE</parameter>…</function>``;
    a value that reads as JSON (a number, a list) is that value, else the text."""
    m = _XML_FUNCTION.match(body)
    if m is None or not m.group(1).strip():
        return None
    args = {}
    for key, raw in _XML_PARAM.findall(m.group(2)):
        try:
            args[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            args[key.strip()] = raw
    return {"name": m.group(1).strip(), "arguments": args}


def _parse_call(body: str) -> dict | None:
    body = body.strip()
    if body.startswith("<function="):
        return _parse_xml_call(body)
    try:
        obj, _ = _DECODER.raw_decode(body)  # raw_decode: trailing junk after the object is tolerated
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models emit arguments as a JSON string, as OpenAI messages do
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None
    return {"name": obj["name"], "arguments": args}


def parse_assistant(text: str, names: Collection[str] | None = None) -> tuple[str, list[dict]]:
    """Generated assistant text → ``(content, [{"name", "arguments": dict}, ...])``.

    Tolerates surrounding whitespace, several calls, text between calls, a missing final
    ``</tool_call>`` (the call runs to the end, or to the next ``<tool_call>``) and trailing
    ``<|im_end|>``/``<|endoftext|>``. A call whose JSON does not parse, or (given ``names``, the
    tools on offer) that names another function, is skipped and its raw text is kept in
    ``content`` (nothing is silently dropped, as vLLM's hermes parser does).
    """
    for stop in (IM_END, EOT):
        text = text.split(stop, 1)[0]
    calls: list[dict] = []
    kept: list[str] = []
    pos = 0
    while True:
        start = text.find(TOOL_OPEN, pos)
        if start < 0:
            kept.append(text[pos:])
            break
        kept.append(text[pos:start])
        body_start = start + len(TOOL_OPEN)
        ends = [e for e in (text.find(TOOL_CLOSE, body_start), text.find(TOOL_OPEN, body_start)) if e >= 0]
        end = min(ends) if ends else len(text)
        after = end + len(TOOL_CLOSE) if text.startswith(TOOL_CLOSE, end) else end
        call = _parse_call(text[body_start:end])
        if call is None or (names is not None and call["name"] not in names):
            kept.append(text[start:after])
        else:
            calls.append(call)
        pos = after
    content = "\n".join(p.strip() for p in kept if p.strip())
    return content, calls


def content_prefix(text: str) -> str:
    """For streaming: the part of ``text`` that is certainly plain content, i.e. everything before
    the first ``<tool_call>`` or before a trailing partial ``<tool_call``."""
    i = text.find(TOOL_OPEN)
    if i >= 0:
        return text[:i]
    for k in range(min(len(TOOL_OPEN) - 1, len(text)), 0, -1):
        if text.endswith(TOOL_OPEN[:k]):
            return text[:-k]
    return text


def openai_tool_calls(calls: list[dict], ids: list[str] | None = None) -> list[dict]:
    """Parsed calls → OpenAI ``tool_calls`` (arguments as a JSON string); ids default to ``call_<i>``."""
    ids = ids or [f"call_{i}" for i in range(len(calls))]
    return [
        {
            "id": cid,
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}), ensure_ascii=False)},
        }
        for cid, c in zip(ids, calls)
    ]
