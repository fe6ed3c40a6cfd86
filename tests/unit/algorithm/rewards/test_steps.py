"""A completion's steps for process rewards (``algorithm/rewards/steps.py``): split by line,
blank line or regex, their prefixes, and the step scores aggregated."""

from __future__ import annotations

import pytest

from algorithm.rewards import aggregate_steps, split_steps, step_prefixes


def test_split_steps_by_line_blank_line_and_regex():
    text = "a = 1\nb = 2\n\nc = a + b\n"
    assert split_steps(text, "line") == ["a = 1\n", "b = 2\n\n", "c = a + b\n"]
    assert split_steps(text, "blank_line") == ["a = 1\nb = 2\n\n", "c = a + b\n"]
    assert split_steps("x\nStep 2: y\nStep 3: z", r"(?=Step \d)") == [
        "x\n",
        "Step 2: y\n",
        "Step 3: z",
    ]
    assert split_steps("\n\nx\ny", "line") == ["\n\nx\n", "y"]
    assert split_steps("", "line") == [""]
    for rule in ("line", "blank_line"):
        assert "".join(split_steps(text, rule)) == text


def test_step_prefixes_are_prefixes_of_the_completion():
    assert step_prefixes("a\nb\nc", "line") == ["a\n", "a\nb\n", "a\nb\nc"]


def test_aggregate_steps():
    scores = [0.5, -1.0, 2.0]
    assert aggregate_steps(scores, "min") == -1.0
    assert aggregate_steps(scores, "mean") == 0.5
    assert aggregate_steps(scores, "last") == 2.0
    with pytest.raises(ValueError, match="no step scores"):
        aggregate_steps([], "min")
