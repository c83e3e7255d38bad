"""What ``clover bench decode`` measures (its flags and table are ``clover.commands.bench_decode``):
the airspace test prompts (or a file's) through the engine with a policy, exact match of their
tool calls, tokens per forward and tokens/s; a random model of the small preset; and a
transformers ``Qwen3_5MoeForCausalLM`` of the same shape run with ``generate()``, a real
one-token-per-step decoder with a KV cache. torch and transformers are imported inside the
functions (deferred on purpose: listing the benchmarks needs neither).
"""

from __future__ import annotations

import json
import time

from clover.airspace.calls import gold_calls, score_tool_calls
from clover.api.loading import place_model
from clover.data.chat import parse_assistant, render_chat
from clover.data.task import model_task

DEFAULT_NAME = "default"  # the row of the default policy (clover.engine.policies.DEFAULT_POLICY)


def random_model_and_tokenizer(device, dtype):
    import torch  # deferred: torch, not for clover --help

    from clover.airspace.tokenizer import build_default_tokenizer  # deferred: tokenizers, not for clover --help
    from clover.model import CloverForBlockDiffusion, preset  # deferred: loads torch, not for clover --help

    tok = build_default_tokenizer()
    cfg = preset("small", vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(50)  # peaky, so the threshold policy commits several tokens per pass
    return place_model(model, device, dtype), tok


def airspace_cases(tokenizer, n: int, config=None) -> list[tuple[list[int], list[dict] | None]]:
    """The first ``n`` tool-call turns of the test split of the model's own task (``config``'s;
    None: the bundled model's), as (prompt ids, gold calls)."""
    cases = []
    for ex in model_task(config, default=True).eval_split("test", max(4 * n, 64)):
        gold = gold_calls(ex)
        if not gold:
            continue  # exact match is scored on tool-call turns
        i = next(i for i, m in enumerate(ex["messages"]) if m["role"] == "assistant")
        prompt = render_chat(ex["messages"][:i], ex["tools"], True, getattr(tokenizer, "chat_template", None))
        cases.append((tokenizer.encode(prompt), gold))
        if len(cases) == n:
            break
    return cases


def file_cases(path: str, tokenizer, n: int):
    cases = []
    for line in open(path):
        if line.strip():
            d = json.loads(line)
            ids = d.get("prompt_ids") or tokenizer.encode(d["prompt"])
            cases.append((ids, d.get("gold_calls")))
    return cases[:n]


def exact(text: str | None, gold) -> bool | None:
    if gold is None or text is None:
        return None
    return score_tool_calls(parse_assistant(text)[1], gold)


def run_engine(model, tokenizer, cases, params, batch: int, fuse: bool = True, engine=None) -> dict:
    """The cases decoded together at ``batch`` rows, by a new engine or by ``engine``."""
    from clover.engine import Engine  # deferred: loads torch, not for clover --help

    engine = engine or Engine(model, tokenizer, max_batch_size=batch, fuse=fuse)
    t0 = time.perf_counter()
    outs = engine.generate_batch([c[0] for c in cases], params)
    wall = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    passes = sum(o.stats["forward_passes"] for o in outs)
    scores = [s for s in (exact(o.text, c[1]) for o, c in zip(outs, cases)) if s is not None]
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "tpf": tokens / passes if passes else 0.0,
        "forward_calls": engine.stats()["forward_calls"],
        "exact_match": sum(scores) / len(scores) if scores else None,
        "lengths": [len(o.token_ids) for o in outs],
        "ids": [o.token_ids for o in outs],
    }


def hf_twin(config):
    """A transformers Qwen3.5-MoE of the same shape as a Clover config (random weights)."""
    import torch  # deferred: torch, not for clover --help
    import transformers  # optional: transformers (a test dependency)

    from clover.bench.presets import hf_text_config  # deferred: loads torch

    transformers.logging.set_verbosity_error()  # the "falling back to PyTorch kernels" notices
    cls, hc = hf_text_config(config)
    torch.manual_seed(0)
    return cls(hc).eval()


def run_hf(hf, cases, lengths: list[int], batch: int) -> dict:
    """Greedy ``generate()`` with as many new tokens per prompt as Clover's ``ar`` run produced.

    A batch runs until its longest row is done (``generate()`` with EOS stops no earlier), but
    only each row's own length counts as output, as for Clover's rows: tokens/s is the same
    requests' output over the time to deliver it. (Counting every row at the longest length
    would credit the baseline with the tokens it computes after a shorter row has ended.)
    """
    import torch  # deferred: torch, not for clover --help

    tokens, wall = 0, 0.0
    for s in range(0, len(cases), batch):
        group = cases[s : s + batch]
        new = max(1, max(lengths[s : s + batch]))
        width = max(len(c[0]) for c in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, (p, _) in enumerate(group):  # left padding, as for batched generation
            ids[i, width - len(p) :] = torch.tensor(p)
            att[i, width - len(p) :] = 1
        ids, att = ids.to(hf.device), att.to(hf.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            hf.generate(
                ids, attention_mask=att, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0
            )
        wall += time.perf_counter() - t0
        tokens += sum(max(1, n) for n in lengths[s : s + batch])
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}


def measure_decoders(model, tokenizer, cases, configs, sizes, speed_prompts: int, hf) -> tuple[dict, dict]:
    """Quality and speed of every decoder at the largest batch size; ``ar``, the default and the
    transformers baseline at the smaller ones (speed only: decoding is batch-invariant); the
    default unfused (the commit of a finished block as its own forward) at the smallest."""
    big = sizes[-1]
    full = {name: run_engine(model, tokenizer, cases, p, big) for name, p in configs.items()}
    by_batch: dict[int, dict] = {}
    for b in sizes:
        speed_cases = cases if b == big else cases[: max(b, speed_prompts)]
        res = (
            full
            if b == big
            else {k: run_engine(model, tokenizer, speed_cases, configs[k], b) for k in ("ar", DEFAULT_NAME)}
        )
        if b == sizes[0]:
            res = dict(res, unfused=run_engine(model, tokenizer, speed_cases, configs[DEFAULT_NAME], b, fuse=False))
        if hf is not None:
            res = dict(res, hf=run_hf(hf, speed_cases, full["ar"]["lengths"][: len(speed_cases)], b))
        by_batch[b] = res
    return full, by_batch


def headline(full: dict, by_batch: dict, sizes: list[int], hf, thr: str) -> dict:
    """The JSON's top-level figures: batch ``sizes[0]`` speed, quality and TPF from the big batch."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch, not for clover --help

    b1, d, ar = by_batch[sizes[0]], DEFAULT_NAME, "ar"
    unfused = b1["unfused"]  # thr: the threshold policy at the sweep's last threshold (the old headline)
    return dict(
        default_policy=DEFAULT_POLICY,
        default_threshold=DEFAULT_THRESHOLD,
        default_exact_match=full[d]["exact_match"],
        default_tpf=full[d]["tpf"],
        default_tokens_per_s=b1[d]["tokens_per_s"],
        ar_tokens_per_s=b1[ar]["tokens_per_s"],
        speedup_vs_ar=b1[d]["tokens_per_s"] / b1[ar]["tokens_per_s"],
        ar_exact_match=full[ar]["exact_match"],
        hf_tokens_per_s=b1["hf"]["tokens_per_s"] if hf is not None else None,
        speedup_vs_hf=b1[d]["tokens_per_s"] / b1["hf"]["tokens_per_s"] if hf is not None else None,
        threshold_tokens_per_s=by_batch[sizes[-1]][thr]["tokens_per_s"],
        threshold_tpf=full[thr]["tpf"],
        threshold_exact_match=full[thr]["exact_match"],
        unfused_tokens_per_s=unfused["tokens_per_s"],
        fused_speedup=b1[d]["tokens_per_s"] / unfused["tokens_per_s"],
        fused_forward_calls=b1[d]["forward_calls"],
        unfused_forward_calls=unfused["forward_calls"],
        fused_same_tokens=unfused["ids"] == b1[d]["ids"],
        headline=d,
    )


def compiled_figures(
    model, tokenizer, cases, configs, full, by_batch, sizes, compile: bool, speed_prompts: int
) -> dict:
    """One pass timed eager (batch 1) and, with ``compile``, compiled: the compile time, the compiled
    pass, the default policy's batch-1 speed compiled, and whether ``ar`` and the default give
    the same tokens compiled as eager on every prompt (run after the eager measurements)."""
    from clover.bench.passes import compile_and_warm, pass_ms  # deferred: loads torch, not for clover --help

    eager = pass_ms(model)
    out = {"pass_ms_eager": eager["denoise"], "fused_pass_ms_eager": eager["fused"]}
    if not compile:
        return out
    out["compile_s"] = compile_and_warm(model, tokenizer, configs["ar"])
    compiled = pass_ms(model)
    out.update(pass_ms_compiled=compiled["denoise"], fused_pass_ms_compiled=compiled["fused"])
    out["pass_speedup"] = eager["denoise"] / compiled["denoise"]
    b1 = sizes[0]
    speed_cases = cases if b1 == sizes[-1] else cases[: max(b1, speed_prompts)]
    default = run_engine(model, tokenizer, speed_cases, configs[DEFAULT_NAME], b1)
    out["compiled_default_tokens_per_s"] = default["tokens_per_s"]
    out["compiled_speedup"] = default["tokens_per_s"] / by_batch[b1][DEFAULT_NAME]["tokens_per_s"]
    same = {}
    for name in ("ar", DEFAULT_NAME):
        ids = run_engine(model, tokenizer, cases, configs[name], sizes[-1])["ids"]
        same[name] = sum(a == b for a, b in zip(ids, full[name]["ids"])) / len(cases)
    out["compiled_same_tokens"] = same
    model.compile_passes(False)
    return out


def graph_figures(model, tokenizer, cases, configs, by_batch, sizes, speed_prompts: int) -> dict:
    """The default policy at each batch size decoded with CUDA graphs (``--cuda-graphs``), after the
    eager runs, on the same prompts: tokens/s on the first run (which captures the graphs) and on a
    second run of the same engine, the speed-up of the second over eager, and the share of prompts
    decoded to the same tokens as eager. ``by_batch``: ``measure_decoders``' eager figures."""
    from clover.engine import Engine  # deferred: loads torch, not for clover --help

    out = {}
    for b in sizes:
        speed_cases = cases if b == sizes[-1] else cases[: max(b, speed_prompts)]
        engine = Engine(model, tokenizer, max_batch_size=b, cuda_graphs=True)
        first = run_engine(model, tokenizer, speed_cases, configs[DEFAULT_NAME], b, engine=engine)
        again = run_engine(model, tokenizer, speed_cases, configs[DEFAULT_NAME], b, engine=engine)
        eager = by_batch[b][DEFAULT_NAME]
        stats = engine.stats()
        out[b] = {
            "first_tokens_per_s": first["tokens_per_s"],
            "tokens_per_s": again["tokens_per_s"],
            "speedup": again["tokens_per_s"] / eager["tokens_per_s"],
            "same_tokens": sum(x == y for x, y in zip(again["ids"], eager["ids"])) / len(speed_cases),
            "graph_captures": stats["graph_captures"],
            "graph_passes": stats["graph_passes"],
            "eager_passes": stats["graph_eager_passes"],
            "eager_why": stats["graph_eager_why"],
        }
    return out
