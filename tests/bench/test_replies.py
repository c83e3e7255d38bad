"""Reply faithfulness (``clover.bench.replies``) on hand-made replies: a faithful one, one with a
wrong number, one with a broken word, and the task's vocabulary."""

from clover.bench.replies import reply_check, reply_figures, task_vocabulary
from clover.data.task import get_task

MSGS = [
    {"role": "user", "content": "Bring drone 26 home, and lift the Golf-3 zone. Also how is drone 95 doing?"},
    {"role": "assistant", "content": "", "tool_calls": []},
    {"role": "tool", "content": '{"drone_id": "D-26", "state": "returning", "eta_min": 2}'},
    {"role": "tool", "content": '{"zone_name": "Golf-3", "lifted": true}'},
    {"role": "tool", "content": '{"drone_id": "D-95", "battery_pct": 41, "lat": 23.4034}'},
]
VOCAB = frozenset("is returning to base eta minutes zone lifted at battery the".split())


def test_a_faithful_reply():
    c = reply_check(
        "D-26 is returning to base, ETA 2 minutes. Golf-3 lifted. D-95 is at 23.4034, battery 41.", MSGS, VOCAB
    )
    assert c == {"ungrounded": [], "broken": []}


def test_a_wrong_number_and_a_wrong_id():
    c = reply_check("D-26 is returning to base, ETA 29 minutes. D-25 is at 23.4034.", MSGS, VOCAB)
    assert c["ungrounded"] == ["29", "D-25"] and c["broken"] == []
    assert reply_check("ETA 2.0 minutes", MSGS, VOCAB)["ungrounded"] == ["2.0"]  # as written: 2 is not 2.0


def test_a_broken_word():
    c = reply_check("ETA 2 minutesa a been lifted", MSGS, VOCAB)
    assert c["ungrounded"] == [] and c["broken"] == ["minutesa", "a", "been"]
    assert reply_check("Bring drone home", MSGS, VOCAB)["broken"] == []  # the conversation's own words


def test_figures():
    good = reply_check("Golf-3 lifted.", MSGS, VOCAB)
    wrong = reply_check("ETA 29 minutes", MSGS, VOCAB)
    broken = reply_check("Golf-3 liftd", MSGS, VOCAB)
    f = reply_figures([good, wrong, broken, None])
    assert f["replies"] == 3 and f["broken_replies"] == 1
    assert (f["ids_grounded"], f["well_formed"], f["faithful"]) == (2 / 3, 2 / 3, 1 / 3)


def test_the_task_vocabulary_holds_its_replies_words():
    """The measure's vocabulary is the task's reply vocabulary, the one grounded replies hold words to."""
    from clover.airspace.replies import reply_vocabulary

    v = task_vocabulary(get_task("airspace2"))
    assert v is reply_vocabulary()
    assert {"returning", "base", "eta", "minutes", "lifted", "zone"} <= v
    assert "minutesa" not in v and "hospitithay" not in v and "utes" not in v
