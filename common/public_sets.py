"""The public code-RL sets' own row schemas: APPS / TACO and CodeContests here, LiveCodeBench
and DeepCoder in :mod:`common.public_sets_lcb`; each onto the kinds the sandbox judges
(docs/datasets.md, Public code-RL sets).

Each row's tests become :class:`Case` values first (an input, an output, functional or not),
and :func:`build_problem` turns them into a ``stdio``, ``function`` or ``class_method``
:class:`Problem`. A row the sandbox cannot judge, in a set that mixes such rows with others,
raises :class:`SkippedRow`: ``parse_rows`` leaves it out and counts it in one log line.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass

from common.packages import STDIO_INSTRUCTION, stdio_instruction
from common.rows import DatasetError, require_fields, row_string
from common.types import Problem, StdioSpec, StdioTest

FUNCTION_INSTRUCTION = (
    "Write Python 3 code that solves the problem below. The tests call `{call}(...)` with "
    "the arguments and compare the value it returns, so the code reads no input and prints "
    "nothing."
)
# LeetCodeDataset's header (../shared/data/leetcode): what a LeetCode-style program may assume
SOLUTION_HEADER = (
    "from typing import *\n\nfrom functools import *\nfrom collections import *\n"
    "from itertools import *\nfrom heapq import *\nfrom bisect import *\nfrom string import *\n"
    "from operator import *\nfrom math import *\nimport math\nimport datetime\n"
    "inf = float('inf')\n\n"
)
# deepmind/code_contests' Difficulty enum: names, then Codeforces' problem letters A-V
CONTEST_DIFFICULTIES = ("", "EASY", "MEDIUM", "HARD", "HARDER", "HARDEST", "EXTERNAL")
CONTEST_DIFFICULTIES += tuple(chr(ord("A") + n) for n in range(22))
PYTHON3 = 3  # code_contests' language number for Python 3 (1 is Python 2)
#: format names (``data.format``) and the sets' own
SET_NAMES = {
    "apps": "APPS",
    "taco": "TACO",
    "code_contests": "CodeContests",
    "livecodebench": "LiveCodeBench",
    "deepcoder": "DeepCoder",
}
_TACO_ONLY = ("skill_types", "raw_tags", "tags")


class SkippedRow(Exception):
    """A row the sandbox cannot judge, in a set where such rows are expected: left out."""


@dataclass(frozen=True)
class Case:
    """One test as a set writes it: ``input`` a string (stdin; a functional one holds one JSON
    value per line) or a list (stdin lines; a functional one, the arguments), ``output`` the
    answer or the value; ``origin`` names it in errors."""

    group: str
    input: object
    output: object
    functional: bool
    origin: str


@dataclass(frozen=True)
class RowInfo:
    """What a problem takes from its row besides the tests."""

    problem_id: str
    statement: str
    title: str = ""
    starter: str = ""
    fn_name: str = ""
    reference: str = ""
    difficulty: str = ""
    time_limit_s: float = 0.0
    memory_mb: int = 0


def detect_public_set(row: dict) -> str | None:
    """The public set whose fields ``row`` has, or None."""
    if "question" in row and "input_output" in row:
        return "taco" if any(f in row for f in _TACO_ONLY) else "apps"
    if "description" in row and "public_tests" in row:
        return "code_contests"
    if "question_content" in row and "public_test_cases" in row:
        return "livecodebench"
    if "problem" in row and "tests" in row and "prompt" not in row:
        return "deepcoder"
    return None


# ---- fields ---------------------------------------------------------------------------------


def json_field(row: dict, field: str, where: str, default: object = None) -> object:
    """``field`` decoded where it is a JSON string (as these sets store nested data), as it is
    otherwise; ``default`` where it is missing, null or blank."""
    value = row.get(field)
    if isinstance(value, str):
        if not value.strip():
            return default
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: {field} is not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise DatasetError(f"{where}: {field} is nested too deeply") from None
    return default if value is None else value


def line_id(where: str) -> str:
    """The row's line (a hub split's index): the id of a set whose rows carry none."""
    return where.rpartition(":")[2]


def first_solution(value: object, where: str, field: str = "solutions") -> str:
    """The first of a list of solutions (APPS and DeepCoder's), or ""."""
    if value in (None, ""):
        return ""
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise DatasetError(f"{where}: {field} must be a list of strings")
    return value[0] if value else ""


# ---- cases -> Problem ------------------------------------------------------------------------


def build_problem(info: RowInfo, cases: list[Case], where: str) -> Problem:
    """A ``stdio``, ``function`` or ``class_method`` problem, as ``cases`` are; SkippedRow
    without any."""
    if not cases:
        raise SkippedRow("no tests")
    if len({case.functional for case in cases}) > 1:
        raise DatasetError(f"{where}: mixes stdin and functional tests in one problem")
    if cases[0].functional:
        return _function_problem(info, cases, where)
    counts: Counter[str] = Counter()
    tests = []
    for case in cases:
        counts[case.group] += 1
        stdin, answer = _text(case.input, case, where), _text(case.output, case, where)
        name = f"{case.group}/{counts[case.group]}"
        stdin_bytes, answer_bytes = (t.encode("utf-8", "surrogatepass") for t in (stdin, answer))
        tests.append(StdioTest(name, stdin_bytes, answer_bytes, case.group))
    if info.title:
        prompt = stdio_instruction(info.title, info.statement)
    else:  # the same instruction, without a heading
        prompt = STDIO_INSTRUCTION.partition("\n\n# ")[0] + "\n\n" + info.statement.strip()
    return Problem(
        problem_id=info.problem_id,
        prompt=prompt,
        tests=(),
        reference_solution=info.reference,
        stdio=StdioSpec(tuple(tests), info.time_limit_s, info.memory_mb),
        difficulty=info.difficulty,
    )


def _text(value: object, case: Case, where: str) -> str:
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise DatasetError(f"{where}: {case.origin}: a stdin test's input and output are text")
    return value


def _function_problem(info: RowInfo, cases: list[Case], where: str) -> Problem:
    name = info.fn_name
    if not name.isidentifier():
        raise DatasetError(f"{where}: functional tests need a function name, not {name!r}")
    call = f"Solution().{name}" if "class Solution" in info.starter else name
    try:
        tests = tuple(
            f"assert {call}({', '.join(map(literal, _arguments(c, where)))}) == "
            f"{literal(_expected(c, where))}"
            for c in cases
        )
    except RecursionError:
        raise DatasetError(f"{where}: a test's values are nested too deeply") from None
    prompt = FUNCTION_INSTRUCTION.format(call=call)
    prompt += f"\n\n# {info.title.strip()}" if info.title.strip() else ""
    prompt += f"\n\n{info.statement.strip()}"
    if info.starter.strip():
        prompt += f"\n\nStart from this code:\n\n```python\n{info.starter.rstrip()}\n```"
    return Problem(
        problem_id=info.problem_id,
        prompt=prompt,
        tests=tests,
        program_prefix=SOLUTION_HEADER if call.startswith("Solution()") else "",
        reference_solution=info.reference,
        entry_point=call,
        difficulty=info.difficulty,
    )


def _arguments(case: Case, where: str) -> list:
    """A list input is the arguments (APPS); a string, one JSON value per line (LCB)."""
    if isinstance(case.input, list):
        return case.input
    if not isinstance(case.input, str):
        raise DatasetError(f"{where}: {case.origin}: a functional input is a list or a string")
    try:
        return [json.loads(line) for line in case.input.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: {case.origin}: input line not JSON: {exc.msg}") from None


def _expected(case: Case, where: str) -> object:
    """LCB's output is JSON text; APPS' a one-element list holding the value (or the value)."""
    if isinstance(case.input, str):
        if not isinstance(case.output, str):
            raise DatasetError(f"{where}: {case.origin}: output must be JSON text")
        try:
            return json.loads(case.output)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: {case.origin}: output not JSON: {exc.msg}") from None
    output = case.output
    return output[0] if isinstance(output, list) and len(output) == 1 else output


def literal(value: object) -> str:
    """Python source for a JSON value; JSON's Infinity and NaN as ``float('inf')``."""
    text = repr(value)
    if "inf" not in text and "nan" not in text:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, list):
        return "[" + ", ".join(map(literal, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    return text


# ---- APPS / TACO ----------------------------------------------------------------------------


def parse_apps_row(row: dict, where: str) -> Problem:
    """A codeparrot/apps row: ``problem_id``, ``question``, ``input_output``, ``solutions``."""
    require_fields(row, ("problem_id", "question", "input_output"), where)
    return _apps_like(row, where, f"apps/{row['problem_id']}")


def parse_taco_row(row: dict, where: str) -> Problem:
    """A BAAI/TACO row: APPS' fields (no ``problem_id``: the row's line is its id)."""
    require_fields(row, ("question", "input_output"), where)
    return _apps_like(row, where, f"taco/{row.get('problem_id', line_id(where))}")


def _apps_like(row: dict, where: str, problem_id: str) -> Problem:
    io = json_field(row, "input_output", where)
    if io is None:
        raise SkippedRow("no tests (input_output is empty)")
    if not isinstance(io, dict):
        raise DatasetError(f"{where}: input_output must hold an object with inputs and outputs")
    fn_name = io.get("fn_name") or ""
    if not isinstance(fn_name, str):
        raise DatasetError(f"{where}: input_output.fn_name must be a string")
    info = RowInfo(
        problem_id,
        row_string(row, "question", where),
        starter=row_string(row, "starter_code", where),
        fn_name=fn_name,
        reference=first_solution(json_field(row, "solutions", where), where),
        difficulty=str(row.get("difficulty") or ""),
    )
    return build_problem(info, io_cases(io, bool(fn_name), "input_output", where), where)


def io_cases(io: dict, functional: bool, field: str, where: str) -> list[Case]:
    """APPS' ``{"inputs": [...], "outputs": [...]}`` as cases, pair by pair."""
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise DatasetError(f"{where}: {field} needs the lists inputs and outputs")
    if len(inputs) != len(outputs):
        raise DatasetError(f"{where}: {field} has {len(inputs)} inputs but {len(outputs)} outputs")
    return [
        Case("secret", i, o, functional, f"{field}.inputs[{n}]")
        for n, (i, o) in enumerate(zip(inputs, outputs, strict=True))
    ]


# ---- CodeContests ---------------------------------------------------------------------------


def parse_code_contests_row(row: dict, where: str) -> Problem:
    """A deepmind/code_contests row: public tests are samples, then private and generated."""
    require_fields(row, ("name", "description"), where)
    for field in ("input_file", "output_file"):
        if row_string(row, field, where).strip():
            raise SkippedRow(f"reads or writes the file {row[field]!r}, not stdin/stdout")
    cases = []
    for field, group in (
        ("public_tests", "sample"),
        ("private_tests", "secret"),
        ("generated_tests", "generated"),
    ):
        cases += _contest_cases(row, field, group, where)
    name = row_string(row, "name", where)
    difficulty = row.get("difficulty")
    info = RowInfo(
        f"code_contests/{name}",
        row_string(row, "description", where),
        title=name,
        reference=_python3_solution(row.get("solutions"), where),
        difficulty=CONTEST_DIFFICULTIES[difficulty]
        if isinstance(difficulty, int) and 0 <= difficulty < len(CONTEST_DIFFICULTIES)
        else str(difficulty or ""),
        time_limit_s=_contest_seconds(row.get("time_limit"), where),
        memory_mb=_contest_memory(row.get("memory_limit_bytes"), where),
    )
    return build_problem(info, cases, where)


def _contest_cases(row: dict, field: str, group: str, where: str) -> list[Case]:
    tests = row.get(field) or {}
    if not isinstance(tests, dict):
        raise DatasetError(f"{where}: {field} must be an object with input and output lists")
    inputs, outputs = tests.get("input") or [], tests.get("output") or []
    for name, values in (("input", inputs), ("output", outputs)):
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise DatasetError(f"{where}: {field}.{name} must be a list of strings")
    if len(inputs) != len(outputs):
        raise DatasetError(f"{where}: {field} has {len(inputs)} inputs, {len(outputs)} outputs")
    return [
        Case(group, i, o, False, f"{field}[{n}]")
        for n, (i, o) in enumerate(zip(inputs, outputs, strict=True))
    ]


def _python3_solution(solutions: object, where: str) -> str:
    if not solutions:
        return ""
    if not isinstance(solutions, dict):
        raise DatasetError(f"{where}: solutions must be an object with language and solution")
    languages, sources = solutions.get("language") or [], solutions.get("solution") or []
    pairs = zip(languages, sources, strict=False)
    return next((s for n, s in pairs if n == PYTHON3 and isinstance(s, str)), "")


def _contest_seconds(limit: object, where: str) -> float:
    if not limit:
        return 0.0
    if not isinstance(limit, dict):
        raise DatasetError(f"{where}: time_limit must be an object with seconds and nanos")
    try:
        seconds = float(limit.get("seconds") or 0) + float(limit.get("nanos") or 0) / 1e9
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: time_limit's seconds and nanos must be numbers") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise DatasetError(f"{where}: time_limit must be a number of seconds >= 0")
    return seconds


def _contest_memory(limit: object, where: str) -> int:
    """``memory_limit_bytes`` in whole MiB, rounded up; 0 (the sandbox's) where unset."""
    if limit in (None, "", 0):
        return 0
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise DatasetError(f"{where}: memory_limit_bytes must be a whole number >= 0")
    return -(-limit // 2**20)
