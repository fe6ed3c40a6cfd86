"""The timeline model of bench/launch/timeline.py against hand-computed step times."""

import pytest

from bench.launch.timeline import PhaseTimes, async_step, format_predictions, predict, sync_step

PHASES = PhaseTimes(rollout=8.0, reward=1.0, train=4.0, sync=0.5)


def test_one_engine_no_overlap():
    # sync: 8 + 1 + 4 + 0.5 = 13.5; async: max(8 + 1, 4) + 0.5 = 9.5
    assert sync_step(PHASES) == pytest.approx(13.5)
    assert async_step(PHASES) == pytest.approx(9.5)
    assert predict(PHASES).speedup == pytest.approx(13.5 / 9.5)


def test_four_engines_learner_bound():
    # gen = 8 / 4 = 2; sync: 2 + 1 + 4 + 0.5 = 7.5; async: max(2 + 1, 4) + 0.5 = 4.5
    p = predict(PHASES, num_engines=4)
    assert p.generation_s == pytest.approx(2.0)
    assert p.sync_step_s == pytest.approx(7.5)
    assert p.async_step_s == pytest.approx(4.5)
    assert p.speedup == pytest.approx(7.5 / 4.5)


def test_reward_overlap_leaves_the_last_group():
    # gen = 2; exposed = max(1 / 16, 1 - 2) = 0.0625
    p = predict(PHASES, num_engines=4, overlap=True, groups=16)
    assert p.reward_exposed_s == pytest.approx(0.0625)
    assert p.sync_step_s == pytest.approx(2 + 0.0625 + 4 + 0.5)
    assert p.async_step_s == pytest.approx(4.5)


def test_reward_overlap_bounded_by_generation():
    # a sandbox slower than generation: exposed = max(3 / 16, 3 - 2) = 1
    slow = PhaseTimes(rollout=8.0, reward=3.0, train=4.0, sync=0.5)
    p = predict(slow, num_engines=4, overlap=True, groups=16)
    assert p.reward_exposed_s == pytest.approx(1.0)
    assert p.sync_step_s == pytest.approx(2 + 1 + 4 + 0.5)
    assert p.async_step_s == pytest.approx(max(3.0, 4.0) + 0.5)


def test_balanced_pipeline_doubles_throughput():
    balanced = PhaseTimes(rollout=4.0, reward=0.0, train=4.0, sync=0.0)
    assert predict(balanced).speedup == pytest.approx(2.0)


def test_invalid_inputs():
    with pytest.raises(ValueError, match="rollout"):
        PhaseTimes(rollout=-1.0, reward=0.0, train=0.0, sync=0.0)
    with pytest.raises(ValueError, match="num_engines"):
        predict(PHASES, num_engines=0)
    with pytest.raises(ValueError, match="groups"):
        predict(PHASES, overlap=True, groups=0)


def test_table_lists_every_engine_count():
    table = format_predictions([predict(PHASES, n) for n in (1, 2)], batch_size=128)
    lines = table.splitlines()
    assert len(lines) == 3 and "speed-up" in lines[0]
    assert lines[1].split()[0] == "1" and "1.42x" in lines[1]
