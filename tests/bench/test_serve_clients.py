"""``clover bench serve``'s server (``clover.bench.serve_clients``): started with flags that
``clover serve`` itself takes, the prefix cache off so that every request pays its prefill."""

from clover.bench.serve_clients import server_flags
from clover.cli import build_parser


def test_the_server_flags_are_clover_serves_own():
    flags = server_flags("some/model", 8, 64, "cpu", "float32", False)
    args = build_parser().parse_args(["serve", *flags])
    assert (args.model, args.max_batch_size, args.prefill_chunk, args.prefix_cache_mb) == ("some/model", 8, 64, 0)
    assert (args.device, args.dtype, args.compile, args.max_queue) == ("cpu", "float32", False, 512)
    assert "--model" not in server_flags(None, 8, 64, "cpu", "float32", True)  # the bundled model
