"""The learner as a Ray actor: its control group reaches it beside the default one.

``async.learner_threads_during_rollout`` depends on it: the driver's producer thread narrows and
widens the learner's torch threads while ``train_step`` may be running. Checked without timing:
the request is taken from the ``control`` group, the training thread applies it, and a control
call is answered while a train step is still queued in the default group.
"""

from __future__ import annotations

import random

import pytest

from common.config import LearnerConfig
from common.types import TrainSample
from tests.integration.helpers import private_ray

pytestmark = pytest.mark.integration


def _samples(n: int) -> list[TrainSample]:
    rng = random.Random(0)
    return [
        TrainSample(
            prompt_token_ids=[rng.randrange(1, 100) for _ in range(4)],
            completion_token_ids=[rng.randrange(1, 100) for _ in range(6)],
            sampler_logprobs=[-4.0] * 6,
            advantage=1.0 if i % 2 else -1.0,
            weight_version=0,
            group_index=i // 2,
        )
        for i in range(n)
    ]


def test_control_group_sets_the_threads_of_the_next_train_step(tiny_model_path):
    import ray

    from launch.fleet.actors import learner_actor_class

    with private_ray():
        learner = (
            learner_actor_class()
            .options(num_cpus=0)
            .remote(tiny_model_path, LearnerConfig(num_cpus=2, micro_batch_tokens=32))
        )
        try:
            control = learner.set_compute_threads.options(concurrency_group="control")
            ray.get(control.remote(1))
            narrowed = ray.get(learner.train_step.remote(_samples(8)))
            assert narrowed["train/compute_threads_mean"] == 1.0

            # a long step occupies the default group; the control call does not queue behind it
            busy = learner.train_step.remote(_samples(256))
            ray.get(control.remote(0))
            assert not ray.wait([busy], timeout=0)[0], "the control call waited for the step"
            ray.get(busy)
            widened = ray.get(learner.train_step.remote(_samples(8)))
            assert widened["train/compute_threads_mean"] == 2.0
        finally:
            ray.kill(learner, no_restart=True)
