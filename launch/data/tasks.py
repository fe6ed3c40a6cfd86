"""The synthetic code task the demo trains on, and the corpus the tiny tokenizer is built from.

The task is chosen so that a randomly initialised tiny model can learn it in a few hundred steps
on 2 CPU cores while every reward still comes from executing code in the sandbox:

    # Return the number 7.
    def answer():
        return          <- the model writes the expression

The four tests grade closeness (the program must run and return an ``int``, land within 5,
within 2, or be exact), so a partial-credit reward is dense. The demo (``configs/demo.toml``)
pays only the exact number instead, with a one-token answer: graded credit pays a constant
answer well whatever the comment asks (a middle digit earns most of it), and a policy settles
there (``python -m bench.launch.constant`` prints what each constant earns under a config's
reward). A random model mostly writes a token that is no number; it learns to copy the digit
from the comment.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from common.types import Problem, StdioSpec, StdioTest

_TEMPLATE = "# Return the number {target}.\ndef answer():\n    return "


def synthetic_problem(target: int) -> Problem:
    """One instance of the task for ``target`` (0-9)."""
    header = _TEMPLATE.format(target=target)
    tests = (
        "assert isinstance(answer(), int)",
        f"assert abs(answer() - {target}) <= 5",
        f"assert abs(answer() - {target}) <= 2",
        f"assert answer() == {target}",
    )
    return Problem(
        problem_id=f"synthetic/{target}",
        prompt=header,
        tests=tests,
        program_prefix=header,
        reference_solution=f"{target}\n",
    )


def synthetic_problems() -> list[Problem]:
    """The ten problems of the synthetic task, one per target digit."""
    return [synthetic_problem(target) for target in range(10)]


_HIDDEN = "# Return the secret number.\n"
_ANSWER = "def answer():\n    return "


def hidden_problem(target: int) -> Problem:
    """One instance of the multi-turn demo task (``data.source = "synthetic_hidden"``).

    The prompt does not say the number, so a first turn can only guess. Half the reward is for
    any number from 0 to 9, half for the right one, and both tests are written
    ``abs(answer() - target) <= d``: whatever a first turn wrote, the feedback shows the test it
    failed with the number at the same place, right before the reopened ``def answer()``, so a
    second turn can learn to copy it (``configs/demo_repair.toml``). No guess is worth more than
    another (unlike the synthetic task's graded tests, which make a middle digit a good constant
    answer).
    """
    return Problem(
        problem_id=f"synthetic_hidden/{target}",
        prompt=_HIDDEN + _ANSWER,
        tests=tuple(f"assert abs(answer() - {target}) <= {d}" for d in (9, 0)),
        program_prefix=_ANSWER,
        reference_solution=f"{target}\n",
    )


def hidden_problems() -> list[Problem]:
    """The ten problems of the hidden-number task, one per target digit."""
    return [hidden_problem(target) for target in range(10)]


_STDIO_HEADER = "# Print n + {target}.\n"
_STDIO_PREFIX = "n = int(input())\nprint(n + "
STDIO_INPUTS = (0, 10, 35)  # the first is the sample


def stdio_problem(target: int) -> Problem:
    """One instance of the stdin/stdout demo task (``data.source = "synthetic_stdio"``).

    The same one-token answer as the synthetic task, in a whole program that reads stdin and
    writes stdout, judged as a contest judge does (``sandbox/trusted/stdio.py``): one process
    per input, its output compared with the answer file's tokens::

        # Print n + 7.
        n = int(input())
        print(n + 7)        <- the model writes the 7; the ")" follows it (program_suffix)
    """
    tests = tuple(
        StdioTest(
            "sample/1" if k == 0 else f"secret/{k}",
            f"{n}\n".encode(),
            f"{n + target}\n".encode(),
            "sample" if k == 0 else "secret",
        )
        for k, n in enumerate(STDIO_INPUTS)
    )
    return Problem(
        problem_id=f"synthetic_stdio/{target}",
        prompt=_STDIO_HEADER.format(target=target) + _STDIO_PREFIX,
        tests=(),
        program_prefix=_STDIO_PREFIX,
        program_suffix=")\n",
        reference_solution=f"{target}",
        stdio=StdioSpec(tests),
    )


def stdio_problems() -> list[Problem]:
    """The ten problems of the stdin/stdout demo task, one per target digit."""
    return [stdio_problem(target) for target in range(10)]


#: The built-in tasks by ``data.source`` name.
SYNTHETIC_SOURCES = {
    "synthetic": synthetic_problems,
    "synthetic_hidden": hidden_problems,
    "synthetic_stdio": stdio_problems,
}


_SNIPPETS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "if x == 0:\n    return None\nelse:\n    return x * 2\n",
    "import math\nresult = [math.sqrt(v) for v in values]\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "assert f([1, 2, 3]) == 6\n",
    "while left < right:\n    left += 1\n",
    "```python\ndef solve(n):\n    return n\n```\n",
]


def synthetic_corpus(seed: int = 0, repeats: int = 20) -> Iterator[str]:
    """Text for training the tiny tokenizer: the task's programs plus generic Python snippets."""
    rng = random.Random(seed)
    for _ in range(repeats):
        for problem in synthetic_problems():
            yield problem.prompt + problem.reference_solution
        yield rng.choice(_SNIPPETS)
