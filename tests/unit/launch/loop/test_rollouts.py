"""Rollout records: rows of a step, rotation into gzip, the size cap, and a resumed run's
rewritten steps read from its newest file."""

from __future__ import annotations

import gzip
import json

import pytest

from common.types import Completion, ExecutionResult, Problem, Verdict
from launch.loop.groups import Group
from launch.loop.rollouts import RolloutWriter, read_rollouts, rollout_files, step_rows


def _rows(step: int, n: int = 3, tag: str = "") -> list[dict]:
    return [{"step": step, "sample": k, "tag": tag, "text": "x" * 40} for k in range(n)]


def test_rows_come_back_in_step_order(tmp_path):
    writer = RolloutWriter(tmp_path)
    for step in (1, 2, 3):
        writer.write(step, _rows(step))
    rows = list(read_rollouts(tmp_path))
    assert [(r["step"], r["sample"]) for r in rows] == [(s, k) for s in (1, 2, 3) for k in range(3)]
    assert len(rollout_files(tmp_path)) == 1


def test_a_full_file_is_gzipped_and_the_next_step_starts_another(tmp_path):
    writer = RolloutWriter(tmp_path, file_mib=100 / (1 << 20))  # a step is ~230 bytes
    for step in (1, 2, 3):
        writer.write(step, _rows(step))
    names = [p.name for p in rollout_files(tmp_path)]
    assert names == [
        "rollouts-000001-step0000001.jsonl.gz",
        "rollouts-000002-step0000002.jsonl.gz",
        "rollouts-000003-step0000003.jsonl.gz",
    ]
    with gzip.open(tmp_path / names[1], "rt") as handle:
        assert [json.loads(line)["step"] for line in handle] == [2, 2, 2]
    assert [r["step"] for r in read_rollouts(tmp_path)] == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_the_oldest_files_go_beyond_the_cap_never_the_newest(tmp_path):
    step_bytes = len("".join(json.dumps(r) + "\n" for r in _rows(1)))
    writer = RolloutWriter(tmp_path, file_mib=1 / (1 << 20), max_mib=2.5 * step_bytes / (1 << 20))
    for step in range(1, 6):
        writer.write(step, _rows(step))
    # gzip shrinks each file well below step_bytes, so more than two fit under the cap, and the
    # newest always stays
    kept = sorted({r["step"] for r in read_rollouts(tmp_path)})
    assert kept[-1] == 5 and kept == list(range(kept[0], 6))
    tiny = RolloutWriter(tmp_path / "tiny", file_mib=1 / (1 << 20), max_mib=1 / (1 << 20))
    for step in range(1, 4):
        tiny.write(step, _rows(step))
    assert [p.name for p in rollout_files(tmp_path / "tiny")] == [
        "rollouts-000003-step0000003.jsonl.gz"
    ]


def test_a_resumed_run_overrides_the_steps_it_redid(tmp_path):
    first = RolloutWriter(tmp_path)
    for step in (1, 2, 3, 4):
        first.write(step, _rows(step, tag="first"))
    resumed = RolloutWriter(tmp_path)  # resumed from the checkpoint after step 2
    for step in (3, 4, 5):
        resumed.write(step, _rows(step, tag="resumed"))
    rows = list(read_rollouts(tmp_path))
    assert [(r["step"], r["tag"]) for r in rows[::3]] == [
        (1, "first"),
        (2, "first"),
        (3, "resumed"),
        (4, "resumed"),
        (5, "resumed"),
    ]
    assert len(rows) == 15
    assert list(read_rollouts(rollout_files(tmp_path)[:1]))[-1]["tag"] == "first"


def test_step_rows_carry_the_group_as_trained(tmp_path):
    problem = Problem("p7", "def f():", ("assert f() == 1",), program_prefix="def f():")

    def completion(k: int) -> Completion:
        return Completion("7/0", k, [1, 2], [3] * (k + 1), [-0.5] * (k + 1), f" return {k}",
                          "stop", weight_version=4)  # fmt: skip

    passed = ExecutionResult(Verdict.PASSED, 1, 1, [Verdict.PASSED])
    broken = ExecutionResult(Verdict.INFRA_ERROR, 0, 1, [], detail="pool broke")
    group = Group(
        index=0,
        completions=[completion(0), completion(1)],
        results=[passed, broken],
        rewards=[1.0, None],
        terms={"execution": [1.0, None]},
        programs=["def f(): return 0", "def f(): return 1"],
    )
    rows = list(step_rows(9, [group], [0.0, None], [problem]))
    assert rows[0] == {
        "step": 9,
        "weight_version": 4,
        "problem_id": "p7",
        "role": "solver",
        "group": 0,
        "sample": 0,
        "prompt": "def f():",
        "completion": " return 0",
        "program": "def f(): return 0",
        "finish_reason": "stop",
        "num_tokens": 1,
        "turns": 1,
        "verdict": "passed",
        "tests_passed": 1,
        "tests_total": 1,
        "test_verdicts": ["passed"],
        "detail": "",
        "reward": 1.0,
        "terms": {"execution": 1.0},
        "advantage": 0.0,
        "source_task_id": None,
    }
    assert (rows[1]["verdict"], rows[1]["reward"], rows[1]["advantage"]) == (
        "infra_error",
        None,
        None,
    )


def test_a_resume_forgets_the_abandoned_steps_of_the_interrupted_run(tmp_path):
    first = RolloutWriter(tmp_path)
    for step in (1, 2, 3, 4, 5):  # the run got to step 5; its checkpoint was at step 2
        first.write(step, _rows(step, tag="first"))
    resumed = RolloutWriter(tmp_path, resumed_after=2)
    resumed.write(3, _rows(3, tag="resumed"))  # and it stopped again after one step
    steps = [(r["step"], r["tag"]) for r in read_rollouts(tmp_path)][::3]
    assert steps == [(1, "first"), (2, "first"), (3, "resumed")]


def test_a_line_cut_by_a_crash_is_skipped_and_a_broken_one_named(tmp_path):
    writer = RolloutWriter(tmp_path)
    writer.write(1, _rows(1))
    path = rollout_files(tmp_path)[0]
    with path.open("a") as handle:
        handle.write('{"step": 2, "sam')  # the process died here
    assert [r["step"] for r in read_rollouts(tmp_path)] == [1, 1, 1]
    path.write_text('{"step": 1}\nnot json\n{"step": 1}\n')
    with pytest.raises(ValueError, match=r"rollouts-000001-step0000001\.jsonl:2: not a JSON row"):
        list(read_rollouts(tmp_path))
    cut = tmp_path / "cut"
    RolloutWriter(cut, file_mib=1 / (1 << 20)).write(1, _rows(1))  # gzipped at once
    gz = rollout_files(cut)[0]
    gz.write_bytes(gz.read_bytes()[:-12])  # its end lost
    assert list(read_rollouts(cut)) == []


def test_two_runs_read_together_keep_all_their_rows(tmp_path):
    """Steps are matched (a resume's rewrite wins) only within one run directory: two runs of
    three steps, four rows each, read back as 24 rows, the first run's then the second's."""
    for run in ("a", "b"):
        writer = RolloutWriter(tmp_path / run)
        for step in (1, 2, 3):
            writer.write(step, _rows(step, n=4, tag=run))
    rows = list(read_rollouts([tmp_path / "a", tmp_path / "b"]))
    assert len(rows) == 24
    assert [(r["tag"], r["step"]) for r in rows[::4]] == [
        (run, step) for run in ("a", "b") for step in (1, 2, 3)
    ]
    # files of one run given one by one are still one run (resume rewrites still win)
    assert len(list(read_rollouts([*rollout_files(tmp_path / "a"), tmp_path / "b"]))) == 24


def test_a_step_cut_short_by_a_crash_is_dropped(tmp_path):
    """A run that died while writing step 3 and was never resumed: steps 1 and 2 are whole,
    step 3 has fewer rows than it wrote (``step_rows``), so it is not read as a step."""
    writer = RolloutWriter(tmp_path)
    for step in (1, 2, 3):
        writer.write(step, _rows(step, n=4))
    path = rollout_files(tmp_path)[0]
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-2]) + lines[-2][:10])  # two rows lost, one cut
    assert [r["step"] for r in read_rollouts(tmp_path)][::4] == [1, 2]
    assert all(r["step_rows"] == 4 for r in read_rollouts(tmp_path))
    # rows written before step_rows existed cannot be checked: they are kept
    path.write_text("".join(json.dumps({"step": 1, "sample": k}) + "\n" for k in range(2)))
    assert len(list(read_rollouts(tmp_path))) == 2
