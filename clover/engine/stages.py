"""Where an engine step's time goes: a clock the engine laps at the end of each stage of a step
(``Engine.clock``; None, the default, costs one test per stage), and wrappers that charge a
function's time to a stage of its own and take it out of the stage around it (the model's pass
inside the forward, the back end's glue around the library's call). ``clover.bench.stages``
reads it.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict

# the engine's stages of a step, in order (Engine.step, Engine._denoise)
SCHEDULE = "scheduling (admit, prefill bookkeeping, release)"
FORWARD = "runner: building the pass's inputs"
PENALTIES = "penalties, logit_bias, bans"
GRAMMAR_SLOT = "grammar: allowed tokens of the open slot"
SAMPLER = "sampler (constraints, softmax, argmax)"
POLICY = "policy"
GRAMMAR_COMMIT = "grammar: left-to-right commit"
APPLY = "applying the commit, step events"
FINISH = "finished blocks (detokenising, stop strings, text)"
ENGINE_STAGES = (SCHEDULE, FORWARD, PENALTIES, GRAMMAR_SLOT, SAMPLER, POLICY, GRAMMAR_COMMIT, APPLY, FINISH)


class StageClock:
    """Seconds per stage, summed over the steps it was lapped in. ``timer``: ``time.perf_counter``
    (wall time), or ``time.thread_time`` (this thread's CPU time: what other processes on a busy
    machine take is not counted)."""

    def __init__(self, timer=time.perf_counter):
        self.timer = timer
        self.seconds: dict[str, float] = defaultdict(float)
        self.steps = 0
        self._t = 0.0
        self._inner = [0.0]  # per open wrapped call (and the lap level): time already charged inside it

    def start(self) -> None:
        """A step begins: the next lap measures from now."""
        self.steps += 1
        self._t = self.timer()
        self._inner = [0.0]

    def lap(self, stage: str) -> None:
        """The time since the last lap, less what wrapped calls charged inside it, goes to ``stage``."""
        t = self.timer()
        self.seconds[stage] += t - self._t - self._inner[0]
        self._inner[0] = 0.0
        self._t = t

    def wrap(self, stage: str, fn):
        """``fn`` with its own time (less what wrapped calls inside it charged) charged to ``stage``,
        and all of it taken out of whatever encloses the call."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._inner.append(0.0)
            t = self.timer()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = self.timer() - t
                inner = self._inner.pop()
                self.seconds[stage] += dt - inner
                self._inner[-1] += dt

        return timed

    def per_step_ms(self) -> dict[str, float]:
        return {k: 1e3 * v / max(self.steps, 1) for k, v in self.seconds.items()}
