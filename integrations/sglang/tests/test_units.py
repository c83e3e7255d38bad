"""The plugin's pieces without a server: the GDN state pool's history rules, the tool-call
parser's streamed reading against its whole-reply reading, and the parallel layouts the model
takes from SGLang."""

from __future__ import annotations

import json

import pytest
import torch

from clover.model.config import preset


def test_state_pool_commits_only_and_reads_prev_for_a_repeated_commit():
    from clover_sglang.state import GDNStatePool

    cfg = preset("tiny")
    pool = GDNStatePool(cfg)
    slots = torch.tensor([3])
    rows = pool.rows(slots, [0], 8, torch.float32)  # a new request: empty history
    i = pool.gdn_layers[0]
    assert rows.layers[i].S.abs().sum() == 0
    rows.layers[i].S += 1.0  # what a commit of block 0 computed
    pool.store(rows, torch.tensor([False]), 8)  # a denoise pass: nothing stored
    assert pool.length[3] == 0
    pool.store(rows, torch.tensor([True]), 8)  # the commit
    assert pool.length[3] == 8 and pool.t["S", i][3].min() == 1.0
    nxt = pool.rows(slots, [8], 8, torch.float32)  # the next block reads the committed history
    assert nxt.layers[i].S.min() == 1.0
    again = pool.rows(slots, [0], 8, torch.float32)  # block 0 forwarded again: the history before it
    assert again.layers[i].S.abs().sum() == 0
    with pytest.raises(RuntimeError, match="starts at 16"):  # a block past the history: refused
        pool.rows(slots, [16], 8, torch.float32)


class _Tool:
    def __init__(self, name):
        self.function = type("F", (), {"name": name})()


def test_tool_calls_streamed_in_any_chunks_equal_the_whole_reply():
    from clover_sglang.tool_calls import CloverDetector

    tools = [_Tool("recall_drone"), _Tool("get_drone_status")]
    reply = (
        '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-17"}}</tool_call>\n'
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "get_drone_status", "arguments": {"drone_id": "D-2"}}</tool_call>\n'
        '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-'
    )
    whole = CloverDetector().detect_and_parse(reply, tools)
    want = [("recall_drone", {"drone_id": "D-17"}), ("get_drone_status", {"drone_id": "D-2"})]
    assert [(c.name, json.loads(c.parameters)) for c in whole.calls] == want
    assert [c.tool_index for c in whole.calls] == [0, 1]
    for size in (1, 3, 7, 32, len(reply)):
        d, got = CloverDetector(), []
        for k in range(0, len(reply), size):
            got += d.parse_streaming_increment(reply[k : k + size], tools).calls
        assert [(c.name, json.loads(c.parameters), c.tool_index) for c in got] == [(*w, j) for j, w in enumerate(want)]
    text = CloverDetector().parse_streaming_increment("Sure. <tool_ca", tools)
    assert text.normal_text == "Sure. " and not text.calls  # a possible call start is held back


def test_parallel_layouts_read_from_sglang_and_those_not_implemented_refused():
    from clover_sglang.model import parallel_rank
    from sglang.srt.runtime_context import get_parallel

    assert parallel_rank() == (0, 1)  # no server: nothing published, one rank
    p = get_parallel()
    one = dict(tp_rank=1, tp_size=2, pp_size=1, attn_tp_size=2, moe_ep_size=1)
    with p.override(**one):
        assert parallel_rank() == (1, 2)
    for change, flag in (
        (dict(pp_size=2), "--pp-size"),
        (dict(attn_tp_size=1), "dp-attention"),
        (dict(moe_ep_size=2), "--ep-size"),
    ):
        with p.override(**{**one, **change}), pytest.raises(NotImplementedError, match=flag):
            parallel_rank()
