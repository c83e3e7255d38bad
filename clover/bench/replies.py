"""Reply faithfulness: whether a final reply in words says only what the conversation holds.

A reply is judged on two things, each strict:

* **its ids are grounded**: every id run of the reply (a run of letters, digits and ``_`` joined by
  ``-``, ``.`` or ``:`` that holds a digit: "D-26", "2", "23.4034", "18:00";
  ``clover.engine.reply_grounding.id_runs``) is an id run of the user turns or the tool results,
  as written there: "D-26" in a reply needs "D-26" in the conversation ("drone 26" gives "26"),
  "2.0" needs "2.0" (a tool's ``2`` gives "2"), and a part of a run ("D-2" of "D-26") does not count;
* **its words are well formed**: every word (a run of ASCII letters) is, ignoring case, a word of
  the task's reply vocabulary (``Task.reply_vocabulary``; for ``airspace`` the words of its
  training chats: templates, replies, the names' pools) or of the conversation itself.
  "minutesa" or "HospititHay" is a broken word.

A reply is **faithful** when both hold. ``reply_check`` judges one; ``reply_figures`` sums the
final replies of a run of agent tasks (a task stopped at the step limit has none and is not counted).
"""

from __future__ import annotations

from clover.engine.reply_grounding import id_runs, reply_sources, words


def task_vocabulary(task) -> frozenset[str]:
    """The words (lower case) ``task``'s replies are judged by: its reply vocabulary
    (``clover.data.task.Task.reply_vocabulary``), the one grounded replies hold a reply's words to."""
    if task is None or task.reply_vocabulary is None:
        raise ValueError("the model's task has no reply vocabulary to judge a reply's words by")
    return task.reply_vocabulary()


def reply_check(reply: str, messages: list[dict], vocabulary: frozenset[str]) -> dict:
    """One final ``reply`` after ``messages`` (the conversation before it): the id runs it holds
    that the user turns and tool results do not, and its broken words."""
    held = set(id_runs(reply_sources(messages)))
    said = {w.lower() for m in messages for w in words(m.get("content") if isinstance(m.get("content"), str) else "")}
    return {
        "ungrounded": [r for r in id_runs(reply) if r not in held],
        "broken": [w for w in words(reply) if w.lower() not in vocabulary and w.lower() not in said],
    }


def reply_figures(checks: list[dict | None]) -> dict:
    """Shares over the final replies (None: a task with no final reply): ids grounded, words well
    formed, both (faithful); and the replies that fail, with what failed."""
    done = [c for c in checks if c is not None]
    n = len(done)
    return {
        "replies": n,
        "ids_grounded": sum(not c["ungrounded"] for c in done) / max(1, n),
        "well_formed": sum(not c["broken"] for c in done) / max(1, n),
        "faithful": sum(not c["ungrounded"] and not c["broken"] for c in done) / max(1, n),
        "broken_replies": sum(bool(c["broken"]) for c in done),
        "failures": [c for c in done if c["ungrounded"] or c["broken"]],
    }


# each request of the loop: grounded_reply off; on with words free (reply_words false); on, the
# default (words held to the task's reply vocabulary and the conversation)
SETTINGS = (
    ("off", {"grounded_reply": False}),
    ("words_free", {"grounded_reply": True, "reply_words": False}),
    ("on", {"grounded_reply": True}),
)


def measure_replies(llm, n: int, split: str, demo: int, max_steps: int) -> dict:
    """The first ``n`` operator tasks of ``split`` of ``llm``'s own task, and ``demo`` messages
    that each ask for a no-fly zone, through the agent loop under the engine's default policy,
    under each of ``SETTINGS`` (the same chats) → per setting: the final replies'
    ``reply_figures``, task success and seconds per task."""
    from clover.airspace.tasks import operator_tasks, zone_tasks  # deferred: the task, for clover --help
    from clover.bench.agent import local_model, run_policy
    from clover.data.task import model_task

    task = model_task(llm.config, default=True)
    vocabulary = task_vocabulary(task)
    sets = {"tasks": operator_tasks(n, split, load=task.eval_split)}
    if demo:
        sets["demo"] = zone_tasks(demo, split, load=task.eval_split)
    out: dict = {"split": split, "vocabulary_words": len(vocabulary)}
    for name, request in SETTINGS:
        model = local_model(llm, "default", None, **request)
        model.chat([{"role": "user", "content": "hello"}], sets["tasks"][0].tools)  # warm-up, not timed
        for what, tasks in sets.items():
            r = run_policy(model, tasks, max_steps, vocabulary)
            out.setdefault(what, {"n": len(tasks)})[name] = {
                **r["replies"],
                "success": r["success"],
                "s_per_task": r["s_per_task"],
            }
    return out
