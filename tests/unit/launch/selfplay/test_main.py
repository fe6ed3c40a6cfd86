"""launch.selfplay's pieces that need no engine: the weakness profile, the repair quota, the
round log that a crash may cut (the rounds themselves: tests/integration/test_selfplay.py)."""

from __future__ import annotations

import json

import pytest

from launch.selfplay.__main__ import read_rounds, repair_quota, weakness_profile


def _record(task: str, verdict: str) -> dict:
    return {"task_id": task, "verdict": verdict, "passed": verdict == "passed"}


def test_the_profile_counts_judged_samples_only():
    records = [
        _record("a", "passed"), _record("a", "failed"), _record("a", "infra_error"),
        _record("b", "timeout"), _record("b", "syntax_error"),
    ]  # fmt: skip
    profile = weakness_profile(records)
    assert profile["pass_rate"] == {"a": 0.5, "b": 0.0}
    assert profile["verdicts"] == {
        "failed": 0.25, "passed": 0.25, "syntax_error": 0.25, "timeout": 0.25,
    }  # fmt: skip
    assert profile["samples"] == 4


def test_weaker_problems_get_more_repairs_and_solved_ones_none():
    quota = repair_quota({"solved": 1.0, "half": 0.5, "never": 0.0, "rarely": 0.9}, 3)
    assert quota == {"half": 2, "never": 3, "rarely": 1}


def test_a_round_log_cut_by_a_crash_is_repaired_before_the_next_row(tmp_path):
    rows = [{"round": 0, "pass@1": 0.1}, {"round": 1, "pass@1": 0.2}]
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"round": 2, "pass'
    (tmp_path / "rounds.jsonl").write_text(text)
    assert read_rounds(tmp_path) == rows
    # the cut line is gone, so a row appended now starts a line of its own
    with (tmp_path / "rounds.jsonl").open("a") as handle:
        handle.write(json.dumps({"round": 2, "pass@1": 0.3}) + "\n")
    assert [r["round"] for r in read_rounds(tmp_path)] == [0, 1, 2]


@pytest.mark.parametrize("text", ["", "\n"])
def test_an_empty_round_log_has_no_rounds(tmp_path, text):
    (tmp_path / "rounds.jsonl").write_text(text)
    assert read_rounds(tmp_path) == []
