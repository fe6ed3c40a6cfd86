"""pass@k of a policy on held-out problems: sample n completions per problem, execute, summarise.

Both the training driver (``eval.every``) and the ``launch.evaluate`` command use this, so an
in-run evaluation and a standalone one see exactly the same prompts, seeds and judging. Generation
and execution are callables, so the same code serves an in-process worker (``worker.generate``)
and the training fleet (the rollout fleet's fault-tolerant ``generate`` and
``SandboxClient.execute`` over the sandbox actor). pass@k is the unbiased estimator of Chen et
al. 2021 (:mod:`launch.loop.passk`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from common.prompts import build_program, encode_prompt
from common.types import Completion, ExecutionJob, ExecutionResult, Problem, RolloutRequest, Verdict
from launch.loop.passk import mean_pass_at_k

GenerateFn = Callable[[list[RolloutRequest]], list[Completion]]
ExecuteFn = Callable[[list[ExecutionJob]], list[ExecutionResult]]
ProgressFn = Callable[[str], None]
PROBLEMS_PER_BATCH = 32  # bounds memory; every batch is one generate and one execute call


class EvalError(ValueError):
    """An evaluation that cannot run as asked (e.g. prompts longer than the model's context)."""


def sample_and_score(
    problems: Sequence[Problem],
    tokenizer,
    generate: GenerateFn,
    execute: ExecuteFn,
    n: int = 1,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> list[dict]:
    """One record per completion: ``n`` samples per problem, each executed against its tests.

    Seeds are a function of (seed, problem id, sample index), so an evaluation is reproducible
    and independent of batching and of how many workers share the requests.
    """
    records: list[dict] = []
    for start in range(0, len(problems), PROBLEMS_PER_BATCH):
        batch = problems[start : start + PROBLEMS_PER_BATCH]
        requests = [
            RolloutRequest(
                request_id=f"eval/{start + i}",
                prompt_token_ids=tuple(encode_prompt(tokenizer, p.prompt)),
                seeds=_seeds(seed, p.problem_id, n),
            )
            for i, p in enumerate(batch)
        ]
        by_key = {(c.request_id, c.sample_index): c for c in generate(requests)}
        completions = [by_key[(r.request_id, s)] for r in requests for s in range(n)]
        owners = [p for p in batch for _ in range(n)]
        programs = [build_program(p, c.text) for p, c in zip(owners, completions, strict=True)]
        jobs = [p.job(code) for p, code in zip(owners, programs, strict=True)]
        results = execute(jobs)
        for index, (problem, completion, program, result) in enumerate(
            zip(owners, completions, programs, results, strict=True)
        ):
            records.append(_record(problem, index % n, completion, program, result))
        if progress is not None:
            done = start + len(batch)
            passed = sum(r["passed"] for r in records)
            progress(f"{done}/{len(problems)} problems, {passed}/{len(records)} samples passed")
    return records


def _seeds(seed: int, problem_id: str, n: int) -> tuple[int, ...]:
    rng = random.Random(f"{seed}/eval/{problem_id}")
    return tuple(rng.getrandbits(31) for _ in range(n))


SLICES = ("kind", "difficulty")  # what every problem's pass@k is also reported by


def group_passes(problem: Problem, result: ExecutionResult) -> dict[str, bool]:
    """For a stdin/stdout problem, whether the program passed every test of each of its test
    groups (``sample``, ``secret``, ``secret/subtask1``...); a test not run counts as failed.
    ``test_verdicts`` follows ``StdioSpec.in_run_order``. Empty for a function problem."""
    if problem.stdio is None:
        return {}
    passes: dict[str, bool] = {}
    for index, test in enumerate(problem.stdio.in_run_order()):
        ran = index < len(result.test_verdicts)
        passed = ran and result.test_verdicts[index] is Verdict.PASSED
        passes[test.group] = passes.get(test.group, True) and passed
    return passes


def _record(
    problem: Problem, sample_index: int, completion: Completion, program: str, result
) -> dict:
    return {
        "groups": group_passes(problem, result),
        "task_id": problem.problem_id,
        "kind": problem.kind,
        "difficulty": problem.difficulty,
        "sample_index": sample_index,
        "completion": completion.text,
        "program": program,
        "passed": result.passed,
        "verdict": result.verdict.value,
        "tests_passed": result.tests_passed,
        "tests_total": result.tests_total,
        "finish_reason": completion.finish_reason,
        "num_tokens": len(completion.token_ids),
        "detail": result.detail,
    }


def summarize(records: Sequence[dict], ks: Sequence[int]) -> dict[str, float]:
    """``eval/pass@k`` for every k, from per-sample records; infra errors are not samples.
    Stdin/stdout problems also give ``eval/pass@k/<group>`` for each test group (a sample
    passes a group when it passes every test of it: ``group_passes``); and every problem
    ``eval/pass@k/kind/<kind>`` and, where its dataset labels it, ``.../difficulty/<label>``.

    A sample the sandbox could not judge (``infra_error``) says nothing about the model, so it
    is dropped from its problem's n rather than counted as a failure.
    """
    counts: dict[str, dict[str, list[int]]] = {}  # by test group ("": every test), by task
    for record in records:
        if record["verdict"] == Verdict.INFRA_ERROR.value:
            continue
        slices = [("", record["passed"]), *record.get("groups", {}).items()]
        slices += [(f"{key}/{record[key]}", record["passed"]) for key in SLICES if record.get(key)]
        for group, passed in slices:
            n_c = counts.setdefault(group, {}).setdefault(record["task_id"], [0, 0])
            n_c[0] += 1
            n_c[1] += bool(passed)
    metrics = {}
    for group, by_task in sorted(counts.items()):
        suffix = f"/{group}" if group else ""
        for k, value in mean_pass_at_k([tuple(v) for v in by_task.values()], ks).items():
            metrics[f"eval/pass@{k}{suffix}"] = value
    if "" not in counts:  # every sample an infra error: no estimate (NaN)
        metrics.update({f"eval/pass@{k}": v for k, v in mean_pass_at_k([], ks).items()})
    infra = sum(r["verdict"] == Verdict.INFRA_ERROR.value for r in records)
    metrics["eval/num_problems"] = float(len({r["task_id"] for r in records}))
    metrics["eval/infra_error_frac"] = infra / max(len(records), 1)
    return metrics


def group_summary(metrics: dict[str, float], by: str = "") -> dict[str, dict[str, float | None]]:
    """``summarize``'s per-group estimates as ``{group: {"pass@k": value}}`` (None: no
    estimate), for a summary file: the test groups (empty without stdin/stdout problems), or
    with ``by`` one of :data:`SLICES`, the kinds or difficulties."""
    groups: dict[str, dict[str, float | None]] = {}
    for key, value in metrics.items():
        name, _, group = key.removeprefix("eval/").partition("/")
        first, _, rest = group.partition("/")
        if first != by if by else first in SLICES:  # another slice's, or a kind's
            continue
        if name.startswith("pass@") and group:
            groups.setdefault(rest if by else group, {})[name] = None if value != value else value
    return groups


def evaluate(
    problems: Sequence[Problem],
    tokenizer,
    generate: GenerateFn,
    execute: ExecuteFn,
    n: int = 1,
    ks: Sequence[int] = (1,),
    seed: int = 0,
) -> dict[str, float]:
    """pass@k of the current policy on held-out ``problems`` (prompts already rendered).

    ``generate`` takes rollout requests and returns their completions (any order: they are
    matched by request id and sample index); ``execute`` judges execution jobs in order. Returns
    ``{"eval/pass@1": ..., "eval/pass@<k>": ..., ...}`` ready for the metrics log.
    """
    if max(ks) > n:
        raise EvalError(f"pass@{max(ks)} needs at least {max(ks)} samples per problem; n is {n}")
    records = sample_and_score(problems, tokenizer, generate, execute, n, seed)
    return summarize(records, ks)
