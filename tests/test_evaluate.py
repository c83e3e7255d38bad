"""``clover eval airspace``: the figures the training issue asks for, per policy."""

import json
import subprocess
import sys


def _eval(*args):
    cmd = [sys.executable, "-m", "clover", "eval", "airspace", "--n", "3", "--groups", "1", "--json", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_eval_reports_each_policy_on_the_bundled_model():
    r = _eval("--policy", "ar,threshold")
    assert r.returncode == 0, r.stderr[-2000:]
    ar, th = json.loads(r.stdout)
    assert (ar["policy"], th["policy"]) == ("ar", "threshold")
    for res in (ar, th):
        assert {"exact_match", "n", "decision_group_acc", "tpf", "tokens_per_s"} <= set(res)
        assert res["n"] == 3 and 0 <= res["exact_match"] <= 1 and res["tpf"] > 0
    assert ar["tpf"] <= 1.0  # one token per forward at most


def test_eval_refuses_an_unknown_policy():
    r = _eval("--policy", "beam")
    assert r.returncode != 0 and "unknown policy" in r.stderr
