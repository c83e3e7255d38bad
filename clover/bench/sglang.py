"""Clover served by SGLang (docs/sglang.md), measured beside Clover's own engine: a server in a
subprocess of SGLang's environment (``make sglang``), requests over HTTP, and the logits of its
passes compared with Clover's model.

Used by ``clover bench sglang`` (``measure_sglang``; its flags and table are
``clover.commands.bench_sglang``) and by the plugin's tests (integrations/sglang/tests), which run
in SGLang's environment; this module imports neither SGLang nor the plugin.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from clover.bench.decode import airspace_cases, run_engine
from clover.engine import SamplingParams
from clover.export.hf_folder import export_hf

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = {"prefix": "CloverPrefix", "threshold": "CloverThreshold", "ar": "CloverAR", "fixed": "CloverFixed"}
TOOL_CALL_PARSER = "clover"  # clover_sglang.tool_calls: <tool_call>{"name": …, "arguments": …}</tool_call>


def sglang_python() -> str:
    """The Python of SGLang's environment: $CLOVER_SGLANG_PYTHON, else the repository's
    .venv-sglang (``make sglang``), else this interpreter when it has SGLang."""
    if p := os.environ.get("CLOVER_SGLANG_PYTHON"):
        return p
    venv = ROOT / ".venv-sglang" / "bin" / "python"
    if venv.exists():
        return str(venv)
    try:
        import sglang  # noqa: F401

        return sys.executable
    except ImportError:
        raise RuntimeError("no SGLang environment: run `make sglang` (docs/sglang.md)") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(
    python: str,
    model_dir: str | Path,
    algorithm: str,
    port: int,
    device: str = "cpu",
    max_running: int = 16,
    algorithm_config: str | None = None,
    tp_size: int = 1,
) -> list[str]:
    """``sglang.launch_server`` for a Clover folder (``clover export hf``) with a Clover algorithm;
    on a CPU the flags of SGLang's CPU path (docs/sglang.md). ``tp_size``: tensor-parallel ranks."""
    cmd = [
        python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dllm-algorithm",
        ALGORITHMS.get(algorithm, algorithm),
        "--max-running-requests",
        str(max_running),
        "--tool-call-parser",
        TOOL_CALL_PARSER,
    ]
    if algorithm_config:
        cmd += ["--dllm-algorithm-config", str(algorithm_config)]
    if tp_size != 1:
        cmd += ["--tp-size", str(tp_size)]
    if device == "cpu":
        cmd += [
            "--device",
            "cpu",
            "--disable-overlap-schedule",
            "--disable-cuda-graph",
            "--attention-backend",
            "torch_native",
            "--dtype",
            "float32",
            "--mem-fraction-static",
            "0.05",
            "--max-total-tokens",
            "16384",
        ]
    return cmd


def cpu_parallel_env(tp_size: int, env: dict | None = None) -> dict:
    """What SGLang's CPU path needs to run ``tp_size`` ranks on one machine (docs/sglang.md), unless
    ``env`` sets it already: each rank's cores (past one rank per NUMA node SGLang asks for them),
    and no NCCL library, so that the ranks sum over torch.distributed (gloo): torch's CUDA build
    brings an NCCL library, which SGLang would load and then fail to bind to a CUDA device."""
    env = env or {}
    want = {"SGLANG_CPU_OMP_THREADS_BIND": cpu_bind(tp_size), "SGLANG_NCCL_SO_PATH": "no-nccl-on-a-cpu"}
    return {k: v for k, v in want.items() if k not in env}


def cpu_bind(ranks: int, cores: int | None = None) -> str:
    """``SGLANG_CPU_OMP_THREADS_BIND`` giving each of ``ranks`` ranks its own share of the cores
    (``0-3|4-7``; ranks share cores when there are fewer cores than ranks)."""
    cores = cores or os.cpu_count() or 1
    per = max(1, cores // ranks)
    spans = [((r * per) % cores, (r * per) % cores + per - 1) for r in range(ranks)]
    return "|".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


class SGLangServer:
    """An SGLang server in its own process group, started on enter and stopped on exit.
    ``logits_dir``: the folder Clover's algorithms write each pass to while it exists."""

    def __init__(
        self,
        model_dir,
        algorithm: str = "prefix",
        device: str = "cpu",
        max_running: int = 16,
        algorithm_config: str | None = None,
        logits_dir: str | Path | None = None,
        log: str | Path | None = None,
        timeout_s: float = 600,
        python: str | None = None,
        tp_size: int = 1,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = server_command(
            python or sglang_python(), model_dir, algorithm, self.port, device, max_running, algorithm_config, tp_size
        )
        self.env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        if device == "cpu":
            self.env["SGLANG_USE_CPU_ENGINE"] = "1"
            if tp_size > 1:
                self.env.update(cpu_parallel_env(tp_size, self.env))
        if logits_dir is not None:
            self.env["CLOVER_SGLANG_LOGITS_DIR"] = str(logits_dir)
        self.log = Path(log) if log else None
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.start_s = 0.0

    def __enter__(self) -> SGLangServer:
        out = open(self.log, "w") if self.log else subprocess.DEVNULL
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        while time.perf_counter() - t0 < self.timeout_s:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-3000:] if self.log else ""
                raise RuntimeError(f"the SGLang server exited with {self.proc.returncode} while starting\n{tail}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        self.start_s = time.perf_counter() - t0
                        return self
            except OSError:
                pass
            time.sleep(1)
        self.__exit__()
        raise TimeoutError(f"the SGLang server did not answer within {self.timeout_s} s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    # -- requests -----------------------------------------------------------------------------
    def generate_one(self, ids: list[int], max_tokens: int) -> list[int]:
        """Greedy continuation of ``ids`` through ``/generate`` → the generated token ids, without
        the stop token that ended them (SGLang's ``output_ids`` keep it; Clover's do not)."""
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}}
        req = urllib.request.Request(
            self.url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        got, finish = out["output_ids"], out["meta_info"]["finish_reason"] or {}
        if finish.get("type") == "stop" and got and finish.get("matched") == got[-1]:
            got = got[:-1]
        return got

    def generate(self, prompts: list[list[int]], max_tokens: int, concurrency: int = 1) -> tuple[list, float]:
        """Every prompt, ``concurrency`` requests in flight at a time → (output ids in prompt order, wall s)."""
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            outs = list(pool.map(lambda p: self.generate_one(p, max_tokens), prompts))
        return outs, time.perf_counter() - t0


def read_passes(logits_dir: Path) -> list[dict]:
    """The passes written to ``logits_dir`` (oldest first); the files are removed."""
    files = sorted(logits_dir.glob("pass-*.pt"))
    recs = [torch.load(f) for f in files]
    for f in files:
        f.unlink()
    return recs


def pass_logit_error(model, sequence: list[int], rec: dict, row: int = 0) -> float:
    """Largest |SGLang - Clover| / max |Clover| over one pass's logits: Clover's model commits
    ``sequence[:start]`` and denoises the same block (``rec`` from ``read_passes``)."""
    start = int(rec["start"][row])
    with torch.inference_mode():
        prefix = torch.tensor([sequence[:start]], dtype=torch.long)
        cache, tail = model.prefill(prefix) if start else (model.new_cache(1), None)
        ref = model.step(cache, denoise=rec["ids"][row : row + 1].long()).float()[0]
    got = rec["logits"][row]
    return float((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def logit_error(server: SGLangServer, logits_dir: Path, model, prompts: list[list[int]], max_tokens: int) -> dict:
    """Each prompt alone through the server with its passes recorded, every pass checked
    against Clover's model → {"max_rel_logit_err", "passes" (those over blocks with generated
    positions: prompt-only blocks left out, as Clover's engine counts), "tokens"}."""
    worst, passes, tokens = 0.0, 0, 0
    for ids in prompts:
        read_passes(logits_dir) if logits_dir.exists() else logits_dir.mkdir(parents=True)
        out = server.generate_one(ids, max_tokens)
        recs = read_passes(logits_dir)
        seq = ids + out
        worst = max([worst] + [pass_logit_error(model, seq, r) for r in recs])
        passes += sum(int(r["start"][0]) + r["ids"].shape[1] > len(ids) for r in recs)
        tokens += len(out)
    shutil.rmtree(logits_dir, ignore_errors=True)
    return {"max_rel_logit_err": worst, "passes": passes, "tokens": tokens}


def measure_sglang(
    model,
    tok,
    src: Path,
    policy: str,
    device: str,
    n_prompts: int,
    max_tokens: int,
    logit_prompts: int,
    python: str | None = None,
    tp_size: int = 1,
) -> dict:
    """``model`` (loaded from the checkpoint ``src``, on ``device``, f32) through Clover's engine
    and, exported to a folder, served by SGLang under the matching Clover algorithm (on
    ``tp_size`` tensor-parallel ranks), on the first ``n_prompts`` airspace test prompts at batch 1
    and 16: tokens/s, TPF, same committed tokens, and the largest relative logit error over every
    pass of ``logit_prompts`` prompts."""
    cases = [(ids, gold) for ids, gold in airspace_cases(tok, n_prompts, model.config)]
    prompts = [ids for ids, _ in cases]
    params = SamplingParams(max_tokens=max_tokens, policy=policy)
    fig: dict = {
        "policy": policy,
        "prompts": len(prompts),
        "max_tokens": max_tokens,
        "device": device,
        "tp_size": tp_size,
        "clover": {},
        "sglang": {},
    }
    ref = None
    for batch in (1, 16):
        r = run_engine(model, tok, cases, params, batch)
        ref = r["ids"]
        fig["clover"][batch] = {"tokens_per_s": r["tokens_per_s"], "tpf": r["tpf"], "tokens": r["tokens"]}
    with tempfile.TemporaryDirectory() as work:
        hf = Path(work) / "hf"
        export_hf(src, hf)
        passes = Path(work) / "passes"
        with SGLangServer(
            hf,
            policy,
            "cpu" if device == "cpu" else "cuda",
            logits_dir=passes,
            log=Path(work) / "server.log",
            python=python,
            tp_size=tp_size,
        ) as server:
            fig["sglang_start_s"] = server.start_s
            server.generate(prompts[:2], max_tokens)  # warm-up
            for batch in (1, 16):
                outs, wall = server.generate(prompts, max_tokens, concurrency=batch)
                tokens = sum(len(o) for o in outs)
                fig["sglang"][batch] = {
                    "tokens_per_s": tokens / wall,
                    "tokens": tokens,
                    "same_tokens": sum(a == b for a, b in zip(outs, ref)),
                }
            lf = logit_error(
                server, passes, model.cpu() if device != "cpu" else model, prompts[:logit_prompts], max_tokens
            )
    fig["max_rel_logit_err"] = lf["max_rel_logit_err"]
    fig["sglang_tpf"] = lf["tokens"] / lf["passes"] if lf["passes"] else 0.0  # on the logit prompts
    fig["clover_tpf"] = run_engine(model, tok, cases[:logit_prompts], params, 1)["tpf"]  # the same prompts
    fig["same_tokens"] = min(fig["sglang"][b]["same_tokens"] for b in (1, 16))
    fig["sglang_tokens_per_s"] = fig["sglang"][16]["tokens_per_s"]
    fig["clover_tokens_per_s"] = fig["clover"][16]["tokens_per_s"]
    return fig
