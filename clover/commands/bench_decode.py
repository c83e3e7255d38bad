"""``clover bench decode`` and ``clover bench context`` (in ``bench_context.py``).

decode: on the airspace test prompts, the same model decoded with its default policy (the
headline), ``ar`` (one position per pass of a whole block), ``threshold`` at several thresholds,
``prefix`` and ``edit``: exact match of the tool calls, tokens per forward (TPF), tokens/s,
speed-up vs ``ar``; plus a transformers ``Qwen3_5MoeForCausalLM`` of the same shape (random
weights) run with ``generate()``: a real one-token-per-step decoder with a KV cache.
Quality is batch-invariant, so it is measured once at the largest batch size; speed at each.

"""

from __future__ import annotations

import argparse
import dataclasses
import time

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.commands.bench_context import add_context_args, run_context
from clover.commands.common import add_device_args, device_setup, load_model_and_tokenizer

# torch and the engine are imported inside the functions: registering the benchmarks with the
# CLI must stay cheap


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


# -- decode ----------------------------------------------------------------------------------
DEFAULT_NAME = "default"  # the row of the default policy (clover.engine.policies.DEFAULT_POLICY)


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--random", action="store_true", help="no checkpoint: a random small model (speed only)")
    p.add_argument(
        "--prompts", help="JSONL file of {prompt_ids | prompt, gold_calls?} instead of the airspace test split"
    )
    p.add_argument(
        "--n",
        type=int,
        default=64,
        help="prompts (tool-call turns of the test split); at the largest batch size they pass through its "
        "slots (continuous batching), and exact match is scored on all of them",
    )
    p.add_argument("--max-tokens", type=int, help="default 160 (64 with --random, which never stops early)")
    p.add_argument("--block-size", type=int, help="default: the model's")
    p.add_argument("--thresholds", default="0.7,0.8,0.9", help="threshold sweep; the last is the headline")
    p.add_argument("--batch-sizes", default="1,4,16")
    p.add_argument("--speed-prompts", type=int, default=4, help="prompts for speed at batch sizes below --n")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    p.add_argument("--threads", type=int, default=1)
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def _random_model_and_tokenizer(device, dtype):
    import torch

    from clover.airspace.tokenizer import build_default_tokenizer
    from clover.api.loading import place_model
    from clover.model import CloverForBlockDiffusion, preset

    tok = build_default_tokenizer()
    cfg = preset("small", vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(50)  # peaky, so the threshold policy commits several tokens per pass
    return place_model(model, device, dtype), tok


def _airspace_cases(tokenizer, n: int) -> list[tuple[list[int], list[dict] | None]]:
    from clover.airspace.corpus import gold_calls, load_split
    from clover.data.chat import render_chat

    cases = []
    for ex in load_split("test", max(4 * n, 64)):
        gold = gold_calls(ex)
        if not gold:
            continue  # exact match is scored on tool-call turns
        i = next(i for i, m in enumerate(ex["messages"]) if m["role"] == "assistant")
        prompt = render_chat(ex["messages"][:i], ex["tools"], True, getattr(tokenizer, "chat_template", None))
        cases.append((tokenizer.encode(prompt), gold))
        if len(cases) == n:
            break
    return cases


def _file_cases(path: str, tokenizer, n: int):
    import json

    cases = []
    for line in open(path):
        if line.strip():
            d = json.loads(line)
            ids = d.get("prompt_ids") or tokenizer.encode(d["prompt"])
            cases.append((ids, d.get("gold_calls")))
    return cases[:n]


def _exact(text: str | None, gold) -> bool | None:
    if gold is None or text is None:
        return None
    from clover.airspace.corpus import score_tool_calls
    from clover.data.chat import parse_assistant

    return score_tool_calls(parse_assistant(text)[1], gold)


def _run(model, tokenizer, cases, params, batch: int, fuse: bool = True) -> dict:
    from clover.engine import Engine

    engine = Engine(model, tokenizer, max_batch_size=batch, fuse=fuse)
    t0 = time.perf_counter()
    outs = engine.generate_batch([c[0] for c in cases], params)
    wall = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    passes = sum(o.stats["forward_passes"] for o in outs)
    scores = [s for s in (_exact(o.text, c[1]) for o, c in zip(outs, cases)) if s is not None]
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
    import torch
    import transformers
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    transformers.logging.set_verbosity_error()  # the "falling back to PyTorch kernels" notices

    c = config
    hc = Qwen3_5MoeTextConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers,
        layer_types=list(c.layer_types),
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        linear_conv_kernel_dim=c.linear_conv_kernel_dim,
        linear_key_head_dim=c.linear_key_head_dim,
        linear_value_head_dim=c.linear_value_head_dim,
        linear_num_key_heads=c.linear_num_key_heads,
        linear_num_value_heads=c.linear_num_value_heads,
        num_experts=c.num_experts,
        num_experts_per_tok=c.num_experts_per_tok,
        moe_intermediate_size=c.moe_intermediate_size,
        shared_expert_intermediate_size=c.shared_expert_intermediate_size,
        max_position_embeddings=c.max_position_embeddings,
        rms_norm_eps=c.rms_norm_eps,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": c.rope_theta,
            "partial_rotary_factor": c.partial_rotary_factor,
        },
        tie_word_embeddings=c.tie_word_embeddings,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    return Qwen3_5MoeForCausalLM(hc).eval()


def _run_hf(hf, cases, lengths: list[int], batch: int) -> dict:
    """Greedy ``generate()`` with as many new tokens per prompt as Clover's ``ar`` run produced.

    A batch runs until its longest row is done (``generate()`` with EOS stops no earlier), but
    only each row's own length counts as output, as for Clover's rows: tokens/s is the same
    requests' output over the time to deliver it. (Counting every row at the longest length
    would credit the baseline with the tokens it computes after a shorter row has ended.)
    """
    import torch

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


def _configs(args, taus: list[float], max_tokens: int) -> dict:
    """The decoders compared: ``ar``, the default policy (the headline), the threshold sweep,
    ``prefix`` and ``edit`` at the last threshold of the sweep."""
    from clover.engine import SamplingParams
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    base = dict(max_tokens=max_tokens, block_size=args.block_size)
    configs = {"ar": SamplingParams(policy="ar", **base),
               DEFAULT_NAME: SamplingParams(policy=DEFAULT_POLICY, threshold=DEFAULT_THRESHOLD, **base)}  # fmt: skip
    for t in taus:
        configs[f"threshold@{t:g}"] = SamplingParams(policy="threshold", threshold=t, **base)
    for name in ("prefix", "edit"):
        configs[f"{name}@{taus[-1]:g}"] = SamplingParams(policy=name, threshold=taus[-1], **base)
    return configs


def _by_batch(model, tokenizer, cases, configs, sizes, speed_prompts: int, hf) -> tuple[dict, dict]:
    """Quality and speed of every decoder at the largest batch size; ``ar``, the default and the
    transformers baseline at the smaller ones (speed only: decoding is batch-invariant); the
    default unfused (the commit of a finished block as its own forward) at the smallest."""
    big = sizes[-1]
    full = {name: _run(model, tokenizer, cases, p, big) for name, p in configs.items()}
    by_batch: dict[int, dict] = {}
    for b in sizes:
        speed_cases = cases if b == big else cases[: max(b, speed_prompts)]
        res = (
            full if b == big else {k: _run(model, tokenizer, speed_cases, configs[k], b) for k in ("ar", DEFAULT_NAME)}
        )
        if b == sizes[0]:
            res = dict(res, unfused=_run(model, tokenizer, speed_cases, configs[DEFAULT_NAME], b, fuse=False))
        if hf is not None:
            res = dict(res, hf=_run_hf(hf, speed_cases, full["ar"]["lengths"][: len(speed_cases)], b))
        by_batch[b] = res
    return full, by_batch


def _headline(full: dict, by_batch: dict, sizes: list[int], hf, thr: str) -> dict:
    """The JSON's top-level figures: batch ``sizes[0]`` speed, quality and TPF from the big batch."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    b1, d, ar = by_batch[sizes[0]], DEFAULT_NAME, "ar"
    unfused = b1["unfused"]  # thr: the threshold policy at the sweep's last threshold (the old headline)
    return dict(
        default_policy=DEFAULT_POLICY, default_threshold=DEFAULT_THRESHOLD,
        default_exact_match=full[d]["exact_match"], default_tpf=full[d]["tpf"],
        default_tokens_per_s=b1[d]["tokens_per_s"], ar_tokens_per_s=b1[ar]["tokens_per_s"],
        speedup_vs_ar=b1[d]["tokens_per_s"] / b1[ar]["tokens_per_s"], ar_exact_match=full[ar]["exact_match"],
        hf_tokens_per_s=b1["hf"]["tokens_per_s"] if hf is not None else None,
        speedup_vs_hf=b1[d]["tokens_per_s"] / b1["hf"]["tokens_per_s"] if hf is not None else None,
        threshold_tokens_per_s=by_batch[sizes[-1]][thr]["tokens_per_s"], threshold_tpf=full[thr]["tpf"],
        threshold_exact_match=full[thr]["exact_match"],
        unfused_tokens_per_s=unfused["tokens_per_s"], fused_speedup=b1[d]["tokens_per_s"] / unfused["tokens_per_s"],
        fused_forward_calls=b1[d]["forward_calls"], unfused_forward_calls=unfused["forward_calls"],
        fused_same_tokens=unfused["ids"] == b1[d]["ids"], headline=d,
    )  # fmt: skip


def _rows(by_batch: dict, cases_at: dict) -> list[list]:
    rows = []
    for b, res in by_batch.items():
        for name, r in res.items():
            em = r.get("exact_match")
            rows.append([b, DECODER_LABELS.get(name, name), cases_at[b], "-" if em is None else f"{100 * em:.1f}",
                         r.get("tpf", 1.0), r["tokens_per_s"], r["tokens_per_s"] / res["ar"]["tokens_per_s"]])  # fmt: skip
    return rows


def _label_default() -> str:
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    return f"default ({DEFAULT_POLICY} τ {DEFAULT_THRESHOLD:g})"


# how the table names its rows (the JSON keeps the short names)
DECODER_LABELS = {"ar": "ar (block model, 1 position/pass)", "hf": "hf generate() (1 token/step)",
                  "unfused": "default, unfused commit"}  # fmt: skip


def run_decode(args: argparse.Namespace) -> int:
    import torch

    t_start = time.perf_counter()
    device, dtype = device_setup(args, "clover bench decode")
    set_threads(args.threads)
    if args.random:
        model, tokenizer = _random_model_and_tokenizer(device, dtype)
    else:
        model, tokenizer = load_model_and_tokenizer(args.model, None, args.device, args.dtype)
    cases = _file_cases(args.prompts, tokenizer, args.n) if args.prompts else _airspace_cases(tokenizer, args.n)
    taus, sizes = _floats(args.thresholds), sorted(_ints(args.batch_sizes))
    configs = _configs(args, taus, args.max_tokens or (64 if args.random else 160))
    _run(model, tokenizer, cases[:1], dataclasses.replace(configs["ar"], max_tokens=8), 1)  # warm-up
    w = model.lm_head.weight
    hf = None if args.no_hf else hf_twin(model.config).to(w.device, w.dtype)  # where Clover runs, as it runs
    if hf is not None:
        _run_hf(hf, cases[:1], [4], 1)  # warm-up
    full, by_batch = _by_batch(model, tokenizer, cases, configs, sizes, args.speed_prompts, hf)
    figures = {"model": args.model or ("random" if args.random else "default"), "n": len(cases),
               "device": str(w.device), "dtype": str(w.dtype)[6:], "batch_sizes": sizes,
               **_headline(full, by_batch, sizes, hf, f"threshold@{taus[-1]:g}"),
               "by_batch": {b: {k: {kk: vv for kk, vv in v.items() if kk not in ("lengths", "ids")}
                                for k, v in r.items()} for b, r in by_batch.items()}}  # fmt: skip
    DECODER_LABELS[DEFAULT_NAME] = _label_default()
    cases_at = {b: len(cases) if b == sizes[-1] else min(len(cases), max(b, args.speed_prompts)) for b in sizes}
    notes = [
        f"headline (JSON top level): batch {sizes[0]}, the default policy vs ar; exact match and TPF from the "
        f"batch-{sizes[-1]} run (decoding is batch-invariant)",
        "ar is the block model committing one position per pass: each pass computes a whole block, so it is "
        "not an autoregressive decoder; hf is one (a transformers Qwen3_5MoeForCausalLM of the same shape, "
        "random weights, greedy generate() with KV cache, as many new tokens per prompt as ar produced)",
        f"batch {sizes[-1]}: the {len(cases)} prompts through {sizes[-1]} slots (continuous batching); hf runs "
        f"them as static batches of {sizes[-1]} (generate() has no refill), each row's own length counted",
        f"unfused = the default with the commit of a finished block as its own forward "
        f"(same tokens: {figures['fused_same_tokens']})",
    ]
    if args.random:
        notes.append("--random: random weights, exact match is meaningless; speed figures only")
    notes.append(f"took {time.perf_counter() - t_start:.0f} s")
    where = f"{figures['device']} {figures['dtype']}, {torch.get_num_threads()} thread(s)"
    print_table(f"clover bench decode ({figures['model']}, {len(cases)} prompts, {where})",
                ["batch", "decoder", "prompts", "exact %", "TPF", "tokens/s", "vs ar"],
                _rows(by_batch, cases_at), notes)  # fmt: skip
    write_json(args.json, figures)
    return 0


BENCHMARKS["decode"] = ("the default policy vs ar and the other policies on the airspace test prompts, + transformers "
                        "generate() of the same shape",
                        add_decode_args, run_decode)  # fmt: skip
BENCHMARKS["context"] = ("decode cost and cache size at long prompts: Clover hybrid vs all-attention",
                         add_context_args, run_context)  # fmt: skip
