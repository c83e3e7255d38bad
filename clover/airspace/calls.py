"""Tool calls as the airspace task compares them: a call in OpenAI's form or as ``{"name",
"arguments": dict}``, a chat's gold calls, exact match (the order of parallel calls ignored,
numbers compared as numbers) and where a miss comes from, field by field."""

from __future__ import annotations

import json

from clover.data.chat import is_answer


def _call(i: int, name: str, args: dict) -> dict:
    """Call ``i`` of an assistant turn in OpenAI's form (arguments as JSON text)."""
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def plain_call(call: dict) -> dict:
    """``{"name", "arguments": dict}`` from that form or the OpenAI form (arguments as JSON text)."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            args = {"_unparsed": args}
    return {"name": fn.get("name"), "arguments": args if args is not None else {}}


def answers(ex: dict) -> list[dict]:
    """The assistant turns to answer (not the ``weight: 0`` ones: a conversation's history)."""
    return [m for m in ex["messages"] if is_answer(m)]


def gold_calls(ex: dict, turn: int = 0) -> list[dict]:
    """Answer ``turn``'s calls as ``[{"name", "arguments": dict}]`` ([] for a text turn)."""
    turns = answers(ex)
    return [plain_call(c) for c in turns[turn].get("tool_calls") or []] if turn < len(turns) else []


def field_scores(pred_calls: list[dict], gold_calls: list[dict]) -> dict[str, list[int]]:
    """Where a miss comes from, as ``{field: [right, total]}``: ``tool`` (each gold call has a
    predicted call of its name; each predicted call serves once, the best-agreeing first), every
    gold argument by its key (the matched call has the same value), ``no_extra_args`` (the
    matched call adds no argument the gold lacks) and ``call_count``."""
    pred = [plain_call(c) for c in pred_calls]
    out: dict[str, list[int]] = {}

    def add(field: str, right: bool) -> None:
        r = out.setdefault(field, [0, 0])
        r[0] += int(right)
        r[1] += 1

    free = list(range(len(pred)))
    for g in map(plain_call, gold_calls):
        args = g["arguments"] if isinstance(g["arguments"], dict) else {}
        same = [i for i in free if pred[i]["name"] == g["name"]]
        agree = lambda i: sum(_norm(_args(pred[i]).get(k)) == _norm(v) for k, v in args.items())
        m = max(same, key=agree) if same else None
        add("tool", m is not None)
        got = _args(pred[m]) if m is not None else {}
        for k, v in args.items():
            add(k, k in got and _norm(got[k]) == _norm(v))
        if m is not None:
            free.remove(m)
            add("no_extra_args", set(got) <= set(args))
    add("call_count", len(pred) == len(gold_calls))
    return out


def _args(call: dict) -> dict:
    a = call.get("arguments")
    return a if isinstance(a, dict) else {}


def _norm(v):
    """Hashable canonical form: numbers as floats (1 == 1.0); bools, strings, None kept apart."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, int | float):
        return ("num", float(v))
    if isinstance(v, dict):
        return ("obj", tuple(sorted((str(k), _norm(x)) for k, x in v.items())))
    if isinstance(v, list | tuple):
        return ("arr", tuple(_norm(x) for x in v))
    return ("other", repr(v))


def score_tool_calls(pred_calls: list[dict], gold_calls: list[dict]) -> bool:
    """Exact match: the same multiset of (name, arguments), the order of parallel calls ignored,
    numbers compared as numbers. Calls may be ``{"name", "arguments"}`` or OpenAI-format."""
    key = lambda c: repr((c["name"], _norm(c["arguments"])))
    return sorted(key(plain_call(c)) for c in pred_calls) == sorted(key(plain_call(c)) for c in gold_calls)
