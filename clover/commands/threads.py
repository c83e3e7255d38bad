"""How many CPU threads a command runs the model on when ``--threads`` does not say.

torch's own default is one thread per logical CPU, and its OpenMP workers spin while they wait
at each operation's barrier. On a small or shared machine both cost dearly: a small model's
operations are too short to split, and a spinning worker burns a core that another process (or
its own sibling, taken off its core by the scheduler) needed. So, as measured in
docs/benchmarks.md ("CPU threads"):

- a model below ``MANY_THREADS_FROM`` active parameters per token runs on one thread: its
  operations are too short to split, and a second thread only adds barriers;
- a larger model runs on the physical cores that other programs leave idle (the cores less the
  machine's 1-minute load average, at least one): beside programs busy on every core, a second
  thread waits on a core it does not get;
- and OpenMP waits passively (``OMP_WAIT_POLICY=PASSIVE``, set before torch loads): a thread
  with no work sleeps and leaves its core to the rest of the machine.

``--threads N``, else ``CLOVER_THREADS=N``, else ``OMP_NUM_THREADS=N`` overrides the rule. A
count the rule chose is said once per process, on stderr.
"""

from __future__ import annotations

import dataclasses
import os
import sys

THREADS_ENV = "CLOVER_THREADS"
# active parameters per token from which more threads pay: between the bundled model (1.7 M,
# fastest on one) and the medium preset (90 M), docs/benchmarks.md
MANY_THREADS_FROM = 20_000_000

_said = False


def passive_waits() -> None:
    """OpenMP threads sleep when they have no work instead of spinning (unless the environment
    says otherwise). Only takes effect before torch is imported: ``clover``'s first step."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def physical_cores() -> int:
    import psutil  # deferred: psutil, not for clover --help

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def machine_load() -> float:
    """The 1-minute load average: tasks running or waiting to run, averaged."""
    import psutil  # deferred: psutil, not for clover --help

    return psutil.getloadavg()[0]


def default_threads(active_params: int, cores: int, load: float) -> tuple[int, str]:
    """The rule: (threads, why) for a model of ``active_params`` on ``cores`` physical cores with
    a 1-minute load average of ``load`` from other programs."""
    size = f"{active_params / 1e6:.3g} M active parameters"
    if active_params < MANY_THREADS_FROM or cores == 1:
        return 1, f"{size}: a small model decodes fastest on one"
    busy = min(cores, int(load + 0.5))  # a core counts as taken from half a task's load
    if busy == 0:
        return cores, f"{size}: one per physical core"
    return max(1, cores - busy), f"{size}: one per physical core left idle ({cores} cores, load {load:.1f})"


def env_threads() -> tuple[int, str] | None:
    """``CLOVER_THREADS`` or ``OMP_NUM_THREADS`` as (threads, its name), or None; a bad value is a
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
    """(threads, why): ``given`` (``--threads``), else the environment, else the rule."""
    if given:
        return given, "--threads"
    found = env_threads()
    return found if found is not None else default_threads(active_params, physical_cores(), machine_load())


def say_once(n: int, why: str) -> None:
    """One stderr line per process when the rule chose (a count the user set goes unsaid): the
    count, why, and how to change it."""
    global _said
    if _said or why in ("--threads", THREADS_ENV, "OMP_NUM_THREADS"):
        return
    _said = True
    print(
        f"clover: {n} CPU thread{'s' if n > 1 else ''} ({why}; --threads N or {THREADS_ENV}=N to change)",
        file=sys.stderr,
    )


def use_threads(given: int | None, config) -> int:
    """torch's CPU threads for a model of ``config`` (``choose_threads``), said once; the count."""
    import torch  # deferred: torch, not for clover --help

    n, why = choose_threads(given, active_params(config))
    torch.set_num_threads(n)
    say_once(n, why)
    return n


def apply_threads(model, given: int | None) -> int:
    """Set the CPU threads ``model`` (a Clover model, or a GGUF file's in llama.cpp) decodes on by
    ``choose_threads`` and say so once; a model on a GPU takes ``given`` only (0: left as is).
    Returns the count."""
    native = getattr(model, "native", None)  # LlamaCppClover: llama.cpp's own threads
    if native is not None:
        n, why = choose_threads(given, active_params(model.config))
        native.set_threads(n)
        say_once(n, why)
        return n
    if not on_cpu(model):
        if given:
            import torch  # deferred: torch, not for clover --help

            torch.set_num_threads(given)
        return given or 0
    return use_threads(given, model.config)


def on_cpu(model) -> bool:
    p = next(iter(model.parameters()), None)
    return p is None or p.device.type == "cpu"


def active_params(config) -> int:
    """Parameters per token of a model of ``config`` (counted on the meta device, unquantized)."""
    import torch  # deferred: torch, not for clover --help

    from clover.model import CloverForBlockDiffusion  # deferred: loads torch, not for clover --help

    with torch.device("meta"):
        model = CloverForBlockDiffusion(dataclasses.replace(config, quantization=None))
    return model.num_parameters()["active_params"]
