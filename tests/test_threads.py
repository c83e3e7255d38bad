"""The default CPU threads of the commands (``clover.commands.threads``): the rule, what overrides
it, the busy-core estimate, and the one line that says the choice."""

import argparse

import pytest
import torch

from clover.commands import threads as T
from clover.data import default_model_dir
from clover.model import CloverForBlockDiffusion, preset
from clover.model.io import load_config


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No thread settings from the environment, the line not said yet, torch's count restored."""
    for name in (T.THREADS_ENV, "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(T, "_said", False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_rule():
    small, large = T.MANY_THREADS_FROM - 1, T.MANY_THREADS_FROM
    assert T.default_threads(small, cores=8, busy=0.0)[0] == 1  # small: one, however idle the machine
    assert T.default_threads(large, cores=8, busy=0.0) == (8, "20 M active parameters: one per physical core")
    assert T.default_threads(large, cores=8, busy=0.4)[0] == 8  # a little background use leaves a core idle
    assert T.default_threads(large, cores=8, busy=0.6)[0] == 7
    assert T.default_threads(large, cores=8, busy=2.5)[0] == 5
    n, why = T.default_threads(large, cores=2, busy=1.9)
    assert n == 1 and "2 cores, 1.9 busy" in why
    assert T.default_threads(large, cores=2, busy=7.0)[0] == 1  # never below one


def test_the_bundled_model_is_small_and_medium_is_not():
    """The two sizes measured for the rule fall on either side of it."""
    assert T.active_params(load_config(default_model_dir())) < T.MANY_THREADS_FROM
    assert T.active_params(preset("medium")) >= T.MANY_THREADS_FROM
    cfg = preset("tiny")  # counted as the model counts itself
    assert T.active_params(cfg) == CloverForBlockDiffusion(cfg).num_parameters()["active_params"]


def test_flag_then_environment_then_rule(monkeypatch):
    big = 10 * T.MANY_THREADS_FROM
    monkeypatch.setattr(T, "physical_cores", lambda: 4)
    monkeypatch.setattr(T, "others_busy_cores", lambda: 1.0)
    assert T.choose_threads(None, big) == (3, f"{big / 1e6:.3g} M active parameters: the physical cores others "
                                              "leave idle (4 cores, 1.0 busy)")  # fmt: skip
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert T.choose_threads(None, big) == (2, "OMP_NUM_THREADS")
    monkeypatch.setenv(T.THREADS_ENV, "5")
    assert T.choose_threads(None, big) == (5, T.THREADS_ENV)
    assert T.choose_threads(6, big) == (6, "--threads")
    monkeypatch.setenv(T.THREADS_ENV, "many")
    with pytest.raises(SystemExit, match="CLOVER_THREADS='many': give a positive integer"):
        T.choose_threads(None, big)


def test_busy_cores_leave_out_this_process(monkeypatch):
    """Machine CPU time grew by 3 s, 1 s of it this process's, over 2 s: others kept 1 core busy."""
    monkeypatch.setattr(T.time, "monotonic", lambda: 10.0)
    monkeypatch.setattr(T, "_start", (8.0, 100.0, 5.0))
    monkeypatch.setattr(T, "_busy_and_own", lambda: (103.0, 6.0))
    assert T.others_busy_cores() == pytest.approx(1.0)


def test_busy_cores_measured_here_are_plausible():
    busy = T.others_busy_cores()
    assert 0.0 <= busy <= T.physical_cores() * 4


def test_applied_to_the_bundled_model_and_said_once(capsys):
    from clover.api.loading import load_model_dir

    model, _ = load_model_dir(None)
    torch.set_num_threads(2)
    assert T.apply_threads(model, None) == 1 and torch.get_num_threads() == 1
    assert T.apply_threads(model, 2) == 2 and torch.get_num_threads() == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["clover: 1 CPU thread (1.75 M active parameters: a small model decodes fastest on one; "
                   "--threads N or CLOVER_THREADS=N to change)"]  # fmt: skip


@pytest.mark.parametrize("command", ["generate", "chat", "serve", "eval", "agent"])
def test_every_model_command_leaves_threads_to_the_rule(command):
    """No command fixes a thread count of its own: unset --threads is the rule's to choose."""
    from clover.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices[command]
    action = next(a for a in p._actions if "--threads" in a.option_strings)
    assert action.default is None and "CLOVER_THREADS" in action.help


def test_benchmarks_leave_threads_to_the_rule():
    import importlib

    from clover.bench import BENCHMARKS
    from clover.commands.bench import MODULES

    for mod in MODULES:  # each registers its benchmarks
        importlib.import_module(mod)
    assert {"decode", "context", "serve", "decisions", "quant", "twin", "agent"} <= set(BENCHMARKS)
    for name, (_, add_args, _) in BENCHMARKS.items():
        p = argparse.ArgumentParser()
        add_args(p)
        action = next((a for a in p._actions if "--threads" in a.option_strings), None)
        if action is not None and name != "llama.cpp":
            assert action.default is None, name
