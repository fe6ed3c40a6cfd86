"""Reward terms (``algorithm/rewards/terms.py``) and their composition: expected values worked out
by hand."""

from __future__ import annotations

import textwrap

import pytest

from algorithm.rewards import (
    ComposedReward,
    RewardConfig,
    RewardInput,
    RewardTermConfig,
    RewardTermError,
    WeightedTerm,
    build_reward,
    format_term,
    length_penalty,
    load_user_term,
    term_metrics,
)
from common.config.algorithm import term_options
from common.types import ExecutionResult, Problem, Verdict

PROBLEM = Problem("p", "Write add.", ("assert add(1, 2) == 3",))
PREFIX_PROBLEM = Problem(
    "s",
    "def answer():\n    return",
    ("assert answer() == 7",),
    program_prefix="def answer():\n    return",
)


def item(
    completion="def add(a, b):\n    return a + b\n",
    verdict=Verdict.PASSED,
    passed=1,
    tokens=10,
    problem=PROBLEM,
    program=None,
):
    result = ExecutionResult(verdict, passed, 1)
    return RewardInput(problem, completion, program or completion, result, tokens)


def constant(*values):
    return lambda batch: list(values)


# ---- composition -----------------------------------------------------------------------------


def test_composed_reward_is_the_weighted_sum_of_terms():
    composed = ComposedReward(
        [
            WeightedTerm("a", 1.0, constant(1.0, 0.0, 0.5)),
            WeightedTerm("b", 0.5, constant(0.2, 1.0, -1.0)),
            WeightedTerm("c", -2.0, constant(0.25, 0.5, 0.0)),
        ]
    )
    scored = composed([item()] * 3)
    # 1 + 0.1 - 0.5 = 0.6;  0 + 0.5 - 1 = -0.5;  0.5 - 0.5 + 0 = 0
    assert scored.rewards == pytest.approx([0.6, -0.5, 0.0])
    assert scored.by_term["b"] == [0.2, 1.0, -1.0]


def test_none_from_any_term_masks_the_sample_never_zero():
    composed = ComposedReward(
        [
            WeightedTerm("a", 1.0, constant(None, 0.0, 1.0)),
            WeightedTerm("b", 1.0, constant(0.0, None, 1.0)),
        ]
    )
    assert composed([item()] * 3).rewards == [None, None, 2.0]


def test_term_metrics_average_only_scored_values():
    metrics = term_metrics({"a": [1.0, None, 0.0, None], "b": [None, None]})
    assert metrics["reward/a/mean"] == 0.5
    assert metrics["reward/a/masked_frac"] == 0.5
    # no scored value: the mean is unknown (null in metrics.jsonl), not 0
    assert metrics["reward/b/mean"] is None and metrics["reward/b/masked_frac"] == 1.0


def test_a_term_returning_the_wrong_count_or_nan_is_refused():
    with pytest.raises(RewardTermError, match="'a' returned 1 values for a batch of 2"):
        ComposedReward([WeightedTerm("a", 1.0, constant(1.0))])([item()] * 2)
    with pytest.raises(RewardTermError, match=r"'a' returned nan for completion 0.*None to mask"):
        ComposedReward([WeightedTerm("a", 1.0, constant(float("nan")))])([item()])


def test_default_config_is_the_execution_reward_exactly():
    reward = build_reward(RewardConfig(), max_new_tokens=4)
    batch = [
        item(verdict=Verdict.PASSED, passed=1),
        RewardInput(PROBLEM, "x", "x", ExecutionResult(Verdict.FAILED, 1, 3), 1),
        item(verdict=Verdict.INFRA_ERROR, passed=0),
        item(verdict=Verdict.SYNTAX_ERROR, passed=0),
    ]
    assert reward(batch).rewards == [1.0, 1 / 3, None, 0.0]
    assert [t.name for t in reward.terms] == ["execution"]


# ---- built-in terms --------------------------------------------------------------------------


def test_length_penalty_follows_dapo_soft_overlong_punishment():
    # max_len 100, cache 20: free up to 80 tokens, then -1/20 per token, -1 at 100 and beyond.
    assert length_penalty(0, 100, 20) == 0.0
    assert length_penalty(80, 100, 20) == 0.0
    assert length_penalty(81, 100, 20) == pytest.approx(-0.05)
    assert length_penalty(90, 100, 20) == pytest.approx(-0.5)
    assert length_penalty(100, 100, 20) == -1.0
    assert length_penalty(101, 100, 20) == -1.0
    assert length_penalty(100, 100, 0) == 0.0 and length_penalty(101, 100, 0) == -1.0


def test_length_term_defaults_to_max_new_tokens_and_a_quarter_cache():
    config = RewardConfig(terms={"length": {}})
    reward = build_reward(config, max_new_tokens=8)  # free up to 6 tokens
    scores = reward([item(tokens=n) for n in (6, 7, 8)]).rewards
    assert scores == [0.0, -0.5, -1.0]


def test_format_term_scores_extractable_code():
    batch = [
        item("```python\ndef add(a, b):\n    return a + b\n```"),
        item("def add(a, b):\n    return a + b\n"),
        item("I do not know."),
        item("Hello"),
        item(""),
        item(" 7", problem=PREFIX_PROBLEM, program="def answer():\n    return 7"),
        item(" )(", problem=PREFIX_PROBLEM, program="def answer():\n    return )("),
    ]
    assert format_term(batch) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def test_unknown_builtin_and_bad_options_are_named():
    with pytest.raises(ValueError, match=r"'speed': 'speed' is not a built-in.*module:function"):
        RewardConfig(terms={"speed": {}})
    with pytest.raises(ValueError, match=r"'length': cache_len .* must be at most max_len"):
        RewardConfig(terms={"length": {"options": {"max_len": 4, "cache_len": 8}}})
    with pytest.raises(ValueError, match="'scorer': path: Field required"):
        term_options("scorer", RewardTermConfig())
    with pytest.raises(ValueError, match="'format': colour: unknown option"):
        RewardConfig(terms={"format": {"options": {"colour": 1}}})
    with pytest.raises(ValueError, match="step_split '\\(' is not 'line'"):
        RewardConfig(terms={"scorer": {"options": {"path": "x", "step_split": "("}}})


def test_scorer_terms_are_found_by_kind():
    config = RewardConfig(
        terms={
            "execution": {},
            "orm": {"kind": "scorer", "weight": 0.1, "options": {"path": "a"}},
            "scorer": {"options": {"path": "b", "step_split": "line"}},
        }
    )
    assert {k: v.path for k, v in config.scorer_terms().items()} == {"orm": "a", "scorer": "b"}
    with pytest.raises(RewardTermError, match="'orm' needs its scorer actor"):
        build_reward(config, 4)


# ---- user-defined terms ----------------------------------------------------------------------


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    source = """
        def brevity(batch, scale=1.0):
            return [scale / (1 + item.num_tokens) for item in batch]

        def no_args():
            return []

        def two_args(batch, other):
            return []

        def keyword_only(*, batch):
            return []

        not_a_function = 3
    """
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(source))
    (tmp_path / "broken_rewards.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_rewards"


def test_user_term_is_loaded_and_composed_with_its_options(user_module):
    config = RewardConfig(
        terms={
            "execution": {"options": {"mode": "binary"}},
            "short": {"function": "my_rewards:brevity", "weight": 0.5, "options": {"scale": 2.0}},
        }
    )
    assert config.stops_at_first_failure()
    reward = build_reward(config, 4)
    scored = reward([item(tokens=3), item(tokens=1, verdict=Verdict.FAILED, passed=0)])
    # 1 + 0.5 * 2/4 = 1.25;  0 + 0.5 * 2/2 = 0.5
    assert scored.rewards == [1.25, 0.5]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("foo.bar:f", "reward term 'mine': cannot import module 'foo.bar' (No module named 'foo')"),
        (
            "my_rewards",
            "reward term 'mine': function 'my_rewards' must look like 'module:function'",
        ),
        (
            "my_rewards:missing",
            "reward term 'mine': module 'my_rewards' has no attribute 'missing'",
        ),
        (
            "my_rewards:not_a_function",
            "reward term 'mine': 'my_rewards:not_a_function' is not callable",
        ),
        (
            "broken_rewards:f",
            "reward term 'mine': importing module 'broken_rewards' failed (RuntimeError: boom)",
        ),
        (
            "my_rewards:no_args",
            "reward term 'mine': my_rewards:no_args() cannot be called as f(batch)",
        ),
        ("my_rewards:two_args", "my_rewards:two_args(batch, other) cannot be called as f(batch)"),
        ("my_rewards:keyword_only", "keyword_only(*, batch) cannot be called as f(batch)"),
    ],
)
def test_user_term_errors_say_what_is_wrong(user_module, path, message):
    with pytest.raises(RewardTermError) as info:
        load_user_term("mine", path)
    assert message in str(info.value)


def test_user_term_error_surfaces_at_config_validation(user_module):
    with pytest.raises(ValueError, match=r"cannot import module 'foo.bar'"):
        RewardConfig(terms={"mine": {"function": "foo.bar:f"}})
    with pytest.raises(ValueError, match=r"cannot be called as f\(batch, width=...\)"):
        RewardConfig(terms={"mine": {"function": "my_rewards:brevity", "options": {"width": 1}}})
