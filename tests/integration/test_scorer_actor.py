"""The learned scorer as a Ray actor: started by ``launch.fleet.actors.start_scorers``, scored
through its term."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from actor.scorer import RewardScorer
from algorithm.rewards import RewardConfig, RewardInput
from common.config import RayConfig
from common.types import ExecutionResult, Problem, Verdict
from launch.fleet.scorer import ScorerTerm, build_tiny_scorer
from tests.integration.helpers import private_ray

pytestmark = pytest.mark.integration


def test_scorer_actor_scores_like_the_local_class(tmp_path):
    import ray

    from launch.fleet.actors import start_scorers

    start = time.monotonic()
    build_tiny_scorer(tmp_path / "_models" / "tiny-scorer")  # what builtin:tiny-scorer resolves to
    options = {"path": "builtin:tiny-scorer", "step_split": "line", "num_cpus": 0.5}
    reward = RewardConfig(terms={"execution": {}, "prm": {"kind": "scorer", "options": options}})
    config = SimpleNamespace(
        reward=reward, run=SimpleNamespace(output_dir=str(tmp_path)), ray=RayConfig()
    )
    with private_ray():
        handles = start_scorers(config, run_id=f"test{int(start)}")
        assert list(handles) == ["prm"]
        passed = ExecutionResult(Verdict.PASSED, 1, 1)
        batch = [
            RewardInput(Problem("p", "# Return 7.\n", ()), text, text, passed, 3)
            for text in ("x = 7\nreturn x", "return 7", "")
        ]
        remote_scores = ScorerTerm(handles["prm"])(batch)
        local = RewardScorer(
            str(tmp_path / "_models" / "tiny-scorer"), reward.scorer_terms()["prm"]
        )
        assert remote_scores == pytest.approx(ScorerTerm(local)(batch), abs=1e-5)
        for handle in handles.values():
            ray.kill(handle, no_restart=True)
    assert time.monotonic() - start < 30
