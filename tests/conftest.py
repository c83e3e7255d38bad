import os

import torch

# 2-core machines: one thread per test process keeps the suite from oversubscribing
torch.set_num_threads(int(os.environ.get("CLOVER_TEST_THREADS", "1")))
torch.set_flush_denormal(True)
