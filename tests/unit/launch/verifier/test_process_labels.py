"""Monte Carlo step labels, hand-checked with stub continuations and a stub judge."""

from __future__ import annotations

from common.types import Completion, ExecutionResult, Verdict
from launch.data.tasks import synthetic_problem
from launch.verifier.process_labels import mc_step_labels

#: What the stub policy writes after any prefix, sample by sample: two of four are "bad".
CONTINUATIONS = ["    x = 1\n", "bad\n", "    pass\n", "bad"]


def _generate(requests):
    return [
        Completion(
            r.request_id, s, list(r.prompt_token_ids), [1], [0.0], CONTINUATIONS[s], "stop", 0
        )
        for r in requests
        for s in range(len(r.seeds))
    ]


def _execute(jobs):
    """The stub judge: a program passes unless it contains "bad"."""
    return [
        ExecutionResult(Verdict.FAILED if "bad" in job.code else Verdict.PASSED, 0, 1)
        for job in jobs
    ]


def test_each_prefix_is_labelled_by_its_continuations_and_the_whole_by_its_verdict():
    problem = synthetic_problem(7)
    seen = []

    def generate(requests):
        seen.extend(requests)
        return _generate(requests)

    programs = [(problem, "7\n    x = 1\n"), (problem, "8\nbad\n    y = 2\n")]
    labels = mc_step_labels(programs, generate, _execute, lambda text: [len(text)], samples=4)
    got = [(label.step, label.steps, label.label) for label in labels]
    # program 1: prefix "7\n" -> 2 of 4 continuations pass; the whole program passes
    # program 2: "8\n" -> 2/4; "8\nbad\n" -> every continuation keeps "bad": 0; the whole fails
    assert got == [(1, 2, 0.5), (2, 2, 1.0), (1, 3, 0.5), (2, 3, 0.0), (3, 3, 0.0)]
    assert [label.text for label in labels[:2]] == [
        problem.prompt + "7\n",
        problem.prompt + "7\n    x = 1\n",
    ]
    # one request per prefix but the last, from prompt + prefix, with one seed per sample
    assert len(seen) == 3 and all(len(r.seeds) == 4 for r in seen)
    assert [r.prompt_token_ids for r in seen] == [
        (len(problem.prompt + "7\n"),),
        (len(problem.prompt + "8\n"),),
        (len(problem.prompt + "8\nbad\n"),),
    ]
    again = mc_step_labels(programs, _generate, _execute, lambda t: [len(t)], samples=4)
    assert again == labels


def test_a_one_step_program_needs_no_continuation():
    calls = []
    labels = mc_step_labels(
        [(synthetic_problem(3), "3\n")],
        lambda requests: calls.append(requests) or [],
        _execute,
        lambda text: [1],
        samples=8,
    )
    assert [(label.step, label.label) for label in labels] == [(1, 1.0)] and calls == []


def test_infra_errors_are_masked_not_counted_as_failures():
    """A continuation the sandbox could not judge leaves the fraction: 1 of the 3 judged
    continuations passes, not 1 of 4; a whole program without a verdict has no label."""

    def execute(jobs):
        results = _execute(jobs)
        results[0] = ExecutionResult(Verdict.INFRA_ERROR, 0, 1)  # the first continuation's
        results[-1] = ExecutionResult(Verdict.INFRA_ERROR, 0, 1)  # the whole program's
        return results

    labels = mc_step_labels(
        [(synthetic_problem(7), "7\n    x = 1\n")], _generate, execute, lambda t: [1], samples=4
    )
    # continuations of "7\n": "    x = 1" (infra error), "bad", "    pass" (passes), "bad"
    assert [(label.step, label.label) for label in labels] == [(1, 1 / 3)]
