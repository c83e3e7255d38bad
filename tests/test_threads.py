"""The default CPU threads of the commands (``clover.commands.threads``): the rule, what overrides
it, the busy-core estimate, and the one line that says the choice."""

import argparse
import os

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
    # a small model: one thread, idle machine or not
    for load in (0.0, 3.0, 40.0):
        assert T.default_threads(small, cores=8, load=load) == (
            1,
            f"{small / 1e6:.3g} M active parameters: a small model decodes fastest on one",
        )
    # a large one: the physical cores other programs leave idle, at least one
    assert T.default_threads(large, cores=8, load=0.4) == (8, "20 M active parameters: one per physical core")
    assert T.default_threads(large, cores=8, load=0.6) == (
        7,
        "20 M active parameters: one per physical core left idle (8 cores, load 0.6)",
    )
    assert T.default_threads(large, cores=8, load=2.5)[0] == 5
    assert T.default_threads(large, cores=2, load=1.2)[0] == 1
    assert T.default_threads(large, cores=2, load=9.0)[0] == 1
    assert T.default_threads(large, cores=1, load=0.0)[0] == 1


def test_the_bundled_model_is_small_and_medium_is_not():
    """The two sizes measured for the rule fall on either side of it."""
    assert T.active_params(load_config(default_model_dir())) < T.MANY_THREADS_FROM
    assert T.active_params(preset("medium")) >= T.MANY_THREADS_FROM
    cfg = preset("tiny")  # counted as the model counts itself
    assert T.active_params(cfg) == CloverForBlockDiffusion(cfg).num_parameters()["active_params"]


def test_flag_then_environment_then_rule(monkeypatch):
    big = 10 * T.MANY_THREADS_FROM
    monkeypatch.setattr(T, "physical_cores", lambda: 4)
    monkeypatch.setattr(T, "machine_load", lambda: 0.0)
    assert T.choose_threads(None, big) == (4, "200 M active parameters: one per physical core")
    monkeypatch.setattr(T, "machine_load", lambda: 1.0)
    assert T.choose_threads(None, big)[0] == 3
    assert T.choose_threads(None, 1000) == (1, "0.001 M active parameters: a small model decodes fastest on one")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert T.choose_threads(None, big) == (2, "OMP_NUM_THREADS")
    monkeypatch.setenv(T.THREADS_ENV, "5")
    assert T.choose_threads(None, big) == (5, T.THREADS_ENV)
    assert T.choose_threads(6, big) == (6, "--threads")
    monkeypatch.setenv(T.THREADS_ENV, "many")
    with pytest.raises(SystemExit, match="CLOVER_THREADS='many': give a positive integer"):
        T.choose_threads(None, big)


def test_cores_and_load_are_read():
    assert 1 <= T.physical_cores() <= (os.cpu_count() or 1)
    assert T.machine_load() >= 0.0


def test_openmp_waits_passively_in_every_clover_process():
    """``clover`` sets the wait policy before torch loads (a fresh interpreter shows it), and a
    policy the user set is kept."""
    import subprocess
    import sys

    code = (
        "import atexit, os, sys\n"
        "import clover.cli\n"
        "early = 'torch' in sys.modules\n"
        "atexit.register(lambda: print(early, os.environ.get('OMP_WAIT_POLICY'), file=sys.stderr))\n"
        "clover.cli.main(['info', '--json'])\n"
    )
    for env, want in (({}, "False PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "False ACTIVE")):
        base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        r = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr.strip().splitlines()[-1] == want, r.stderr


def test_applied_to_the_bundled_model_and_said_once(capsys):
    from clover.api.loading import load_model_dir

    model, _ = load_model_dir(None)
    torch.set_num_threads(2)
    assert T.apply_threads(model, 2) == 2 and torch.get_num_threads() == 2
    assert capsys.readouterr().err == ""  # a count the user chose goes unsaid
    assert T.apply_threads(model, None) == 1 and torch.get_num_threads() == 1
    torch.set_num_threads(2)
    assert T.apply_threads(model, None) == 1 and torch.get_num_threads() == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "clover: 1 CPU thread (1.75 M active parameters: a small model decodes fastest on one; "
        "--threads N or CLOVER_THREADS=N to change)"
    ]


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
