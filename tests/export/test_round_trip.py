"""``clover convert`` takes an exported folder back into a Clover checkpoint, bit for bit."""

from __future__ import annotations

import pytest
import torch

from clover.cli import main
from clover.model.config import CloverConfig
from clover.model.io import read_weights


@pytest.mark.parametrize("which", ["bundled_export", "tiny_export"])
def test_round_trip_is_bit_exact(which, request, tmp_path):
    d = request.getfixturevalue(which)
    src = d["src"]
    with pytest.raises(SystemExit) as e:
        main(["convert", "--from", str(d["export"]), "--out", str(tmp_path / "back"), "--quiet"])
    assert e.value.code == 0
    a, b = read_weights(src), read_weights(tmp_path / "back")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)), k
    assert (
        CloverConfig.load(src / "config.json").to_dict()
        == CloverConfig.load(tmp_path / "back" / "config.json").to_dict()
    )
    if which == "bundled_export":
        assert (src / "tokenizer.json").read_bytes() == (tmp_path / "back" / "tokenizer.json").read_bytes()
