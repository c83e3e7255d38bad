"""Models of either airspace task side by side on the second corpus's validation chats (and on
hand-written messages): the check a retrained model must pass before it replaces the bundled one.

Each model is offered the six tools of its own task (``model_task``: the bundled model the metres
tools, an ``airspace2`` model the extraction tools) and its calls are scored by what they do: a
length in either form is read in whole metres (``tools.in_metres``) before the exact match, so
``{"radius": 1.5, "radius_unit": "nm"}`` and ``{"radius_m": 2778}`` are the same call. A turn
answered in words is right when the model makes no call.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from decimal import InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

from clover.airspace.calls import plain_call, score_tool_calls
from clover.airspace.chats import load_split
from clover.airspace.extraction_tools import (
    EXTRACTION_TOOLS,
    drone_key,
    in_metres,
    uses_units,
    with_unit_names,
)
from clover.airspace.values import as_written
from clover.data.task import model_task

if TYPE_CHECKING:
    from clover.api.llm import LLM

SCORED_KINDS = ("tool_call", "compound", "follow_up", "unserved", "clarify", "no_tool")


def in_metres_calls(calls: list[dict]) -> list[dict]:
    """Calls (any form) as ``{"name", "arguments"}`` as the world reads them: lengths in metres,
    times ``HH:MM``, drone ids ``D-<n>`` ("2.5 km" and ``{"radius": 2.5, "radius_unit": "km"}``,
    "6pm" and "18:00", "drone 17" and "D-17" are the same; ``values.as_written``); a value that
    cannot be read is left as it is (and so matches nothing)."""
    out = []
    for c in map(plain_call, calls):
        args = c["arguments"]
        if isinstance(args, dict) and "drone_id" in args:
            args = {**args, "drone_id": drone_key(args["drone_id"])}
        read, problem = as_written(c["name"], args)
        args = read if problem is None else args
        if uses_units(c["name"], args):
            try:
                metres, _ = in_metres(c["name"], with_unit_names(c["name"], args))
            except (TypeError, ValueError, InvalidOperation):
                metres = None
            args = metres if metres is not None else args
        out.append({"name": c["name"], "arguments": args})
    return out


def validation_chats(n: int) -> list[dict]:
    """The first ``n`` validation chats of the kinds scored here (calls, follow-ups, replies in words)."""
    return [ex for ex in load_split("validation", 4 * n) if ex["kind"] in SCORED_KINDS][:n]


def case_chats(path: str | Path) -> list[dict]:
    """Hand-written messages (``{"message", "gold", "system"?}`` per line, gold in either form)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        msgs = [{"role": "system", "content": d["system"]}] if d.get("system") else []
        gold = {"role": "assistant", "content": "" if d["gold"] else "(words)", "tool_calls": d["gold"]}
        kind = "tool_call" if len(d["gold"]) == 1 else "compound" if d["gold"] else "unserved"
        out.append(
            {
                "kind": kind,
                "tools": EXTRACTION_TOOLS,
                "messages": [*msgs, {"role": "user", "content": d["message"]}, gold],
            }
        )
    return out


def score(
    llm: LLM, chats: list[dict], policy: str = "ar", max_tokens: int = 200, block_size: int | None = None
) -> dict:
    """Exact match of one model over ``chats`` (overall and by kind), its tokens per pass and
    tokens per second, at ``block_size`` (None: the model's own). A chat that offers tools is
    offered all six in the model's own form (a chat's subset always holds the tools it needs), so
    the chats run as one batch; a chat without tools runs without."""
    own = model_task(llm.config, default=True).offered(llm.config)
    groups: dict[bool, list[int]] = defaultdict(list)
    for i, ex in enumerate(chats):
        groups[ex["tools"] is not None].append(i)
    right, by_kind = [False] * len(chats), defaultdict(lambda: [0, 0])
    tokens = passes = 0
    wall = 0.0
    for offered, idx in groups.items():
        tools = own if offered else None
        convs = [[{k: v for k, v in m.items() if k != "weight"} for m in chats[i]["messages"][:-1]] for i in idx]
        t0 = time.perf_counter()
        outs = llm.chat(convs, tools=tools, policy=policy, max_tokens=max_tokens, temperature=0, block_size=block_size)
        wall += time.perf_counter() - t0
        for i, out in zip(idx, outs):
            gold = chats[i]["messages"][-1].get("tool_calls") or []
            calls = out["choices"][0]["message"].get("tool_calls") or []
            ok = score_tool_calls(in_metres_calls(calls), in_metres_calls(gold)) if gold else not calls
            right[i] = ok
            by_kind[chats[i]["kind"]][0] += ok
            by_kind[chats[i]["kind"]][1] += 1
            tokens += out["clover"]["tokens"]
            passes += out["clover"]["forward_passes"]
    return {
        "n": len(chats),
        "exact": sum(right) / max(1, len(chats)),
        "by_kind": {k: v[0] / v[1] for k, v in sorted(by_kind.items())},
        "tpf": tokens / max(1, passes),
        "tokens_per_s": tokens / max(1e-9, wall),
    }


def compare(
    models: dict[str, str | None],
    n: int = 200,
    cases: list[str] = (),
    policy: str = "ar",
    device: str | None = None,
    threads: int | None = None,
    case_n: int | None = None,
    block_size: int | None = None,
) -> dict:
    """``{model name: {"validation": figures, <case file stem>: figures}}`` for every model
    (``case_n``: only the first messages of each cases file)."""
    from clover.api.llm import LLM  # deferred: the engine and torch

    sets = {"validation": validation_chats(n), **{Path(p).stem: case_chats(p)[:case_n] for p in cases}}
    out = {}
    for name, path in models.items():
        llm = LLM(path, device=device, threads=threads)
        out[name] = {
            "task": model_task(llm.config, default=True).name,
            **{k: score(llm, chats, policy, block_size=block_size) for k, chats in sets.items()},
        }
    return out
