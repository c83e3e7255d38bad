"""The SGLang server command of ``clover bench sglang`` and the plugin's tests
(``clover.bench.sglang``): tensor-parallel ranks and what SGLang's CPU path needs for them."""

from clover.bench.sglang import cpu_bind, cpu_parallel_env, server_command


def test_tp_size_reaches_the_command_only_past_one_rank():
    one = server_command("py", "m", "prefix", 1234)
    two = server_command("py", "m", "prefix", 1234, tp_size=2)
    assert "--tp-size" not in one
    i = two.index("--tp-size")
    assert two[i + 1] == "2" and two[:i] + two[i + 2 :] == one


def test_each_rank_gets_its_own_cores_and_no_nccl_on_a_cpu():
    assert cpu_bind(2, 2) == "0|1" and cpu_bind(2, 64) == "0-31|32-63" and cpu_bind(4, 2) == "0|1|0|1"
    env = cpu_parallel_env(2)
    assert set(env) == {"SGLANG_CPU_OMP_THREADS_BIND", "SGLANG_NCCL_SO_PATH"}
    assert cpu_parallel_env(2, {"SGLANG_CPU_OMP_THREADS_BIND": "0-3|4-7"}).keys() == {"SGLANG_NCCL_SO_PATH"}
