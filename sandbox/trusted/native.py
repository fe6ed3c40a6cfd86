"""Native programs of whole-program judging: compiling a C or C++ program in the sandbox (one
execution of the host's compiler, whose stdout is the binary), and running a problem's own
output validator (Kattis' convention), after a test's program exited well, in an execution of
its own whose scratch holds the answer. Exit status 42 accepts, 43 rejects; anything else is
the problem's fault, masked (``infra_error``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from common.config import SandboxConfig
from common.types import ExecutionJob, Validator, Verdict
from sandbox.trusted import languages
from sandbox.trusted.processes import Ending, execution, output_of
from sandbox.trusted.tasks import Outcome

VALIDATION_TIME_S = 60.0  # problemtools' validation_time default
VALIDATOR = "validator"
ACCEPTED, REJECTED = 42, 43


@dataclass(frozen=True)
class Build:
    """Sources to compile: the language, the files by name, the one given to the compiler, and
    what the binary is for."""

    language: str
    files: tuple[tuple[str, bytes], ...]
    main: str
    role: str = "program"  # or "validator"

    @classmethod
    def of_program(cls, job: ExecutionJob) -> Build:
        source = job.code.encode("utf-8", "surrogateescape")
        return cls(job.language, ((languages.SOURCE, source),), languages.SOURCE)

    @classmethod
    def of_validator(cls, validator: Validator) -> Build:
        return cls(validator.language, validator.files, validator.main, "validator")

    def key(self) -> str:
        digest = hashlib.sha256(f"{self.language}\0{self.main}".encode())
        for name, data in self.files:
            digest.update(b"\0" + name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
        return digest.hexdigest()


class CompileTask:
    """One compilation for a run (``sandbox/trusted/stdio.py``: ``StdioRun.compiled`` takes
    the binary, or why there is none)."""

    def __init__(self, run, build: Build) -> None:
        self.run = run
        self.build = build
        self.index = run.index
        self.attempts = 0
        self.output: list[bytes] = []

    def begin(self, config: SandboxConfig) -> dict:
        self.attempts += 1
        self.output = []
        request = execution(b"", languages.COMPILE_TIME_S, languages.BINARY_MB, 0, config)
        request["native"] = True
        request["argv"] = languages.compile_command(self.build.language, self.build.main)
        request["files"] = dict(self.build.files)
        return request

    def on_record(self, record: object) -> bool:
        return False

    def on_output(self, data: bytes) -> None:
        self.output.append(data)

    def finish(self, message: dict) -> Outcome:
        ending = Ending(message)
        verdict, why = ending.verdict()
        missing = languages.missing_compiler(self.build.language)
        if missing or verdict is not None:
            errors = ending.stderr_tail(600) if verdict is not None else ""
            why = f"{missing or why}{': ' + errors if errors else ''}"
            return self.run.compiled(self.build, b"", why, ending.duration_ms)
        binary = b"".join(output_of(self.output, message))
        return self.run.compiled(self.build, binary, "", ending.duration_ms)

    def give_up(self, verdict: Verdict, why: str) -> Outcome:
        if verdict is Verdict.INFRA_ERROR:  # the pool could not start the compiler: masked
            return self.run.unjudged(f"compiling: {why}")
        return self.run.compiled(self.build, b"", why, 0.0)


class ValidatorTask:
    """The problem's validator on one test's output; settles that test. A validator that
    neither accepts nor rejects (a crash, its time limit) is run again on the test's own answer:
    if it accepts that, the program's output made it fail, a wrong answer; only a validator
    that fails on its own answer is the judge's fault (masked). Else a program could turn any
    failure into a mask by printing what the validator cannot parse."""

    def __init__(self, test_task, output: bytes, program_ms: float, failure: str = "") -> None:
        self.test_task = test_task
        self.output = output
        self.program_ms = program_ms
        self.failure = failure  # set: this run checks the validator on the answer
        self.index = test_task.index
        self.attempts = 0

    def begin(self, config: SandboxConfig) -> dict:
        self.attempts += 1
        run, test = self.test_task.run, self.test_task.test
        validator = run.job.stdio.validator
        request = execution(self.output, VALIDATION_TIME_S, 8, 0, config)
        flags = [*validator.flags.split(), *test.flags.split()]  # problem.yaml's, testdata's
        arguments = ["input", "answer", "feedback/", *flags]
        files = {"input": read(test.input), "answer": read(test.answer), "feedback/": b""}
        if validator.language in languages.COMPILERS:
            request["native"] = True
            request["argv"] = [f"./{VALIDATOR}", *arguments]
            request["files"] = {VALIDATOR: run.validator_binary, **files}
        else:  # Python: run as a whole program is, its other files beside it
            sources = dict(validator.files)
            request["code"] = sources.pop(validator.main).decode("utf-8", "surrogateescape")
            request["argv"] = [validator.main, *arguments]
            request["files"] = {**sources, **files}
        return request

    def on_record(self, record: object) -> bool:
        return False

    def on_output(self, data: bytes) -> None:
        """What the validator prints is not a verdict: its exit status is."""

    def finish(self, message: dict) -> Outcome:
        ending = Ending(message)
        decided = ending.status == "eof" and ending.exit in (ACCEPTED, REJECTED)
        if self.failure:  # the check on the answer itself
            if decided and ending.exit == ACCEPTED:
                why = f"wrong answer: the output made the problem's validator fail ({self.failure})"
                return self.test_task.settled(Verdict.FAILED, why, self.program_ms)
            why = f"the problem's output validator failed on its own answer: {self.failure}"
            return self.test_task.settled(Verdict.INFRA_ERROR, why, self.program_ms)
        if decided and ending.exit == ACCEPTED:
            return self.test_task.settled(Verdict.PASSED, "", self.program_ms)
        if decided:
            why = "wrong answer (the problem's validator)"
            return self.test_task.settled(Verdict.FAILED, why, self.program_ms)
        reason = ending.verdict()[1] or f"exit status {ending.exit}"
        errors = f" ({ending.stderr_tail()})" if ending.stderr else ""
        answer = read(self.test_task.test.answer)
        return None, [ValidatorTask(self.test_task, answer, self.program_ms, reason + errors)]

    def give_up(self, verdict: Verdict, why: str) -> Outcome:
        return self.test_task.settled(Verdict.INFRA_ERROR, f"validator: {why}", self.program_ms)


def read(data: bytes | Path) -> bytes:
    """A test's input or answer: the bytes, or the file's."""
    return data.read_bytes() if isinstance(data, Path) else data
