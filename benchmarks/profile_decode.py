"""Where decode time goes: the engine on the airspace test prompts under ``torch.profiler``.

Every operator's own CPU time is charged to the innermost Clover function on its Python stack
(delta rule, GDN rest, attention, MoE, LM head, sampler, ...); ``python / framework`` is the
wall time no operator accounts for (interpreter, dispatch, module calls). A second table
groups the same time by operator kind (matmul, attention kernel, triangular solve, ...).

python benchmarks/profile_decode.py [--model DIR] [--policy threshold] [--batch 1] [--n 4] [--json out.json]

Profiling with stacks slows everything down; the shares, not the absolute times, are the result.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from clover.api.settings import BLOCK_SETTINGS, add_decoding_flags, decoding_values
from clover.bench import print_table, set_threads, write_json
from clover.bench.decode import airspace_cases
from clover.bench.results import Recorder
from clover.commands.common import load_model_and_tokenizer
from clover.engine import Engine, SamplingParams

# innermost stack frame (path fragment, function or "*") -> region; first match wins
REGIONS = [
    ("clover/ops/delta_rule.py", "*", "delta rule (chunked GDN kernel)"),
    ("clover/ops/conv.py", "*", "short convolution (GDN)"),
    ("clover/model/gdn.py", "*", "GDN projections, gates, norms"),
    ("clover/model/attention.py", "*", "attention (projections, RoPE, SDPA)"),
    ("clover/model/layers.py", "forward", "MoE / MLP / norms"),
    ("clover/model/layers.py", "*", "MoE / MLP / norms"),
    ("clover/model/cache.py", "*", "cache bookkeeping"),
    ("clover/model/model.py", "*", "model glue (embeddings, LM head, layer loop)"),
    ("clover/engine/sampler.py", "*", "sampler (softmax, argmax, logprobs)"),
    ("clover/engine/policies.py", "*", "policies"),
    ("clover/engine/", "*", "engine bookkeeping (batch, scheduler, runner)"),
]
OP_KINDS = [
    (("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "aten::einsum"), "matmul"),
    (("aten::_scaled_dot_product", "aten::scaled_dot_product"), "attention kernel (SDPA)"),
    (("aten::linalg_solve_triangular",), "triangular solve (delta rule)"),
    (
        (
            "aten::softmax",
            "aten::_softmax",
            "aten::logsumexp",
            "aten::log_softmax",
            "aten::topk",
            "aten::max",
            "aten::sort",
            "aten::argsort",
        ),
        "softmax / top-k / sort",
    ),
    (
        (
            "aten::cat",
            "aten::index",
            "aten::index_add",
            "aten::gather",
            "aten::scatter",
            "aten::copy_",
            "aten::clone",
            "aten::contiguous",
            "aten::where",
            "aten::masked_fill",
        ),
        "copies, gathers, where",
    ),
]


def _is_python(ev) -> bool:
    return ".py(" in ev.name  # with_stack records Python calls as events named "path(line): function"


def region_of(ev) -> str:
    """The region of the innermost Clover Python call around operator event ``ev``."""
    p = ev.cpu_parent
    while p is not None:
        if _is_python(p):
            f = p.name.replace("\\", "/")
            for path, fn, name in REGIONS:
                if path in f and (fn == "*" or f.endswith(f": {fn}")):
                    return name
        p = p.cpu_parent
    return "other (outside Clover's modules)"


def kind_of(op: str) -> str:
    for names, kind in OP_KINDS:
        if op.startswith(names):
            return kind
    return "elementwise and other ops"


def main() -> int:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    add_decoding_flags(p, tuple(s for s in BLOCK_SETTINGS if s.name != "block_size"))  # --policy, --threshold
    p.add_argument("--batch", type=int, default=1, help="requests decoded together")
    p.add_argument("--n", type=int, default=4, help="test prompts")
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model, args.threads)
    cases = airspace_cases(tok, args.n)
    params = SamplingParams(max_tokens=args.max_tokens, **decoding_values(args))
    args.policy = params.policy  # named in the title and the JSON
    engine = Engine(model, tok, max_batch_size=args.batch)
    engine.generate_batch([c[0] for c in cases[:2]], params)  # warm-up

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        t0 = time.perf_counter()
        outs = engine.generate_batch([c[0] for c in cases], params)
        wall_us = (time.perf_counter() - t0) * 1e6
    regions: dict[str, float] = defaultdict(float)
    kinds: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.self_cpu_time_total <= 0 or _is_python(ev):
            continue
        regions[region_of(ev)] += ev.self_cpu_time_total
        kinds[kind_of(ev.name)] += ev.self_cpu_time_total
    ops_us = sum(kinds.values())
    regions["python / framework (no operator running)"] = max(0.0, wall_us - ops_us)
    kinds["python / framework (no operator running)"] = max(0.0, wall_us - ops_us)
    tokens = sum(len(o.token_ids) for o in outs)
    passes = sum(o.stats["forward_passes"] for o in outs)
    title = (
        f"where decode time goes: {args.policy}, batch {args.batch}, {len(cases)} prompts, {tokens} tokens, "
        f"{passes} passes, {args.threads} thread(s), profiled wall {wall_us / 1e6:.2f} s"
    )
    rows = sorted(regions.items(), key=lambda kv: -kv[1])
    print_table(rec, title, ["region", "ms", "share"], [[k, v / 1e3, f"{100 * v / wall_us:.1f} %"] for k, v in rows])
    krows = sorted(kinds.items(), key=lambda kv: -kv[1])
    print_table(
        rec,
        "the same time by operator kind",
        ["operator kind", "ms", "share"],
        [[k, v / 1e3, f"{100 * v / wall_us:.1f} %"] for k, v in krows],
    )
    write_json(
        rec,
        args.json,
        {
            "policy": args.policy,
            "batch": args.batch,
            "tokens": tokens,
            "passes": passes,
            "wall_s": wall_us / 1e6,
            "regions_share": {k: v / wall_us for k, v in rows},
            "op_kinds_share": {k: v / wall_us for k, v in krows},
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
