"""clover-sglang: Clover served by SGLang (docs/sglang.md). SGLang loads it through its
``sglang.srt.plugins`` entry point (``clover_sglang.plugin.register``)."""
