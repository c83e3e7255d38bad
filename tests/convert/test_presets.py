"""Each Qwen preset has the parameters of the transformers language model built from the same
config (on the meta device: no memory): Clover's count is transformers' plus Clover's own GDN
parameters, with the vision tower and the MTP head left out as conversion leaves them out."""

import pytest

from clover.bench.presets import FAMILY, hf_causal_lm, hf_text_config, preset_counts, unique_numel
from clover.convert.qwen import clover_config
from clover.model import preset


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_preset_parameter_count_equals_the_transformers_model(name):
    c = preset_counts(name)
    assert c["clover"] == c["transformers"] + c["clover_only"], c


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_the_transformers_config_converts_back_to_the_preset(name):
    """``hf_text_config`` writes what conversion reads: converting its config gives the preset back,
    field for field."""
    c = preset(name)
    _, hc = hf_text_config(c, FAMILY[name])
    back = clover_config(hc.to_dict(), c.mask_token_id, c.vocab_size, c.block_size, {})
    assert back == c


def test_info_gives_the_source_models_count(capsys):
    """``clover info --preset qwen3.5-0.8b``: total less Clover's own parameters is transformers' count."""
    import json

    from clover.cli import main

    with pytest.raises(SystemExit) as e:
        main(["info", "--preset", "qwen3.5-0.8b", "--json"])
    assert e.value.code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["total_params"] - info["clover_params"] == unique_numel(hf_causal_lm("qwen3.5-0.8b")) == 752_393_024
    assert info["num_experts"] == 0 and info["intermediate_size"] == 3584
