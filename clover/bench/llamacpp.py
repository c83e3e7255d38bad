"""What ``clover bench llama.cpp`` measures (its flags and table are ``clover.commands.bench_llamacpp``),
batch 1 on the CPU, for the bundled model and the ``medium`` preset with random weights, each
exported to GGUF at f32, q8_0 and q4_k:

* the cost of one pass of B positions after a history, in three runtimes: Clover in llama.cpp
  (``LlamaCppModel.step``, a denoise pass), Clover's PyTorch engine (``CloverForBlockDiffusion.step``,
  f32) and stock llama.cpp running the same-shape autoregressive model (``hf_twin``, saved by
  transformers, converted by the pinned tree's ``convert_hf_to_gguf.py``, quantized by its
  libllama, timed by ``native/llamacpp/stock/stock_bench.cpp``: a B-token pass with logits at every
  position, and one-token decoding);
* decode tokens/s under ``ar`` and the default policy through Clover's engine on both back ends;
* f32 logit error against PyTorch, and exact match on the airspace test split per type.

The command imports this module only when it runs (it loads torch); transformers is imported
inside ``hf_twin``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from clover.backends.llamacpp import LlamaCppClover
from clover.bench.decode import DEFAULT_NAME, airspace_cases, hf_twin, run_engine
from clover.bench.exactness import rel_err
from clover.bench.passes import median_ms
from clover.data import default_model_dir
from clover.data.task import model_task
from clover.data.tokenizer import CloverTokenizer
from clover.engine import SamplingParams
from clover.export.gguf import export_gguf
from clover.model import CloverForBlockDiffusion, preset
from clover.model.io import load_model, save_model

TYPES = ("f32", "q8_0", "q4_k")
SIZES = (1, 8, 32)
HISTORY = 64  # committed tokens before the timed pass (a multiple of every B)
REPO = Path(__file__).resolve().parents[2]


def stock_tool() -> Path:
    """The stock timing program (libllama from the pinned tree), built on first use by
    ``native/llamacpp/build.sh stock`` (``make llama-cpp-stock``): minutes the first time."""
    build = REPO / "native" / "llamacpp" / "build.sh"
    env = {**os.environ, "PYTHON": sys.executable}
    env.setdefault("CLOVER_LLAMACPP_JOBS", "2")
    r = subprocess.run(["nice", "-n", "10", "bash", str(build), "stock"], env=env, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"building stock llama.cpp failed: {r.stderr.strip().splitlines()[-1:]}")
    return Path(r.stdout.strip().splitlines()[-1])


def medium_checkpoint(out: Path, tok) -> Path:
    """The ``medium`` preset with random weights (its head scaled so that the default policy commits
    several tokens per pass), saved with the bundled tokenizer as a checkpoint directory."""
    cfg = preset("medium", vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, eos_token_id=None)
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(50)
    save_model(model, out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(default_model_dir() / name, out / name)
    return out


def twin_gguf(config, tok_dir: Path, work: Path, types, tool: Path) -> dict[str, Path]:
    """The same-shape Qwen3.5-MoE (random weights) as stock llama.cpp files: saved by transformers,
    converted to f32 by the pinned ``convert_hf_to_gguf.py``, quantized by libllama (``pure``)."""
    src = Path(tool).parents[1] / "src"
    hf = work / "twin-hf"
    hf_twin(config).save_pretrained(hf, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / name, hf / name)
    files = {"f32": work / "twin-f32.gguf"}
    # the converter names BPE pre-tokenizers by a hash of known ones; Clover's is not among them and
    # only the tokenizer's text handling depends on it (not a pass's cost): call it qwen2's
    code = (
        "import sys; sys.argv = sys.argv[1:]; sys.path[:0] = [sys.argv[0].rsplit('/', 1)[0], sys.argv.pop(1)];"
        "import conversion.base as b; b.TextModel.get_vocab_base_pre = lambda self, t: 'qwen2';"
        "import convert_hf_to_gguf as c; c.main()"
    )
    cmd = [
        sys.executable,
        "-c",
        code,
        str(src / "convert_hf_to_gguf.py"),
        str(src / "gguf-py"),
        str(hf),
        "--outfile",
        str(files["f32"]),
        "--outtype",
        "f32",
        "--no-mtp",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"convert_hf_to_gguf.py failed: {r.stderr.strip()[-2000:]}")
    for t in types:
        if t != "f32":
            files[t] = work / f"twin-{t}.gguf"
            subprocess.run([str(tool), "--quantize", str(files["f32"]), str(files[t]), t], check=True)
    return files


def stock_passes(tool: Path, gguf: Path, reps: int, n_gen: int, threads: int = 1) -> dict:
    """Stock llama.cpp: ``{"pass_ms": {B: ms}, "tokens_per_s": x}`` after a ``HISTORY``-token history."""
    cmd = [str(tool), str(gguf), str(threads), str(HISTORY), str(reps), str(n_gen), *map(str, SIZES)]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return {"pass_ms": {int(b): ms for b, ms in out["pass_ms"].items()}, "tokens_per_s": out["tokens_per_s"]}


def clover_passes(torch_model, native, vocab: int, reps: int) -> dict:
    """One denoise pass of B positions after a ``HISTORY``-token history, median ms:
    ``{"llamacpp": {B: ms}, "torch": {B: ms} or None}`` (``torch_model`` None: not timed)."""
    g = torch.Generator().manual_seed(0)
    hist = torch.randint(4, vocab, (1, HISTORY), generator=g)
    out: dict = {"llamacpp": {}, "torch": {} if torch_model is not None else None}
    for B in SIZES:
        den = torch.randint(4, vocab, (1, B), generator=g)
        cache = native.new_cache()
        native.step(cache, commit=hist, block_size=B)
        step = lambda: native.step(cache, denoise=den, block_size=B)
        step()  # warm-up
        out["llamacpp"][B] = median_ms(step, reps)
        if torch_model is not None:
            with torch.inference_mode():
                tc = torch_model.prefill(hist, B)[0]
                step = lambda: torch_model.step(tc, denoise=den, block_size=B)
                step()  # warm-up
                out["torch"][B] = median_ms(step, reps)
    return out


def max_rel_logit_err(torch_model, native, block_size: int = 32, blocks: int = 4, seed: int = 0) -> float:
    """The largest relative logit error (max |llama.cpp − PyTorch| / max |PyTorch|) of any pass in a
    run of ``blocks`` blocks: per block a denoise pass and a fused commit + denoise pass (one or two
    blocks committed), a plain commit after the second block, and a ragged block at the end. Both
    caches must agree on the committed length at the end (a RuntimeError if not)."""
    V = torch_model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    tc, lc, errs = torch_model.new_cache(), native.new_cache(), []

    def both(**kw) -> None:
        got, ref = native.step(lc, block_size=block_size, **kw), torch_model.step(tc, block_size=block_size, **kw)
        if "denoise" in kw:
            errs.append(rel_err(torch.from_numpy(got), ref[0]))
        elif got is not None:
            raise RuntimeError("llama.cpp returned logits for a plain commit")

    with torch.inference_mode():
        for b in range(blocks):
            den = torch.randint(0, V, (1, block_size), generator=g)
            com = torch.randint(0, V, (1, block_size * (1 + b % 2)), generator=g)
            both(denoise=den)
            both(commit=com, denoise=den)
            if b == 1:
                both(commit=com)
        both(denoise=torch.randint(0, V, (1, max(1, block_size // 3)), generator=g))
    if lc.length != int(tc.lengths[0]):
        raise RuntimeError(f"committed lengths differ: llama.cpp {lc.length}, PyTorch {int(tc.lengths[0])}")
    return max(errs)


def long_history_err(torch_model, native, block_size: int = 32, blocks: int = 100, seed: int = 0) -> float:
    """The relative logit error of a denoise pass fused with a commit of ``blocks`` blocks of history
    in one pass."""
    V = torch_model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    com = torch.randint(0, V, (1, block_size * blocks), generator=g)
    den = torch.randint(0, V, (1, block_size), generator=g)
    with torch.inference_mode():
        ref = torch_model.step(torch_model.new_cache(), commit=com, denoise=den, block_size=block_size)
        got = native.step(native.new_cache(), commit=com, denoise=den, block_size=block_size)
        return rel_err(torch.from_numpy(got), ref[0])


def f32_gguf(model, work: Path) -> Path:
    """``model`` saved as a checkpoint under ``work`` and exported to an f32 GGUF file there."""
    save_model(model, work / "ckpt")
    return export_gguf(work / "ckpt", work / "model.gguf", "f32").out


def decode_speed(model, tok, cases, max_tokens: int) -> dict:
    """Decode tokens/s, batch 1 (the prompts one after another), under ``ar`` and the default policy."""
    run_engine(model, tok, cases[:1], SamplingParams(max_tokens=8), 1)  # warm-up
    out = {}
    for name, kw in (("ar", {"policy": "ar"}), (DEFAULT_NAME, {})):
        params = SamplingParams(max_tokens=max_tokens, **kw)
        runs = [run_engine(model, tok, [c], params, 1) for c in cases]
        out[name] = sum(r["tokens"] for r in runs) / sum(r["wall_s"] for r in runs)
    return out


def airspace_exact(model, tok, n: int) -> float:
    """Exact match of tool calls on the test split of the model's own airspace task (``n`` turns),
    the default policy."""
    evaluate = model_task(model.config, default=True).evaluate
    return evaluate(model, tok, "test", n=n, n_groups=0, progress=False)["exact_match"]


def same_tokens(a, b, tok, cases, policy: str | None, max_tokens: int) -> int:
    """How many of ``cases`` two models decode to the same committed tokens (greedy)."""
    params = SamplingParams(max_tokens=max_tokens, **({"policy": policy} if policy else {}))
    ids = [run_engine(m, tok, cases, params, 16)["ids"] for m in (a, b)]
    return sum(x == y for x, y in zip(*ids))


def bench_cases(tok, n: int):
    return airspace_cases(tok, n)


def _model_figures(which: str, src: Path, tok, cases, work: Path, tool: Path | None, args, fig: dict) -> None:
    """Every figure of one model (``bundled`` or ``medium``) into ``fig``."""
    tm = load_model(src, "cpu", torch.float32).eval()
    V = tm.config.vocab_size
    twin = twin_gguf(tm.config, src, work / which, TYPES, tool) if tool is not None else {}
    fig["pass_ms"][which] = {"clover_llamacpp": {}, "clover_torch": {}, "stock_llamacpp": {}}
    for t in TYPES:
        path = work / which / f"clover-{t}.gguf"
        export_gguf(src, path, t)
        lm = LlamaCppClover(path, threads=args.threads)
        p = clover_passes(tm if t == "f32" else None, lm.native, V, args.reps)
        fig["pass_ms"][which]["clover_llamacpp"][t] = p["llamacpp"]
        if p["torch"] is not None:
            fig["pass_ms"][which]["clover_torch"][t] = p["torch"]
            fig["max_rel_logit_err_f32"][which] = max_rel_logit_err(tm, lm.native)
        for policy, x in decode_speed(lm, tok, cases, args.max_tokens).items():
            fig["llamacpp_tokens_per_s"].setdefault(which, {}).setdefault(policy, {})[t] = x
        if t == "f32":
            for policy, x in decode_speed(tm, tok, cases, args.max_tokens).items():
                fig["torch_tokens_per_s"].setdefault(which, {}).setdefault(policy, {})[t] = x
        if which == "bundled" and args.n:
            fig["exact_match"][t] = airspace_exact(lm, tok, args.n)
            if t == "f32":
                fig["exact_match_torch_f32"] = airspace_exact(tm, tok, args.n)
        if which == "bundled" and t == "f32" and args.same:
            same = bench_cases(tok, args.same)
            n = args.same_max_tokens
            fig["same_tokens_f32"] = {
                pol or DEFAULT_NAME: {"same": same_tokens(tm, lm, tok, same, pol, n), "of": len(same)}
                for pol in ("ar", None)
            }
        if t in twin:
            s = stock_passes(tool, twin[t], args.reps, args.twin_tokens)
            fig["pass_ms"][which]["stock_llamacpp"][t] = s["pass_ms"]
            fig["twin_llamacpp_tokens_per_s"].setdefault(which, {})[t] = s["tokens_per_s"]
            fig["pass_efficiency"].setdefault(which, {})[t] = {B: s["pass_ms"][B] / p["llamacpp"][B] for B in SIZES}
            fig["speedup_vs_twin"].setdefault(which, {})[t] = (
                fig["llamacpp_tokens_per_s"][which][DEFAULT_NAME][t] / s["tokens_per_s"]
            )
        lm.native.close()


def measure_llamacpp(args) -> dict:
    """The figures of ``clover bench llama.cpp`` (JSON keys as docs/llama-cpp.md lists them);
    ``args``: its settings (threads, reps, max_tokens, speed_prompts, n, same, same_max_tokens,
    twin_tokens, no_medium, no_stock, work)."""
    keys = (
        "pass_ms",
        "pass_efficiency",
        "llamacpp_tokens_per_s",
        "torch_tokens_per_s",
        "twin_llamacpp_tokens_per_s",
        "speedup_vs_twin",
        "max_rel_logit_err_f32",
        "exact_match",
    )
    fig: dict = {k: {} for k in keys}
    fig.update(threads=args.threads, history=HISTORY, sizes=list(SIZES), types=list(TYPES))
    tool = None if args.no_stock else stock_tool()
    tok = CloverTokenizer.load(default_model_dir())
    cases = bench_cases(tok, args.speed_prompts)
    with tempfile.TemporaryDirectory(prefix="clover-bench-llamacpp-", dir=args.work) as d:
        work = Path(d)
        models = {"bundled": default_model_dir()}
        if not args.no_medium:
            models["medium"] = medium_checkpoint(work / "medium-ckpt", tok)
        for which, src in models.items():
            (work / which).mkdir()
            _model_figures(which, Path(src), tok, cases, work, tool, args, fig)
    return fig
