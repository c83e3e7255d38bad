"""Accuracy on the airspace task with the engine: tool-call exact match, replies in words,
conversations with earlier turns, plain text and decision groups (``clover eval airspace`` prints
it, ``clover bench twin`` reuses the chats and the scoring). What is drawn and how each answer is
scored is a :class:`Scoring`: the task's is ``clover.airspace.scoring.SCORING``."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from clover.airspace.calls import answers, field_scores, gold_calls, plain_call, score_tool_calls
from clover.airspace.decision_groups import load_groups
from clover.airspace.extraction_tools import EXTRACTION_TOOLS
from clover.airspace.replies import reply_vocabulary
from clover.api.structured import tools_grammar
from clover.data.chat import TOOL_OPEN, is_answer, parse_assistant, render_chat
from clover.data.decision_chat import decision_messages, parse_joint
from clover.engine.grammar.grounding import SpanIndex, number_written, source_of, source_texts
from clover.engine.reply_grounding import ReplyGrammar, reply_sources


def prompt_of(ex: dict) -> list[dict]:
    """The messages before the first assistant turn to answer (earlier ones, ``weight: 0``, are
    a conversation's history)."""
    out = []
    for m in ex["messages"]:
        if is_answer(m):
            break
        out.append(m)
    return out


def load_cases(path: str) -> list[dict]:
    """Tool-call test messages from a JSONL file, one ``{"message", "gold": [{"name", "arguments"}],
    "system"?}`` per line (e.g. ``benchmarks/operator_messages.jsonl``, written by hand rather than
    by the corpus generator), as corpus examples offering the airspace tools (the gold calls may
    give lengths in either form: the scoring reads them in metres)."""
    out = []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise SystemExit(f"clover eval: --cases: {path}: {e.strerror}") from None
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                msg, gold = str(d["message"]), list(d["gold"])
                if not all(isinstance(c, dict) and "name" in c for c in gold):
                    raise TypeError("gold must be a list of {name, arguments}")
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise SystemExit(f'clover eval: {path}:{n}: expected {{"message": ..., "gold": [...]}} ({e})') from None
            msgs = [{"role": "system", "content": d["system"]}] if d.get("system") else []
            msgs += [{"role": "user", "content": msg}, {"role": "assistant", "content": "", "tool_calls": gold}]
            out.append(
                {"messages": msgs, "tools": EXTRACTION_TOOLS, "kind": "tool_call" if len(gold) == 1 else "compound"}
            )
    if not out:
        raise SystemExit(f"clover eval: {path}: no cases")
    return out


def reply_right(text: str | None, ex: dict) -> bool:
    """One answer scored: the gold calls by exact match; a reply in words, no call and the gold text."""
    content, calls = parse_assistant(text or "")
    if gold := gold_calls(ex):
        return score_tool_calls(calls, gold)
    return not calls and content.strip() == (answers(ex)[0].get("content") or "").strip()


def repeated_words(text: str | None) -> set[str]:
    """Words said twice in a row ("fly fly"), lower-cased, in the words of a reply (tool-call
    markup, well-formed or not, is left out): the stutter of positions that guessed one word twice
    in the same pass."""
    words = re.sub(r"<tool_call>.*?(</tool_call>|$)", " ", text or "", flags=re.S)
    words = re.findall(r"[a-z0-9']+", words.lower())
    return {a for a, b in zip(words, words[1:]) if a == b}


def stutters(text: str | None, ex: dict) -> bool:
    """A reply in words that repeats a word its gold text does not repeat."""
    return bool(repeated_words(text) - repeated_words(answers(ex)[0].get("content")))


@dataclass(frozen=True)
class Scoring:
    """What one airspace task's evaluation draws and how it scores: ``chats(split, n, n_text,
    n_multi, cases)`` → (tool-call turns, turns answered in words, conversations); ``calls``: calls
    as compared (the task reads lengths in metres); ``unit``: a tool-call turn's length
    label; ``reply_right(text, ex)``: a reply in words or a conversation's last turn scored;
    ``plain(split, n)``: plain-text prompts a completion continues (None: none), each scored by
    ``plain_right(text, prompt)`` against its held-out continuation; ``names(ex)``:
    the (family, name) pairs a chat copies, with ``held_out(family)`` saying which families
    training never saw."""

    chats: Callable[..., tuple[list[dict], list[dict], list[dict]]]
    calls: Callable[[list[dict]], list[dict]] = list
    unit: Callable[[dict, str], str] = lambda ex, message: "none"
    reply_right: Callable[[str | None, dict], bool] = reply_right
    plain: Callable[[str, int], list[dict]] | None = None
    plain_right: Callable[[str | None, dict], bool] | None = None
    names: Callable[[dict], list[tuple[str, str]]] | None = None
    held_out: Callable[[str], bool] = lambda family: False


def evaluate_airspace(
    model,
    tok,
    split: str = "test",
    policy: str | None = None,
    threshold: float | None = None,
    n: int = 200,
    n_groups: int = 50,
    block_size: int | None = None,
    batch_size: int = 16,
    progress: bool = True,
    errors: list | None = None,
    cases: list[dict] | None = None,
    grammar: bool | str = False,
    n_text: int = 0,
    n_multi: int = 0,
    n_plain: int = 0,
    scoring: Scoring | None = None,
    grounded_reply: bool = False,
    reply_judge: Callable[[str, list[dict]], dict] | None = None,
    ends: str | None = None,
) -> dict:
    """Exact match and decision-group accuracy on ``split``, plus where tool-call misses come from
    (``by_kind``: exact match per message kind; ``fields``: accuracy per tool / argument of the
    calls as the world reads them, ``scoring.calls``: a length is ``radius_m``/``altitude_m`` in
    either form of values, a time ``HH:MM``; see ``calls.field_scores``).
    Failed tool-call turns are appended to ``errors`` when given.

    ``n_text``: also that many of the split's turns answered in words (a chat without the
    needed tool or argument, small talk, out of scope) and as many chats that offer no tools at
    all (a plain OpenAI request): right when the reply has no call and is the gold text.

    ``grammar``: the tool-call turns decode under the tool-call grammar of their tools, as the
    server decodes a chat with ``tools`` (``tool_choice: auto``: free text, and a call the model
    opens held to the offered names and their parameter schemas), ``x-grounded`` arguments copied
    from the conversation; ``"ungrounded"``: the grammar without grounding. ``ungrounded_args``
    counts the predicted grounded arguments whose value is not in their source, under any decoding
    (without grounding: how often the model alone invents one).

    ``n_multi``: also that many conversations with earlier turns (``corpus.multiturn_set``: an
    agent loop's or a chat client's later request), right when the last turn's answer is (the
    calls by exact match, a reply in words by its text).

    ``n_plain``: also that many plain-text prompts continued without the chat template (a
    ``/v1/completions`` request), right when ``scoring.plain_right`` finds the held-out
    continuation (tasks whose ``scoring`` has ``plain``). ``scoring``: the task's by default.

    ``grounded_reply`` (with ``grammar``): every chat's reply in words held to its conversation's
    numbers, ids, names and words, as a request with ``grounded_reply`` (``clover.engine.reply_grounding``).
    ``reply_judge(reply, messages)`` (``clover.bench.replies.reply_check`` with a vocabulary):
    the conversations whose last turn follows tool results and is answered in words are judged
    by it (``replies_after_tools``: ids grounded, words well formed, both).

    ``ends`` (with ``grammar``): where a grounded string ends, ``"token"`` by token or ``"span"``
    chosen whole (``Grammar.with_sources``; None: the grammar's default)."""
    from clover.engine import Engine, SamplingParams  # deferred: torch, not for clover --help
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch, not for clover --help

    policy, threshold = policy or DEFAULT_POLICY, DEFAULT_THRESHOLD if threshold is None else threshold
    label = policy + {False: "", True: "+grammar", "ungrounded": "+grammar-ungrounded"}[grammar]
    params = SamplingParams(max_tokens=320, policy=policy, threshold=threshold, block_size=block_size)
    if scoring is None:  # the task's, in the form of values the model was trained on
        from clover.airspace.scoring import scoring_for  # deferred: the scoring imports this module

        scoring = scoring_for(model)
    exs, texts, convs = scoring.chats(split, n, n_text, n_multi, cases)
    plains = scoring.plain(split, n_plain) if scoring.plain and n_plain and cases is None else []
    groups = load_groups(split, n_groups)
    if grounded_reply and not grammar:
        raise ValueError("grounded_reply holds the text around the tool-call grammar: it needs grammar")
    prompts, plist = _requests(tok, exs + texts + convs, groups, params, grammar, plains, grounded_reply, ends)
    t0 = time.perf_counter()
    outs = _generate(Engine(model, tok, max_batch_size=batch_size), prompts, plist, batch_size, label, progress)
    wall = time.perf_counter() - t0
    head = _head(split if cases is None else "cases", label, threshold, grammar, ends)
    out = {**head, **_figures(outs, (exs, texts, convs, plains), groups, label, errors, wall, scoring)}
    if reply_judge is not None:
        at = len(exs) + len(texts)
        out["replies_after_tools"] = _replies_after_tools(outs[at : at + len(convs)], convs, reply_judge)
    return out


def _head(split: str, label: str, threshold: float, grammar, ends: str | None) -> dict:
    """What was run: the split, the decoding, and where grounded strings end (``Grammar.with_sources``)."""
    head = {"split": split, "policy": label, "threshold": threshold}
    if grammar is True:
        from clover.engine.grammar.automaton import DEFAULT_ENDS  # deferred: the engine

        head["ends"] = ends or DEFAULT_ENDS
    return head


def _replies_after_tools(outs, convs: list[dict], judge) -> dict:
    """The conversations whose prompt holds tool results and whose answer is words, no call:
    the share whose numbers and ids are grounded, whose words are well formed, and both."""
    checks = []
    for o, e in zip(outs, convs):
        content, calls = parse_assistant(o.text or "")
        msgs = prompt_of(e)
        if not calls and any(m.get("role") == "tool" for m in msgs):
            checks.append(judge(content, msgs))
    n = max(1, len(checks))
    return {
        "n": len(checks),
        "ids_grounded": sum(not c["ungrounded"] for c in checks) / n,
        "well_formed": sum(not c["broken"] for c in checks) / n,
        "faithful": sum(not c["ungrounded"] and not c["broken"] for c in checks) / n,
    }


def _requests(
    tok,
    chats: list[dict],
    groups,
    params,
    grammar: bool,
    plains: list[dict] = (),
    grounded_reply: bool = False,
    ends: str | None = None,
) -> tuple[list, list]:
    """The prompts of the chats, the plain texts, then the decision groups, and each one's
    sampling parameters: with ``grammar`` a chat's are held to its tools' grammar (``tools_grammar``
    compiles each tool set once), with ``grounded_reply`` its words too (``ReplyGrammar``, the word
    rule with the task's reply vocabulary)."""
    template = getattr(tok, "chat_template", None)
    prompts = [tok.encode(render_chat(prompt_of(e), e["tools"], True, template)) for e in chats]
    prompts += [tok.encode(p["prompt"]) for p in plains]
    prompts += [tok.encode(render_chat(decision_messages(g, "joint")[:1], None, True, template)) for g in groups]
    plist = [params] * len(prompts)
    vocabulary = reply_vocabulary() if grounded_reply else None  # the task's, as the server's default
    if grammar:
        for i, e in enumerate(chats):
            g = tools_grammar(e["tools"])
            if g is not None and grammar is True:  # as the server: x-grounded values from this conversation
                g = g.with_sources(source_texts(prompt_of(e)), ends=ends)
            if grounded_reply:  # as the server with grounded_reply: around the calls, or alone without tools
                g = ReplyGrammar(reply_sources(prompt_of(e)), g, TOOL_OPEN if g is not None else "", vocabulary)
            plist[i] = dataclasses.replace(params, grammar=g)
    return prompts, plist


def _generate(engine, prompts: list[list[int]], plist: list, batch_size: int, label: str, progress: bool) -> list:
    """Every prompt answered, ``batch_size`` at a time, with a progress bar when asked."""
    from tqdm import tqdm  # deferred: only an evaluation draws a bar

    outs = []
    bar = tqdm(total=len(prompts), desc=f"eval {label}", disable=not progress)
    for i in range(0, len(prompts), batch_size):
        outs += engine.generate_batch(prompts[i : i + batch_size], plist[i : i + batch_size])
        bar.update(len(prompts[i : i + batch_size]))
    bar.close()
    return outs


def _figures(outs: list, sets, groups, label: str, errors: list | None, wall: float, scoring: Scoring) -> dict:
    """The scores of every answer: tool calls, replies in words, conversations, plain texts,
    decision groups (``sets``: the first four's chats, in the order they were asked)."""
    exs, texts, convs, plains = sets
    at = [0]
    for s in sets:
        at.append(at[-1] + len(s))
    part = lambda i: outs[at[i] : at[i + 1]]
    calls = _tool_call_figures(part(0), exs, label, errors, scoring)
    t_ok = _right_by(part(1), texts, "kind", scoring.reply_right)
    m_ok = _right_by(part(2), convs, "final_kind", scoring.reply_right)  # by the last turn's kind
    p_ok = [scoring.plain_right(o.text, p) for o, p in zip(part(3), plains)] if plains else []
    g_ok = [
        parse_joint(o.text or "", g.questions) == [q.answer for q in g.questions]
        for o, g in zip(outs[at[-1] :], groups)
    ]
    tokens = sum(len(o.token_ids) for o in outs)
    forwards = sum(o.stats.get("forward_passes", 0) for o in outs)
    right = sum(calls["right"]) + sum(map(sum, t_ok.values())) + sum(map(sum, m_ok.values())) + sum(p_ok) + sum(g_ok)
    out = {
        "n": len(exs),
        "exact_match": calls["exact_match"],
        "decision_groups": len(groups),
        "decision_group_acc": sum(g_ok) / max(1, len(g_ok)),
        "text_turns": len(texts),  # replies in words (n_text): accuracy overall and per kind
        "text_acc": sum(map(sum, t_ok.values())) / max(1, len(texts)),
        "text_by_kind": {k: sum(v) / len(v) for k, v in sorted(t_ok.items())},
        "text_n_by_kind": {k: len(v) for k, v in sorted(t_ok.items())},
        # replies in words that repeat a word their gold text does not ("fly fly fly")
        "text_stutter": sum(stutters(o.text, e) for o, e in zip(part(1), texts)) / max(1, len(texts)),
        # not a score: replies in words that have words and call no tool, whatever the words say
        "text_no_call": sum(map(_words_no_call, part(1))) / max(1, len(texts)),
        "multiturn_n": len(convs),  # conversations with earlier turns (n_multi): the last turn right
        "multiturn_acc": sum(map(sum, m_ok.values())) / max(1, len(convs)),
        "multiturn_by_kind": {k: sum(v) / len(v) for k, v in sorted(m_ok.items())},
        "multiturn_n_by_kind": {k: len(v) for k, v in sorted(m_ok.items())},
        "overall_acc": right / max(1, len(outs)),  # every scored answer of every kind, one vote each
        "tpf": tokens / max(1, forwards),
        "tokens_per_s": tokens / max(1e-9, wall),
        "wall_s": wall,
        "by_kind": calls["by_kind"],
        "by_system_prompt": calls["by_system_prompt"],  # a client system message or not
        "by_unit_arithmetic": calls["by_unit_arithmetic"],  # the turn's lengths (scoring.unit)
        "fields": calls["fields"],
        # predicted x-grounded arguments, and those whose value is not in their source (0 under grounding)
        "grounded_args": calls["grounded_args"],
        "ungrounded_args": calls["ungrounded_args"],
    }
    if scoring.reply_right is not reply_right:  # a reply's words scored apart from its exact text
        out["text_exact"] = sum(reply_right(o.text, e) for o, e in zip(part(1), texts)) / max(1, len(texts))
    if scoring.plain is not None:
        out["plain_n"], out["plain_acc"] = len(plains), sum(p_ok) / max(1, len(plains))
    if scoring.names is not None:  # names copied exactly, in the tool-call turns and the conversations
        out["names_copied"] = names_copied(part(0) + part(2), exs + convs, scoring)
        out["name_edges"] = name_edges(part(0) + part(2), exs + convs, scoring)
        out["held_out_families"] = sorted(f for f in out["name_edges"] if scoring.held_out(f))
    return out


def _words_no_call(out) -> bool:
    """The answer has words (a letter or digit) and no call: it declined to call a tool."""
    content, calls = parse_assistant(out.text or "")
    return not calls and bool(re.search(r"\w", content))


def names_copied(outs, exs: list[dict], scoring: Scoring) -> dict[str, float]:
    """The share of the gold calls' names that some predicted call carries exactly, for names
    of families training never saw (``held out``) and of the others (``trained``)."""
    tally = {"held out": [0, 0], "trained": [0, 0]}
    for o, e in zip(outs, exs):
        gold = [v for c in gold_calls(e) for v in c["arguments"].values() if isinstance(v, str)]
        said = {
            v
            for c in parse_assistant(o.text or "")[1]
            for v in plain_call(c)["arguments"].values()
            if isinstance(v, str)
        }
        for family, name in scoring.names(e):
            if name in gold:
                t = tally["held out" if scoring.held_out(family) else "trained"]
                t[0], t[1] = t[0] + (name in said), t[1] + 1
    return {k: r / t for k, (r, t) in tally.items() if t}


NAME_KEYS = ("zone_name", "target")
EDGE_KINDS = ("right", "cut_short", "run_long", "overlap", "other_span", "missing")


def name_edge(name: str, said: list[str]) -> str:
    """How the names an answer gave for a gold name's argument compare with it: ``right``, ``cut_short``
    (the answer's is the gold's beginning), ``run_long`` (the gold inside a longer one), ``overlap``
    (they share a word at one's end and the other's start), ``other_span``, or ``missing`` (none)."""
    if name in said:
        return "right"
    if not said:
        return "missing"
    if any(p and name.startswith(p) for p in said):
        return "cut_short"
    if any(name in p for p in said):
        return "run_long"
    words = name.split()
    for p in said:
        pw = p.split()
        if any(pw[-k:] == words[:k] or words[-k:] == pw[:k] for k in range(1, min(len(pw), len(words)) + 1)):
            return "overlap"
    return "other_span"


def name_edges(outs, exs: list[dict], scoring: Scoring) -> dict[str, dict[str, int]]:
    """Per name family, how each gold name came out (``name_edge``): beside the share copied
    exactly, where a wrong name ends (cut short, run long) or which other span it took."""
    out: dict[str, dict[str, int]] = {}
    for o, e in zip(outs, exs):
        pred = [plain_call(c)["arguments"] for c in parse_assistant(o.text or "")[1]]
        for c in gold_calls(e):
            for key in NAME_KEYS:
                name = c["arguments"].get(key)
                family = next((f for f, n in scoring.names(e) if n == name), None)
                if family is None:
                    continue
                said = [a[key] for a in pred if isinstance(a, dict) and isinstance(a.get(key), str)]
                counts = out.setdefault(family, dict.fromkeys(EDGE_KINDS, 0))
                counts[name_edge(name, said)] += 1
    return out


def _tool_call_figures(outs, exs: list[dict], label: str, errors: list | None, scoring: Scoring) -> dict:
    """Exact match of the tool-call turns, and per message kind, system prompt, length unit
    and call field (``corpus.field_scores``); the failed turns are appended to ``errors``."""
    ok, kinds, systems, units, fields = [], {}, {}, {}, {}
    grounded_args = ungrounded = 0
    for o, e in zip(outs, exs):
        pred, gold = parse_assistant(o.text or "")[1], gold_calls(e)
        n, bad = ungrounded_args(pred, e["tools"], source_texts(prompt_of(e)))
        grounded_args, ungrounded = grounded_args + n, ungrounded + bad
        ok.append(score_tool_calls(scoring.calls(pred), scoring.calls(gold)))
        message = prompt_of(e)[-1]["content"]
        has_system = "with" if e["messages"][0]["role"] == "system" else "without"
        unit = scoring.unit(e, message)
        for table, key in ((kinds, e["kind"]), (systems, has_system), (units, unit)):
            k = table.setdefault(key, [0, 0])
            k[0], k[1] = k[0] + ok[-1], k[1] + 1
        for f, (right, total) in field_scores(scoring.calls(pred), scoring.calls(gold)).items():
            r = fields.setdefault(f, [0, 0])
            r[0], r[1] = r[0] + right, r[1] + total
        if errors is not None and not ok[-1]:
            errors.append({"policy": label, "message": message, "gold": gold, "predicted": pred, "text": o.text})
    return {
        "right": ok,
        "exact_match": sum(ok) / max(1, len(ok)),
        "by_kind": {k: r / t for k, (r, t) in sorted(kinds.items())},
        "by_system_prompt": {k: r / t for k, (r, t) in sorted(systems.items())},
        "by_unit_arithmetic": {k: r / t for k, (r, t) in sorted(units.items())},
        "fields": {f: r / t for f, (r, t) in sorted(fields.items(), key=lambda kv: kv[1][0] / kv[1][1])},
        "grounded_args": grounded_args,
        "ungrounded_args": ungrounded,
    }


def ungrounded_args(calls: list[dict], tools: list[dict] | None, sources: dict[str, str]) -> tuple[int, int]:
    """(grounded arguments in ``calls``, those whose value is not in their source): a string that
    is no span of it, a number not written in it (``clover.engine.grammar.grounding``'s rules)."""
    props = {
        t["function"]["name"]: (t["function"].get("parameters") or {}).get("properties") or {} for t in tools or []
    }
    spans: dict[str, SpanIndex] = {}
    n = bad = 0
    for c in calls:
        args = c.get("arguments")
        for k, v in args.items() if isinstance(args, dict) else ():
            src = source_of((props.get(c.get("name")) or {}).get(k, {}).get("x-grounded", False))
            if src is None:
                continue
            text = sources.get(src, "")
            if src not in spans:
                spans[src] = SpanIndex(text)
            n += 1
            bad += not (spans[src].contains(v) if isinstance(v, str) else number_written(v, text))
    return n, bad


def _right_by(outs, exs: list[dict], key: str, right_fn) -> dict[str, list[bool]]:
    """Each answer scored by ``right_fn(text, example)``, grouped by the example's ``key``."""
    right: dict[str, list[bool]] = {}
    for o, e in zip(outs, exs):
        right.setdefault(e[key], []).append(right_fn(o.text, e))
    return right
