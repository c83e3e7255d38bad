"""How the default policy was chosen: commit rules measured against ``ar`` on the validation split.

Every validation turn of every kind (tool calls, replies in words, conversations with earlier
turns, decision groups) is decoded once with ``ar`` and once with each candidate rule. Each
candidate gets its accuracy per kind, its TPF, and the share of answers whose tokens are exactly
``ar``'s (a finer measure than accuracy: it moves with every token a parallel commit changes).
A last column decodes ``benchmarks/small_talk.txt`` (small talk written for this check, not in
the corpus's phrasings) with the airspace tools offered: how many replies equal ``ar``'s.
``--calibration`` also prints how often a token committed to the right of the leftmost open
position (a run's extension) differs from ``ar``'s, by its confidence and token kind.

The candidates that are not registered policies live here: they were measured and not kept.

python benchmarks/policy_design.py [--rules prefix@0.9,prefix@0.95,...] [--calibration] [--json out.json]
"""

from __future__ import annotations

import argparse

import torch

from clover.airspace.decision_groups import load_groups
from clover.airspace.evaluate import prompt_of
from clover.airspace.extraction_tools import EXTRACTION_TOOLS
from clover.airspace.scoring import eval_chats2, reply_right2
from clover.api.loading import load_model_dir
from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.data.chat import render_chat
from clover.data.decision_chat import decision_messages, parse_joint
from clover.engine import Engine, SamplingParams
from clover.engine.batch import Batch
from clover.engine.policies import POLICIES, PassView, Policy, first_open, register, run_from_first


class RunProduct(Policy):
    """A run extends while the product of its extensions' confidences stays >= τ."""

    name = "run-product"

    def commit(self, v: PassView) -> torch.Tensor:
        logc = torch.where(v.cand & ~first_open(v), v.conf.clamp_min(1e-9).log(), torch.zeros_like(v.conf))
        return run_from_first(v, logc.cumsum(1) >= v.threshold.log()[:, None])


class SureFirst(Policy):
    """A run extends only while every position of it, the first included, has p >= τ."""

    name = "sure-first"

    def commit(self, v: PassView) -> torch.Tensor:
        sure = v.cand & (v.conf >= v.threshold[:, None])
        return (sure | ~v.cand).long().cumprod(1).bool() & v.cand | first_open(v)


class Digits(Policy):
    """prefix, but a token with a digit in it extends a run only at p >= 1 - (1 - τ) / 10.
    ``far``: also commit positions right of an open gap at p >= 1 - (1 - τ) * far (never a stop
    token or a digit)."""

    def __init__(self, name: str, digit: torch.Tensor, far: float = 0.0):
        self.name, self.digit, self.far = name, digit, far

    def commit(self, v: PassView) -> torch.Tensor:
        tau = v.threshold[:, None]
        dig = self.digit[v.tok]
        run = run_from_first(v, v.cand & (v.conf >= torch.where(dig, 1 - (1 - tau) / 10, tau)))
        if self.far:
            run |= v.cand & (v.conf >= 1 - (1 - tau) * self.far) & ~dig & ~v.stop
        return run


def _prompts(tok, split: str, n: int) -> tuple[list[list[int]], list[str], list]:
    exs, texts, convs = eval_chats2(split, n, n // 2, n // 2)
    groups = load_groups(split, n // 4)
    template = getattr(tok, "chat_template", None)
    chats = exs + texts + convs
    prompts = [tok.encode(render_chat(prompt_of(e), e["tools"], True, template)) for e in chats]
    prompts += [tok.encode(render_chat(decision_messages(g, "joint")[:1], None, True, template)) for g in groups]
    kinds = ["tool calls"] * len(exs) + ["words"] * len(texts) + ["conversations"] * len(convs)
    return prompts, kinds + ["decision groups"] * len(groups), chats + groups


def _decode(model, tok, prompts, params) -> dict:
    engine = Engine(model, tok, max_batch_size=16)
    outs = []
    for i in range(0, len(prompts), 16):
        outs += engine.generate_batch(prompts[i : i + 16], [params] * len(prompts[i : i + 16]))
    tokens = sum(len(o.token_ids) for o in outs)
    return {"outs": outs, "tpf": tokens / max(1, sum(o.stats["forward_passes"] for o in outs))}


def _right(text: str | None, item) -> bool:
    if isinstance(item, dict):
        return reply_right2(text, item)
    return parse_joint(text or "", item.questions) == [q.answer for q in item.questions]


def _calibration(model, tok, prompts, ref: list[list[int]], tau: float) -> list[list]:
    """Extensions of ``prefix`` at a low τ whose left context equals ``ar``'s, by confidence and
    kind of token: how often each differs from ``ar``'s token there."""
    seen = []
    apply = Batch.apply

    def spy(self, choice, commit, edit):
        for r, req in enumerate(self.requests):
            cand = self.masked[r] & self.need[r]
            if cand.any():
                seen.append(
                    (
                        req.id,
                        req.block_start - len(req.prompt),
                        int(cand.nonzero()[0]),
                        commit[r].nonzero()[:, 0].tolist(),
                        choice.tok[r].tolist(),
                        choice.conf[r].tolist(),
                        self.x[r].tolist(),
                    )
                )
        return apply(self, choice, commit, edit)

    Batch.apply = spy
    try:
        outs = _decode(model, tok, prompts, SamplingParams(max_tokens=320, policy="prefix", threshold=tau))["outs"]
    finally:
        Batch.apply = apply
    index = {o.request_id: k for k, o in enumerate(outs)}
    bins = [0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999, 1.01]
    counts: dict[tuple[str, int], list[int]] = {}  # (token kind, bin) -> [extensions, differing]
    for rid, base, first, commits, toks, confs, x in seen:  # base: the generated index of block position 0
        want = ref[index[rid]]
        if any(base + i >= 0 and (base + i >= len(want) or x[i] != want[base + i]) for i in range(first)):
            continue  # the context already left ar's path: nothing to compare with
        for i in sorted(commits):
            g = base + i
            if g >= len(want) - 1:
                break
            if i > first and confs[i] >= bins[0]:
                piece = tok.decode([toks[i]])
                kind = (
                    "digit"
                    if any(c.isdigit() for c in piece)
                    else "letters"
                    if any(c.isalpha() for c in piece)
                    else "other"
                )
                b = next(j for j in range(len(bins) - 1) if confs[i] < bins[j + 1])
                for key in ((kind, b), ("all", b)):
                    c = counts.setdefault(key, [0, 0])
                    c[0], c[1] = c[0] + 1, c[1] + (toks[i] != want[g])
            if toks[i] != want[g]:
                break  # later positions of this run were chosen beside a wrong token
    rows = []
    for kind in ("all", "digit", "letters", "other"):
        for b in range(len(bins) - 1):
            n, wrong = counts.get((kind, b), (0, 0))
            if n:
                rows.append([kind, f"[{bins[b]:g}, {min(1, bins[b + 1]):g})", n, f"{100 * wrong / n:.2f} %"])
    return rows


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--rules",
        default="threshold@0.9,prefix@0.9,prefix@0.93,prefix@0.95,prefix@0.97,sure-first@0.9,"
        "run-product@0.9,digits@0.9,digits@0.95,digits+far0.1@0.9,digits+far0.01@0.9",
    )
    p.add_argument("--split", default="validation")
    p.add_argument("--n", type=int, default=200, help="tool-call turns (half as many of words and conversations)")
    p.add_argument("--small-talk", default="benchmarks/small_talk.txt", help="one message a line")
    p.add_argument("--calibration", action="store_true", help="also the extension table (prefix at τ 0.3)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    set_threads(args.threads)
    model, tok = load_model_dir(None, args.threads)
    digit = torch.tensor([any(c.isdigit() for c in tok.decode([i])) for i in range(model.config.vocab_size)])
    for rule in (
        RunProduct(),
        SureFirst(),
        Digits("digits", digit),
        Digits("digits+far0.1", digit, 0.1),
        Digits("digits+far0.01", digit, 0.01),
    ):
        if rule.name not in POLICIES:
            register(rule)
    prompts, kinds, items = _prompts(tok, args.split, args.n)
    ref = _decode(model, tok, prompts, SamplingParams(max_tokens=320, policy="ar"))
    ref_ids = [o.token_ids for o in ref["outs"]]
    template = getattr(tok, "chat_template", None)
    talk = [
        tok.encode(render_chat([{"role": "user", "content": m}], EXTRACTION_TOOLS, True, template))
        for m in open(args.small_talk, encoding="utf-8").read().splitlines()
        if m.strip()
    ]
    talk_ref = [o.token_ids for o in _decode(model, tok, talk, SamplingParams(max_tokens=64, policy="ar"))["outs"]]
    figures, rows = {}, []
    for rule in ["ar"] + [r for r in args.rules.split(",") if r]:
        name, _, tau = rule.partition("@")
        res = (
            ref
            if rule == "ar"
            else _decode(model, tok, prompts, SamplingParams(max_tokens=320, policy=name, threshold=float(tau or 0.9)))
        )
        acc: dict[str, list[bool]] = {}
        for o, kind, item in zip(res["outs"], kinds, items):
            acc.setdefault(kind, []).append(_right(o.text, item))
        same = sum(o.token_ids == r for o, r in zip(res["outs"], ref_ids)) / len(ref_ids)
        params = SamplingParams(max_tokens=64, policy=name or "ar", threshold=float(tau or 0.9))
        talked = sum(o.token_ids == r for o, r in zip(_decode(model, tok, talk, params)["outs"], talk_ref))
        figures[rule] = {
            **{k: sum(v) / len(v) for k, v in acc.items()},
            "same_as_ar": same,
            "tpf": res["tpf"],
            "small_talk_same_as_ar": talked,
        }
        rows.append([rule, *[f"{100 * figures[rule][k]:.1f}" for k in acc], f"{100 * same:.1f}", res["tpf"], talked])
    heads = [f"{k} ({kinds.count(k)})" for k in dict.fromkeys(kinds)]
    print_table(
        rec,
        f"commit rules on the {args.split} split against ar (accuracy %)",
        ["rule", *heads, "same tokens as ar %", "TPF", f"small talk as ar ({len(talk)})"],
        rows,
    )
    if args.calibration:
        cal = _calibration(model, tok, prompts, ref_ids, 0.3)
        figures["calibration"] = cal
        print_table(
            rec,
            "extensions of prefix τ 0.3 whose context matched ar: how often the token differs from ar's",
            ["token", "confidence", "extensions", "differ"],
            cal,
        )
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
