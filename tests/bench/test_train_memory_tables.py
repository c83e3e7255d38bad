"""``clover bench train-memory``'s summary (docs/memory.md's "Checked against measured runs"): each
rank's peak against the memory model, from its figures."""

from clover.commands.bench_train import summary_rows

MIB = 1 << 20
RES = {
    "baseline_rss_bytes": {"1": [400 * MIB], "2": [410 * MIB, 405 * MIB]},
    "peak_rss_bytes": {"1": [5167 * MIB], "2": [2927 * MIB, 2919 * MIB]},
    "memory_model_bytes": {"1": 4161 * MIB, "2": 2142 * MIB},
    "ratio_2_over_1": 0.5665,
}


def test_each_process_count_then_the_ratio_of_two_to_one():
    assert summary_rows(RES, [1, 2]) == [
        ["1 process", "5,167 MiB", "4,561 MiB", "1.13"],
        ["2 processes (rank 0 / rank 1)", "2,927 / 2,919 MiB", "2,552 MiB", "1.15"],
        ["2 / 1", "0.57", "0.56", ""],
    ]


def test_one_process_count_alone_has_no_ratio_row():
    one = {k: ({"1": v["1"]} if isinstance(v, dict) else v) for k, v in RES.items() if k != "ratio_2_over_1"}
    assert summary_rows(one, [1]) == [["1 process", "5,167 MiB", "4,561 MiB", "1.13"]]
