"""``clover bench llama.cpp``'s decode table (docs/llama-cpp.md's tokens/s table), from its figures:
one row per model and type, PyTorch at f32 only, stock llama.cpp where it ran."""

from clover.bench.results import table
from clover.commands.bench_llamacpp import DECODE_COLUMNS, decode_rows

FIG = {
    "types": ["f32", "q8_0"],
    "llamacpp_tokens_per_s": {
        "bundled": {"ar": {"f32": 77.04, "q8_0": 120.2}, "default": {"f32": 441.3, "q8_0": 361.0}},
        "medium": {"ar": {"f32": 4.31, "q8_0": 9.5}, "default": {"f32": 19.1, "q8_0": 39.7}},
    },
    "torch_tokens_per_s": {"bundled": {"ar": {"f32": 60.0}, "default": {"f32": 243.0}}},
    "twin_llamacpp_tokens_per_s": {"bundled": {"f32": 2637.0, "q8_0": 2588.0}},
    "speedup_vs_twin": {"bundled": {"f32": 441.3 / 2637.0, "q8_0": 361.0 / 2588.0}},
}


def test_a_row_per_model_and_type_with_dashes_where_a_runtime_did_not_run():
    t = table("decode", DECODE_COLUMNS, decode_rows(FIG))
    assert t["columns"][2:4] == ["Clover llama.cpp ar", "Clover llama.cpp default"]
    assert t["rows"] == [
        ["bundled", "f32", "77", "441", "60", "243", "2637", "0.17"],
        ["bundled", "q8_0", "120", "361", "-", "-", "2588", "0.14"],
        ["medium", "f32", "4.31", "19.1", "-", "-", "-", "-"],
        ["medium", "q8_0", "9.5", "39.7", "-", "-", "-", "-"],
    ]
