"""``clover bench decode``'s two summaries (``speed_tables``), the tables README.md's "Benchmark"
and docs/benchmarks.md's "Decode speed" are generated from: each cell from the runs it names."""

from clover.commands.bench_decode import speed_tables
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD


def _run(tok_s: float, tpf: float = 1.0, em: float | None = None) -> dict:
    return {"tokens_per_s": tok_s, "tpf": tpf, "exact_match": em}


BY_BATCH = {
    1: {"ar": _run(100), "default": _run(160, 1.85), "unfused": _run(150, 1.85), "hf": _run(120)},
    16: {
        "ar": _run(200, 0.98, 0.25),
        "default": _run(400, 2.3, 0.25),
        "threshold@0.7": _run(600, 4.2, 0.14),
        "threshold@0.9": _run(410, 2.8, 0.2),
        "prefix@0.9": _run(405, 2.7, 0.23),
        "hf": _run(320),
    },
}


def test_the_summary_has_a_row_per_decoder_at_the_smallest_and_largest_batch():
    (title, columns, rows), _ = speed_tables(BY_BATCH, [1, 16])
    assert columns == ["decoding", "batch 1 tok/s (TPF)", "batch 16 tok/s (TPF)", "exact match"]
    assert rows == [
        [
            f"{DEFAULT_POLICY} τ {DEFAULT_THRESHOLD:g} (default)",
            "160 (1.85): 1.6x ar, 1.3x hf",
            "400 (2.30): 2.0x ar, 1.2x hf",
            "25.0 %",
        ],
        ["ar (one position per pass)", "100", "200", "25.0 %"],
        ["threshold τ 0.9", "-", "410 (2.80)", "20.0 %"],  # the sweep from the highest τ down
        ["threshold τ 0.7", "-", "600 (4.20)", "14.0 %"],
        ["prefix τ 0.9", "-", "405 (2.70)", "23.0 %"],
        ["hf generate() (same shape)", "120", "320", "-"],
    ]


def test_the_per_batch_table_compares_the_default_with_both_baselines():
    _, (title, columns, rows) = speed_tables(BY_BATCH, [1, 16])
    assert columns[0] == "batch" and len(columns) == 5
    assert rows == [
        [1, "100", "160 (1.85, 1.60x ar, 1.33x hf)", "150", "120"],
        [16, "200", "400 (2.30, 2.00x ar, 1.25x hf)", "-", "320"],
    ]


def test_without_the_transformers_baseline_its_row_and_ratio_are_left_out():
    no_hf = {b: {k: v for k, v in r.items() if k != "hf"} for b, r in BY_BATCH.items()}
    (_, _, rows), (_, _, per_batch) = speed_tables(no_hf, [1, 16])
    assert [r[0] for r in rows][-1] == "prefix τ 0.9"
    assert rows[0][1] == "160 (1.85): 1.6x ar" and per_batch[0][2:] == ["160 (1.85, 1.60x ar)", "150", "-"]
