"""How many CPU threads a command runs the model on when ``--threads`` does not say.

torch's own default is one thread per logical CPU, and its OpenMP workers spin while they wait.
Both cost dearly on a small or shared machine: a small model's passes are too short to split
(each split adds a barrier), and a spinning worker that the scheduler has taken off its core
holds every other one at the barrier. So the rule (``default_threads``), measured in
docs/benchmarks.md ("CPU threads"):

- a model below ``MANY_THREADS_FROM`` active parameters: one thread;
- a larger one: the physical cores that other processes leave idle (at least one), measured over
  the command's own start-up (``mark_start`` to the choice);
- and OpenMP waits passively (``OMP_WAIT_POLICY=PASSIVE``, set before torch loads), so threads
  that have no work yield their core to the rest of the machine.

``--threads N``, else ``CLOVER_THREADS=N``, else ``OMP_NUM_THREADS=N`` overrides the rule. The
choice is printed once per process, on stderr.
"""

from __future__ import annotations

import os
import sys
import time

THREADS_ENV = "CLOVER_THREADS"
# active parameters per token from which a second thread pays on an idle CPU (docs/benchmarks.md)
MANY_THREADS_FROM = 20_000_000
# other processes' CPU use (in cores) below which a core counts as idle
IDLE_BELOW = 0.5

_start: tuple[float, float, float] | None = None  # (wall, machine busy CPU s, own CPU s) at start-up
_said = False


def _busy_and_own() -> tuple[float, float]:
    import psutil

    t = psutil.cpu_times()
    own = psutil.Process().cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0), own.user + own.system


def mark_start() -> None:
    """Note the machine's and this process's CPU time now (``clover``'s start), so the choice can
    tell how many cores other processes kept busy meanwhile. Before torch loads, also let OpenMP
    threads wait passively unless the environment says otherwise."""
    global _start
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _start = (time.monotonic(), *_busy_and_own())


def others_busy_cores() -> float:
    """Cores that other processes kept busy since ``mark_start`` (or over the next 0.2 s when it
    was not called or too little time has passed): the machine's CPU time less this process's."""
    start = _start
    if start is None or time.monotonic() - start[0] < 0.2:
        start = (time.monotonic(), *_busy_and_own())
        time.sleep(0.2)
    busy, own = _busy_and_own()
    return max(0.0, ((busy - start[1]) - (own - start[2])) / (time.monotonic() - start[0]))


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def default_threads(active_params: int, cores: int, busy: float) -> tuple[int, str]:
    """The rule: (threads, why) for a model of ``active_params`` on ``cores`` physical cores of
    which other processes keep ``busy`` busy."""
    size = f"{active_params / 1e6:.3g} M active parameters"
    if active_params < MANY_THREADS_FROM:
        return 1, f"{size}: a small model decodes fastest on one"
    idle = max(1, cores - int(busy + 1 - IDLE_BELOW))  # a core counts as busy from IDLE_BELOW of one
    if idle == cores:
        return cores, f"{size}: one per physical core"
    return idle, f"{size}: the physical cores others leave idle ({cores} cores, {busy:.1f} busy)"


def env_threads() -> tuple[int, str] | None:
    """``CLOVER_THREADS`` or ``OMP_NUM_THREADS`` as (threads, where from), or None; a bad value is a
    one-line exit."""
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        text = os.environ.get(name, "").strip()
        if not text:
            continue
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise SystemExit(f"clover: {name}={text!r}: give a positive integer (CPU threads)")
        return n, name
    return None


def choose_threads(given: int | None, active_params: int) -> tuple[int, str]:
    """(threads, why): ``given`` (``--threads``), the environment, or the rule."""
    if given:
        return given, "--threads"
    if (found := env_threads()) is not None:
        return found[0], found[1]
    return default_threads(active_params, physical_cores(), others_busy_cores())


def say_once(n: int, why: str) -> None:
    """One stderr line per process naming the choice and how to change it."""
    global _said
    if _said:
        return
    _said = True
    how = "" if why in ("--threads", THREADS_ENV, "OMP_NUM_THREADS") else f"; --threads N or {THREADS_ENV}=N to change"
    print(f"clover: {n} CPU thread{'s' if n > 1 else ''} ({why}{how})", file=sys.stderr)


def apply_threads(model, given: int | None) -> int:
    """Set the CPU threads ``model`` (a Clover model, or a GGUF file's in llama.cpp) decodes on by
    ``choose_threads`` and say so once; a model on a GPU takes ``given`` only. Returns the count."""
    native = getattr(model, "native", None)  # LlamaCppClover: llama.cpp's own threads
    if native is None and not on_cpu(model):
        if given:
            set_torch_threads(given)
        return given or 0
    if native is None:
        return use_threads(given, model.config)
    n, why = choose_threads(given, active_params(model.config))
    native.set_threads(n)
    say_once(n, why)
    return n


def use_threads(given: int | None, config) -> int:
    """torch's CPU threads for a model of ``config`` (``choose_threads``), said once; the count."""
    n, why = choose_threads(given, active_params(config))
    set_torch_threads(n)
    say_once(n, why)
    return n


def on_cpu(model) -> bool:
    p = next(iter(model.parameters()), None)
    return p is None or p.device.type == "cpu"


def set_torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def active_params(config) -> int:
    """Parameters per token of a model of ``config`` (counted on the meta device, as unquantized)."""
    import dataclasses

    import torch

    from clover.model import CloverForBlockDiffusion

    with torch.device("meta"):
        model = CloverForBlockDiffusion(dataclasses.replace(config, quantization=None))
    return model.num_parameters()["active_params"]
