"""What a constant answer earns on a run's problems: ``python -m bench.launch.constant``.

A policy that learned to write one number whatever the prompt asks has learned nothing about
the task, yet a reward with partial credit can pay it well (the demo's first reward paid a
middle digit 0.68 while exact answers stayed near 20%). This command measures the bar a
trained run has to clear: for each candidate answer it builds the program every problem of the
run would get from that completion, executes them in a real sandbox pool, and scores them with
the run's own reward terms. It prints one row per answer (mean reward, pass rate) and the best
constant by reward; ``docs/benchmarks.md`` records the demo's, and the demo's test checks that
the trained policy's exact-answer rate is at least 3x what the best constant earns.

    python -m bench.launch.constant --config configs/demo.toml [--answers 0,1,...,9]

Only execution-based reward terms can score here (a learned scorer needs its actor).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass

from common.config import Config, ConfigError, load_config
from common.help_format import DefaultsHelpFormatter
from common.prompts import build_program
from common.types import Problem


@dataclass(frozen=True)
class ConstantScore:
    """One constant answer on every problem: its mean composed reward and pass rate."""

    answer: str
    reward: float
    pass_rate: float


def score_constants(config: Config, problems: list[Problem], answers: list[str], pool):
    """Each answer written as the completion of every problem, executed by ``pool`` (a
    :class:`sandbox.trusted.pool.SandboxPool`) and scored by the run's reward terms; one
    :class:`ConstantScore` per answer, in order."""
    from algorithm.rewards import RewardInput, build_reward  # lazy: torch-free, but not needed

    reward = build_reward(config.reward, config.rollout.max_new_tokens)
    scores = []
    for answer in answers:
        programs = [build_program(p, answer) for p in problems]
        jobs = [p.job(code) for code, p in zip(programs, problems)]
        results = pool.run(jobs)
        batch = [
            RewardInput(problem, answer, program, result, num_tokens=1)
            for problem, program, result in zip(problems, programs, results, strict=True)
        ]
        rewards = [r for r in reward(batch).rewards if r is not None]
        scores.append(
            ConstantScore(
                answer,
                statistics.fmean(rewards) if rewards else float("nan"),
                sum(r.passed for r in results) / len(results),
            )
        )
    return scores


def best(scores: list[ConstantScore]) -> ConstantScore:
    """The constant that earns the most reward (the one a policy would settle on)."""
    return max(scores, key=lambda s: s.reward)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m bench.launch.constant",
        description="What each constant answer earns on a run's problems, under its reward.",
        epilog="Any --section.key VALUE pair overrides the config file.",
    )
    parser.add_argument("--config", default="configs/demo.toml", help="the run's TOML config")
    parser.add_argument(
        "--answers",
        default=",".join(str(d) for d in range(10)),
        help="comma-separated completions to try, each written as every problem's answer",
    )
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    # lazy: the pool and the problems' loaders; --help answers first
    from launch.data.problems import load_raw
    from sandbox.trusted.pool import SandboxPool

    try:
        config = load_config(args.config, overrides)
        data = config.data
        problems = load_raw(data.source, data.split, data.format, data.max_problems)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    answers = [a.strip() for a in args.answers.split(",") if a.strip()]
    with SandboxPool(config.sandbox) as pool:
        scores = score_constants(config, problems, answers, pool)
    print(f"{len(problems)} problems of {data.source}, reward terms {sorted(config.reward.terms)}")
    print("answer | reward | pass rate")
    for s in scores:
        print(f"{s.answer:>6} | {s.reward:.3f}  | {s.pass_rate:.3f}")
    top = best(scores)
    print(f"best constant: {top.answer!r}, reward {top.reward:.3f}, pass rate {top.pass_rate:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
