"""bench/launch/workload.py: the [bench] table of a config and the random model's parameter
count (no engines)."""

import pytest

from bench.launch.workload import BENCH_DEFAULTS, load_bench_config, model_parameters
from common.config import ConfigError


def test_bench_config_loads(tmp_path):
    config, bench = load_bench_config("configs/bench.toml", ["--bench.steps", "3"])
    assert config.rollout.batch_size == 128 and config.rollout.group_size == 8
    assert config.rollout.max_new_tokens == 256
    assert bench["steps"] == 3 and bench["model"]["head_dim"] in (32, 64, 80, 96, 112, 128)


def test_bench_config_refuses_unknown_keys_and_no_measured_step():
    with pytest.raises(ConfigError, match=r"bench\.nope"):
        load_bench_config(None, ["--bench.nope", "1"])
    with pytest.raises(ConfigError, match="must exceed warmup"):
        load_bench_config(None, ["--bench.steps", "1"])
    with pytest.raises(ConfigError, match="unknown key"):
        load_bench_config(None, ["--rollout.nope", "1"])


def test_parameter_count_by_hand():
    spec = dict(BENCH_DEFAULTS["model"])
    # attention: q 512x512+512, k/v 2x(512x256+256), o 512x512; mlp 3x512x1408; 2 norms
    per_layer = (262144 + 512) + 2 * (131072 + 256) + 262144 + 3 * 720896 + 1024
    assert model_parameters(spec) == 8 * per_layer + 128 * 512 + 512
    assert model_parameters(spec) == 23_675_392
