"""The learned scorer class, run directly (no Ray) on tiny random models built offline."""

from __future__ import annotations

import pytest

from actor.scorer import RewardScorer
from algorithm.rewards import (
    RewardConfig,
    RewardInput,
    ScorerOptions,
    build_reward,
)
from common.types import ExecutionResult, Problem, Verdict
from launch.fleet.scorer import ScorerTerm, build_tiny_scorer

PROMPTS = ["# Return 7.\ndef answer():\n    return", "# Return 3.\ndef answer():\n    return"]
COMPLETIONS = [" 7\n", " x = 1\ny = 2\n\nreturn y"]


@pytest.fixture(scope="module")
def scorer_path(tmp_path_factory) -> str:
    return str(build_tiny_scorer(tmp_path_factory.mktemp("scorer") / "tiny-scorer"))


def scorer(path: str, **options) -> RewardScorer:
    return RewardScorer(path, ScorerOptions(path=path, **options))


def test_scores_are_per_text_and_independent_of_batching(scorer_path):
    texts = [p + c for p, c in zip(PROMPTS, COMPLETIONS)] + ["def f():\n    pass\n" * 3]
    together = scorer(scorer_path, batch_size=8).score_texts(texts)
    alone = scorer(scorer_path, batch_size=1).score_texts(texts)
    assert len(together) == 3 and all(isinstance(s, float) for s in together)
    assert together == pytest.approx(alone, abs=1e-4)  # padding does not change a score
    assert len({round(s, 6) for s in together}) == 3


def test_truncation_keeps_the_end_of_the_text(scorer_path):
    short = scorer(scorer_path, max_length=8)
    long_text = "# a long preamble that is cut away\n" * 4 + "return 7"
    tail_ids = short.tokenizer(long_text)["input_ids"][-8:]
    tail = short.tokenizer.decode(tail_ids)
    assert short.score_texts([long_text]) == pytest.approx(short.score_texts([tail]), abs=1e-4)


def test_step_scores_are_prefix_scores_aggregated(scorer_path):
    whole = scorer(scorer_path)
    prompt, completion = PROMPTS[1], COMPLETIONS[1]
    prefixes = [prompt + " x = 1\n", prompt + " x = 1\ny = 2\n\n", prompt + completion]
    expected = whole.score_texts(prefixes)
    for how, value in (("min", min(expected)), ("mean", sum(expected) / 3), ("last", expected[-1])):
        prm = scorer(scorer_path, step_split="line", step_aggregate=how)
        assert prm.score([prompt], [completion]) == pytest.approx([value], abs=1e-5)


def test_two_labels_give_the_probability_of_label_one(tmp_path):
    path = str(build_tiny_scorer(tmp_path / "two", num_labels=2))
    scores = scorer(path).score(PROMPTS, COMPLETIONS)
    assert all(0.0 < s < 1.0 for s in scores)


def test_value_head_checkpoint(tmp_path, tiny_model_path):
    import shutil

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer

    path = tmp_path / "vhead"
    shutil.copytree(tiny_model_path, path)
    model = AutoModel.from_pretrained(path, dtype=torch.float32)
    torch.manual_seed(0)
    weight, bias = torch.randn(1, model.config.hidden_size), torch.tensor([0.5])
    save_file(
        {"v_head.summary.weight": weight, "v_head.summary.bias": bias}, path / "v_head.safetensors"
    )
    text = PROMPTS[0] + COMPLETIONS[0]
    ids = AutoTokenizer.from_pretrained(path)(text, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**ids).last_hidden_state[0, -1]
    expected = float(hidden @ weight[0] + bias[0])
    assert scorer(str(path), head="value_head").score_texts([text]) == pytest.approx(
        [expected], abs=1e-4
    )


def test_value_head_missing_is_explained(tiny_model_path):
    with pytest.raises(ValueError, match="no v_head weight"):
        scorer(tiny_model_path, head="value_head")


def test_scorer_term_composes_with_execution(scorer_path):
    local = scorer(scorer_path)
    config = RewardConfig(
        terms={"execution": {}, "scorer": {"weight": 0.1, "options": {"path": scorer_path}}}
    )
    reward = build_reward(config, 4, {"scorer": ScorerTerm(local)})
    batch = [
        RewardInput(Problem("p", p, ()), c, c, ExecutionResult(Verdict.PASSED, 1, 1), 2)
        for p, c in zip(PROMPTS, COMPLETIONS)
    ]
    scored = reward(batch)
    raw = local.score(PROMPTS, COMPLETIONS)
    assert scored.by_term["scorer"] == pytest.approx(raw)
    assert scored.rewards == pytest.approx([1.0 + 0.1 * s for s in raw])
