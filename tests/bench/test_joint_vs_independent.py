"""``clover bench decisions``' measurement (``clover.bench.joint_vs_independent``) on the bundled
model, a few groups: its figures agree with the per-mode results and with the groups' answers."""

import pytest

from clover.airspace.decision_groups import load_groups
from clover.api.joint_decisions import DEFAULT_POLICY, DEFAULT_THRESHOLD, decide_sync
from clover.bench.joint_vs_independent import client_group, measure_decisions

KNOBS = {"policy": DEFAULT_POLICY, "threshold": DEFAULT_THRESHOLD}


@pytest.fixture(scope="module")
def engine():
    from clover.api.loading import load_engine

    return load_engine(None, max_batch_size=16, prefix_cache_mb=0)


def test_figures_follow_from_each_mode(engine):
    figures, res = measure_decisions(engine, "test", 3, DEFAULT_POLICY, DEFAULT_THRESHOLD)
    assert set(res) == {"joint", "independent", "independent_sequential"}
    assert figures["n_groups"] + figures["skipped_groups"] == 3 and figures["n_groups"] > 0
    for mode, r in res.items():
        assert 0 <= r["group_acc"] <= 1 and 0 <= r["question_acc"] <= 1
        assert r["passes_per_group"] > 0 and figures[f"{mode}_question_acc"] == r["question_acc"]
    # decoding is batch-invariant: the questions submitted together get the answers they get one by one
    assert res["independent"]["question_acc"] == res["independent_sequential"]["question_acc"]
    assert figures["speedup_vs_independent"] == res["independent"]["s_per_group"] / res["joint"]["s_per_group"]
    assert sum(res["joint"]["blocks"].values()) == figures["n_groups"]


def test_a_group_is_scored_against_its_own_answers(engine):
    """The joint accuracy is the share of questions whose chosen option is the group's answer, as
    one ``decide_sync`` call answers them."""
    (g,) = load_groups("test", 1)
    r = decide_sync(engine, engine.tokenizer, client_group(g), "joint", None, KNOBS)
    right = sum(a["option_index"] == q.answer for a, q in zip(r["answers"], g.questions))
    _, res = measure_decisions(engine, "test", 1, DEFAULT_POLICY, DEFAULT_THRESHOLD, sequential=False)
    assert res["joint"]["question_acc"] == right / len(g.questions)
    assert client_group(g).questions[0].answer is None  # the client's copy carries no answers
