"""Plain data that travels between actors.

Every object here is a frozen-ish dataclass of builtin values (str, int, float, lists of them),
so Ray can ship it between processes and machines without pickling model objects, and unit
tests can build it by hand. The same word means the same thing everywhere:

- a *problem* is a prompt plus the unit tests that decide whether code solves it;
- a *completion* is one sampled continuation of a prompt, with the sampler's token logprobs and
  the ``weight_version`` of the policy that produced it;
- a *group* is the G completions of one problem; advantages are normalised within it;
- a *verdict* is the sandbox's judgement of one execution.

A problem's tests come in *kinds* (``Problem.kind``: ``function``, ``class_method``,
``test_module``, ``stdio``), each judged as docs/datasets.md's table of kinds says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

KINDS = ("function", "class_method", "test_module", "stdio")
SAMPLE_GROUP = "sample"  # a stdin/stdout problem's tests shown in its statement: they run first


@dataclass(frozen=True)
class StdioTest:
    """One test of a whole program: what it reads on stdin and the answer its stdout must match.

    ``input`` and ``answer`` are the bytes themselves, or the path of a file on the host that
    judges (read in chunks by the pool's front: a 50 MB answer is never held whole).
    ``flags`` are the Kattis default output validator's (``float_tolerance 1e-6``,
    ``case_sensitive``, ``space_change_sensitive``: ``sandbox/trusted/answers.py``); ``group``
    is where the test sits in its package (``sample``, ``secret``, ``secret/subtask1``): samples
    run first, and ``launch.evaluate`` reports pass@k per group.
    """

    name: str
    input: bytes | Path
    answer: bytes | Path
    group: str = "secret"
    flags: str = ""


@dataclass(frozen=True)
class Validator:
    """A problem's own output validator (Kattis' ``output_validators/``), for problems with
    several right answers: a C, C++ (compiled) or Python program, run in the sandbox as
    ``validator input answer feedback_dir [flags] < output``; exit status 42 accepts the output,
    43 rejects it. ``files`` are its sources (name, bytes), ``main`` the one compiled."""

    language: str
    files: tuple[tuple[str, bytes], ...]
    main: str
    flags: str = ""


@dataclass(frozen=True)
class StdioSpec:
    """The tests of a program that reads stdin: one process per test, each under the problem's
    own limits (0: the sandbox's ``test_timeout_s``, ``memory_mb`` and ``stdio_output_mb``);
    the time limit is multiplied by ``sandbox.time_multiplier`` for slow hosts."""

    tests: tuple[StdioTest, ...]
    time_limit_s: float = 0.0
    memory_mb: int = 0
    output_mb: int = 0
    #: the problem's output validator; None: the default one (tokens, flags)
    validator: Validator | None = None

    def __post_init__(self) -> None:
        if not self.tests:
            raise ValueError("a stdin/stdout problem needs at least one test")

    def in_run_order(self) -> tuple[StdioTest, ...]:
        """The tests in the order they run, and ``ExecutionResult.test_verdicts`` follows:
        samples first (the cheapest evidence, and what the statement shows), else as given."""
        return tuple(sorted(self.tests, key=lambda test: test.group != SAMPLE_GROUP))


@dataclass(frozen=True)
class Problem:
    """One task: what the model sees and how its code is judged.

    ``tests`` are Python statements (usually ``assert EXPR == EXPECTED``), run after
    ``setup_code`` and the candidate program; a whole program reading stdin has ``stdio``
    instead (and no ``tests``). ``prompt`` is the text given to the model,
    already rendered by a prompt template. ``program_prefix`` is prepended to the extracted
    completion to form the program: the function header for completion-style tasks (the
    HumanEval convention), empty when the model writes the whole program.
    """

    problem_id: str
    prompt: str
    tests: tuple[str, ...]
    setup_code: str = ""
    program_prefix: str = ""
    reference_solution: str = ""
    #: the problem this task was derived from (a repair task's original; ``source_task_id`` in
    #: a problems file), so splits by problem keep the two together; empty for an original
    source_task_id: str = ""
    stdio: StdioSpec | None = None
    #: code after the completion: a fill-in-the-middle task (the stdin/stdout demo's
    #: ``print(n + ▮)``); empty for every dataset's problems
    program_suffix: str = ""
    #: what the tests call: ``Solution().twoSum`` (a fresh instance per test) makes the problem
    #: a ``class_method`` one, a module's file (``acronym.py``: the program, which a unittest
    #: module in the setup code tests) a ``test_module`` one; empty or a name, ``function``
    entry_point: str = ""
    #: the dataset's own label (``Easy``, ``Medium``, ``Hard``; ``introductory``...), or empty:
    #: ``launch.evaluate`` reports pass@k per kind and difficulty
    difficulty: str = ""

    @property
    def kind(self) -> str:
        """How the tests judge a program (:data:`KINDS`)."""
        if self.stdio is not None:
            return "stdio"
        if self.entry_point.endswith(".py"):
            return "test_module"
        return "class_method" if "()." in self.entry_point else "function"

    @property
    def num_tests(self) -> int:
        return len(self.stdio.tests) if self.stdio is not None else len(self.tests)

    def job(self, code: str) -> ExecutionJob:
        """``code`` (the whole program) to run against this problem's tests."""
        return ExecutionJob(code, self.tests, self.setup_code, self.stdio)


@dataclass(frozen=True)
class RolloutRequest:
    """One generation request: a prompt to sample ``n`` completions for, each with its own seed."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    seeds: tuple[int, ...]
    temperature: float | None = None  # None: rollout.temperature


@dataclass
class Completion:
    """One sampled completion and everything the learner needs to train on it."""

    request_id: str
    sample_index: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    sampler_logprobs: list[float]
    text: str
    finish_reason: str
    weight_version: int
    temperature: float | None = None  # the request's own sampling temperature, if it had one
    #: A multi-turn episode (``launch.loop.episodes``): ``token_ids`` are every turn's tokens
    #: with the feedback between them, and this marks the model's own (1) against the feedback
    #: (0), which is not trained on. None: a single turn, every token the model's.
    loss_mask: list[int] | None = None
    turns: int = 1

    @property
    def num_trained_tokens(self) -> int:
        """The model's own tokens, every turn's, without an episode's feedback."""
        return len(self.token_ids) if self.loss_mask is None else sum(self.loss_mask)


class Verdict(str, Enum):  # noqa: UP042 (StrEnum would change str() of verdicts in records)
    """Outcome of executing one completion (or one test) in the sandbox."""

    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    RUNTIME_ERROR = "runtime_error"
    SYNTAX_ERROR = "syntax_error"
    INFRA_ERROR = "infra_error"


@dataclass(frozen=True)
class ExecutionJob:
    """Code to run against tests. ``code`` is the whole candidate program; ``stdio``, when set,
    holds its tests instead of ``tests`` (see :class:`Problem`)."""

    code: str
    tests: tuple[str, ...]
    setup_code: str = ""
    stdio: StdioSpec | None = None
    #: the program's language: ``python``; a ``stdio`` program may also be ``c`` or ``cpp``,
    #: compiled in the sandbox (``sandbox/trusted/languages.py``)
    language: str = "python"

    @property
    def num_tests(self) -> int:
        return len(self.stdio.tests) if self.stdio is not None else len(self.tests)


@dataclass
class ExecutionResult:
    """The sandbox's judgement of one job.

    ``test_verdicts`` has one entry per test that was run; with a binary reward the sandbox stops
    at the first failing test, so it can be shorter than ``tests_total``. ``wrong_answers``
    counts the failed tests whose assertion ran and was false (a wrong value, or an ``exec``-form
    test's own ``assert``), not those where the program raised (an ``AssertionError`` of its
    own included), which fail the same: no reward reads it, only a bug's validity
    (``launch.selfplay.repairs``).
    """

    verdict: Verdict
    tests_passed: int
    tests_total: int
    test_verdicts: list[Verdict] = field(default_factory=list)
    duration_ms: float = 0.0
    detail: str = ""
    wrong_answers: int = 0

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED


@dataclass
class TrainSample:
    """One completion ready for the learner: tokens, sampler logprobs and its advantage."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    sampler_logprobs: list[float]
    advantage: float
    weight_version: int
    group_index: int = 0
    #: Sampled at a temperature of its own (``algorithm.advantage.low_variance_temperature``):
    #: the learner scores it at that temperature, so its logprobs match the sampler's. None:
    #: the run's.
    temperature: float | None = None
    #: 1 on the tokens to train on, 0 on feedback of a multi-turn episode (its sampler logprobs
    #: are 0 and never compared). None: every completion token is trained on.
    loss_mask: list[int] | None = None

    @classmethod
    def of(
        cls,
        completion: Completion,
        advantage: float = 0.0,
        group_index: int = 0,
        *,
        raw: bool = False,
    ) -> TrainSample:
        """The sample of ``completion``: scored at the temperature it was sampled at, on the
        tokens the model wrote. ``raw``: at temperature 1 on every completion token, as an
        engine's prompt logprobs are (the parity probe compares the two)."""
        return cls(
            prompt_token_ids=completion.prompt_token_ids,
            completion_token_ids=completion.token_ids,
            sampler_logprobs=completion.sampler_logprobs,
            advantage=advantage,
            weight_version=completion.weight_version,
            group_index=group_index,
            temperature=None if raw else completion.temperature,
            loss_mask=None if raw else completion.loss_mask,
        )

    @property
    def num_trained_tokens(self) -> int:
        """The completion tokens the loss sees: the model's own, without episode feedback."""
        if self.loss_mask is None:
            return len(self.completion_token_ids)
        return sum(self.loss_mask)


@dataclass
class WeightUpdate:
    """A handle to new policy weights, as produced by a weight sender.

    ``payload`` is transport specific and always plain data: safetensors buckets (a list of
    bytes), a file path, or the metadata a GPU transport needs to receive tensors out of band.
    """

    version: int
    transport: str
    payload: list[bytes] | str | dict
    num_bytes: int = 0
    buckets: int = 1  # pieces it travels in (safetensors buckets, broadcasts)


@dataclass(frozen=True)
class ProcessGroupSpec:
    """Where one learner rank joins its group: the ``host:port`` of the group's store (served
    by whoever picked it, ``common/rendezvous.py``), this process's rank, the group's size, the
    torch.distributed backend (gloo on CPU, nccl on GPU) and the network interface gloo and
    NCCL use ('': their default)."""

    address: str
    rank: int
    world_size: int
    backend: str = "gloo"
    interface: str = ""
