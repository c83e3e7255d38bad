"""The stage clock (``clover.engine.stages``): laps and wrapped calls charge each stage its own
time, an engine lapped by one decodes the same tokens, and ``clover.bench.stages`` splits a run
into the model's pass and the host stages."""

from __future__ import annotations

from clover.bench.stages import PASS, measure_stages
from clover.engine import Engine, SamplingParams
from clover.engine.stages import ENGINE_STAGES, FINISH, FORWARD, SAMPLER, StageClock
from tests.engine.helpers import mixed_params, peaky_model, prompts


class FakeTime:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_laps_and_wrapped_calls_charge_each_stage_its_own_time():
    now = FakeTime()
    clock = StageClock(now)

    def inner():
        now.t += 2.0

    def outer():
        now.t += 1.0
        wrapped_inner()
        now.t += 0.5

    wrapped_inner = clock.wrap("inner", inner)
    wrapped_outer = clock.wrap("outer", outer)
    clock.start()
    now.t += 3.0
    clock.lap("a")
    now.t += 0.25
    wrapped_outer()  # 3.5 s in all, of which 2 s inner: none of it is stage b's
    now.t += 0.75
    clock.lap("b")
    assert dict(clock.seconds) == {"a": 3.0, "outer": 1.5, "inner": 2.0, "b": 1.0}
    assert clock.steps == 1 and clock.per_step_ms()["b"] == 1000.0


def test_an_engine_with_a_clock_decodes_the_same_tokens_and_laps_every_step():
    model = peaky_model()
    ps = prompts([5, 9, 13, 3])
    params = mixed_params(4)
    plain = [o.token_ids for o in Engine(model, max_batch_size=4).generate_batch(ps, params)]
    engine = Engine(model, max_batch_size=4)
    engine.clock = clock = StageClock()
    timed = [o.token_ids for o in engine.generate_batch(ps, params)]
    assert timed == plain
    assert clock.steps > 0
    for stage in (FORWARD, SAMPLER, FINISH):
        assert clock.seconds[stage] > 0, stage
    assert set(clock.seconds) <= set(ENGINE_STAGES)


def test_measure_stages_splits_the_pass_from_the_host_stages():
    model = peaky_model()
    cases = [(p, None) for p in prompts([6, 11, 4])]
    r = measure_stages(model, None, cases, SamplingParams(max_tokens=12, block_size=4), 2)
    assert r["stages_ms"][PASS] > 0
    assert 0 < r["outside_pass_ms"] < r["step_ms"]
    assert sum(r["stages_ms"].values()) <= r["step_ms"] * 1.01
    assert r["tokens"] == sum(len(i) for i in r["ids"]) and r["exact_match"] is None
    assert "step" not in vars(model)  # the wrapper is taken off again
