"""Problem sets from files or the Hugging Face hub: MBPP, HumanEval and a generic JSONL format.

Every loader produces :class:`common.types.Problem` whose ``prompt`` is the *task text*: the
MBPP-paper instruction with the test asserts for MBPP, the function header and docstring for
HumanEval, the row's ``prompt`` for generic files. ``common.prompts.render_problems`` turns it
into what the model sees (chat template or plain completion); keeping the two apart is what lets
one dataset serve both a chat model and a base model.

Formats (detected from the first row unless given; fields and splits in docs/datasets.md):
MBPP (full and sanitized, split by task id), HumanEval (completion-style: ``program_prefix`` is
the prompt), LeetCodeDataset (:mod:`common.leetcode`), the public code-RL sets' own rows
(:mod:`common.public_sets`), generic JSONL, and directories of Kattis / ICPC problem packages
(:mod:`common.packages`) or exercism-style exercise folders (:mod:`common.exercism`).

A malformed row is a user error: :class:`DatasetError` names the file and line
(``mbpp.jsonl:17: missing field(s) test_list``), and the command-line tools print it without a
stack trace.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Callable
from pathlib import Path

from common.exercism import is_exercise_tree, load_exercises
from common.leetcode import parse_leetcode_row
from common.packages import PackageError, load_packages
from common.public_sets import (
    SET_NAMES,
    SkippedRow,
    detect_public_set,
    parse_apps_row,
    parse_code_contests_row,
    parse_taco_row,
)
from common.public_sets_lcb import parse_deepcoder_row, parse_livecodebench_row
from common.rows import DatasetError, humaneval_tests, require_fields, row_string, test_list
from common.types import Problem

logger = logging.getLogger(__name__)

MBPP_SPLITS: dict[str, range] = {
    "prompt": range(1, 11),
    "test": range(11, 511),
    "validation": range(511, 601),
    "train": range(601, 975),
}
_SPLIT_ALIASES = {"few-shot": "prompt", "fewshot": "prompt", "valid": "validation"}
FORMATS = ("auto", "mbpp", "humaneval", "leetcode", *SET_NAMES, "generic")

MBPP_INSTRUCTION = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass these tests:\n\n{tests}"
)


def mbpp_instruction(text: str, tests: list[str] | tuple[str, ...]) -> str:
    """The MBPP paper's prompt (Austin et al. 2021): the task, then the asserts to pass."""
    return MBPP_INSTRUCTION.format(text=text.strip(), tests="\n".join(tests))


# ---- reading rows ---------------------------------------------------------------------------


def read_rows(path: str | Path) -> list[tuple[int, dict]]:
    """Rows with their line numbers, from JSONL (plain or .gz) or from one JSON array.

    For a JSON array the number is the line the element starts on, so an error points at the
    row in an editor just as it does for JSONL.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from None
    if text.lstrip().startswith("["):
        numbered = _json_array_rows(text, path)
    else:
        numbered = _jsonl_rows(text, path)
    for number, row in numbered:
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{number}: expected a JSON object")
    return numbered


def _jsonl_rows(text: str, path: Path) -> list[tuple[int, object]]:
    numbered = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            numbered.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
    return numbered


def _json_array_rows(text: str, path: Path) -> list[tuple[int, object]]:
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    rows: list[tuple[int, object]] = []
    while True:
        position = _skip_space(text, position)
        if position < len(text) and text[position] == "]":
            return rows
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        rows.append((text.count("\n", 0, position) + 1, value))
        position = _skip_space(text, end)
        if position < len(text) and text[position] == ",":
            position += 1
        elif position >= len(text) or text[position] != "]":
            line = text.count("\n", 0, position) + 1
            raise DatasetError(f"{path}:{line}: not valid JSON: expected ',' or ']'")


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


# ---- one row -> Problem ---------------------------------------------------------------------


def detect_format(row: dict, where: str) -> str:
    """The format a row is written in, from the fields only that format has."""
    if "entry_point" in row and "query" in row and "completion" in row:
        return "leetcode"
    public = detect_public_set(row)
    if public is not None:
        return public
    if "entry_point" in row:
        return "humaneval"
    if "test_list" in row:
        return "mbpp"
    if "tests" in row:
        return "generic"
    raise DatasetError(
        f"{where}: cannot tell the format: expected MBPP (task_id, text, code, test_list), "
        "HumanEval (task_id, prompt, canonical_solution, test, entry_point), generic "
        "(id, prompt, tests) or a public set's (APPS, TACO, CodeContests, LiveCodeBench, "
        "DeepCoder: docs/datasets.md) fields"
    )


def parse_mbpp_row(row: dict, where: str, need_prompt: bool = True) -> Problem:
    """An MBPP row (full: ``text``; sanitized: ``prompt``) as a whole-program problem."""
    require_fields(row, ("task_id", "code", "test_list"), where)
    tests = test_list(row, "test_list", where)
    text = row_string(row, "text", where) or row_string(row, "prompt", where)
    if need_prompt and not text.strip():
        raise DatasetError(f"{where}: missing field(s) text (or prompt): the task description")
    imports = row.get("test_imports") or []
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise DatasetError(f"{where}: test_imports must be a list of strings")
    setup = "\n".join([*imports, row_string(row, "test_setup_code", where)]).strip()
    return Problem(
        problem_id=str(row["task_id"]),
        prompt=mbpp_instruction(text, tests) if text else "",
        tests=tests,
        setup_code=setup,
        reference_solution=row_string(row, "code", where),
    )


def parse_humaneval_row(row: dict, where: str) -> Problem:
    """A HumanEval row: the model continues ``prompt``, which is also the program prefix."""
    require_fields(row, ("task_id", "prompt", "canonical_solution", "test", "entry_point"), where)
    prompt = row_string(row, "prompt", where)
    entry_point = row_string(row, "entry_point", where)
    tests = humaneval_tests(row_string(row, "test", where), entry_point, where)
    return Problem(
        problem_id=str(row["task_id"]),
        prompt=prompt,
        tests=tests,
        program_prefix=prompt,
        reference_solution=row_string(row, "canonical_solution", where),
    )


def parse_generic_row(row: dict, where: str) -> Problem:
    """A generic row: ``id``, ``prompt`` and ``tests`` are required (see docs/datasets.md)."""
    require_fields(row, ("id", "prompt", "tests"), where)
    tests = test_list(row, "tests", where)
    if not tests:
        raise DatasetError(f"{where}: tests is empty: a problem without tests rewards anything")
    return Problem(
        problem_id=str(row["id"]),
        prompt=row_string(row, "prompt", where),
        tests=tests,
        setup_code=row_string(row, "setup_code", where),
        program_prefix=row_string(row, "program_prefix", where),
        reference_solution=row_string(row, "reference_solution", where),
        source_task_id=row_string(row, "source_task_id", where),
    )


_PARSERS: dict[str, Callable[[dict, str], Problem]] = {
    "mbpp": parse_mbpp_row,
    "humaneval": parse_humaneval_row,
    "leetcode": parse_leetcode_row,
    "apps": parse_apps_row,
    "taco": parse_taco_row,
    "code_contests": parse_code_contests_row,
    "livecodebench": parse_livecodebench_row,
    "deepcoder": parse_deepcoder_row,
    "generic": parse_generic_row,
}


# ---- whole sets and splits --------------------------------------------------------------------


def parse_rows(
    rows: list[tuple[int, dict]],
    source: str,
    split: str | None = None,
    fmt: str = "auto",
    need_prompt: bool = True,
) -> list[Problem]:
    """Problems of ``split`` (None: every row) from numbered rows, refusing duplicate ids."""
    if fmt not in FORMATS:
        raise DatasetError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not rows:
        raise DatasetError(f"{source}: no problems in the file")
    if fmt == "auto":
        fmt = detect_format(rows[0][1], f"{source}:{rows[0][0]}")
    keep = _split_filter(fmt, split, rows, source)
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    skipped: list[str] = []
    for number, row in rows:
        where = f"{source}:{number}"
        try:
            if fmt == "mbpp":
                problem = parse_mbpp_row(row, where, need_prompt=need_prompt)
            else:
                problem = _PARSERS[fmt](row, where)
        except SkippedRow as reason:  # a public set's row the sandbox cannot judge
            skipped.append(f"line {number}: {reason}")
            continue
        if problem.problem_id in seen:
            raise DatasetError(
                f"{where}: duplicate id {problem.problem_id!r} (first on line "
                f"{seen[problem.problem_id]})"
            )
        seen[problem.problem_id] = number
        if keep(row):
            problems.append(problem)
    if skipped:
        more = ", ..." if len(skipped) > 3 else ""
        first = "; ".join(skipped[:3]) + more
        logger.info("%s: skipped %d row(s) that cannot be judged (%s)", source, len(skipped), first)
    return problems


def _split_filter(
    fmt: str, split: str | None, rows: list[tuple[int, dict]], source: str
) -> Callable[[dict], bool]:
    """Which rows belong to ``split``: MBPP by task-id range, generic by its ``split`` field."""
    if split in (None, "", "all"):
        return lambda row: True
    split = _SPLIT_ALIASES.get(split, split)
    if fmt == "mbpp":
        if split not in MBPP_SPLITS:
            names = ", ".join([*MBPP_SPLITS, "all"])
            raise DatasetError(f"{source}: MBPP has no split {split!r}; choose one of {names}")
        ids = MBPP_SPLITS[split]
        return lambda row: _int_id(row) in ids
    if fmt == "humaneval":
        if split != "test":
            raise DatasetError(f"{source}: HumanEval has one split, 'test' (or 'all')")
        return lambda row: True
    if fmt == "leetcode":  # LeetCodeDataset-v0.2.0-train.jsonl.gz, ...-test.jsonl.gz
        raise DatasetError(f"{source}: LeetCodeDataset's splits are its files: give split 'all'")
    if fmt in SET_NAMES:  # apps_train.jsonl, code_contests_test.jsonl, ...
        name = SET_NAMES[fmt]
        raise DatasetError(f"{source}: {name}'s splits are its files: give split 'all'")
    names = sorted({str(row["split"]) for _, row in rows if "split" in row})
    if split not in names:
        have = f"its splits are {', '.join(names)}" if names else "its rows have no 'split' field"
        raise DatasetError(f"{source}: no split {split!r}: {have}")
    return lambda row: str(row.get("split")) == split


def _int_id(row: dict) -> int:
    try:
        return int(row.get("task_id"))
    except (TypeError, ValueError):
        return -1


def load_dataset(
    source: str | Path, split: str | None = None, fmt: str = "auto", limit: int = 0
) -> list[Problem]:
    """Problems from a local file, a directory of problem packages, or a Hugging Face dataset
    name (``name[:config]``).

    ``split`` None (or ``"all"``) takes every row; ``limit`` > 0 keeps the first ``limit``
    problems of the split, in file order.
    """
    path = Path(source)
    if path.is_file():
        problems = parse_rows(read_rows(path), str(path), split, fmt)
    elif path.is_dir() and is_exercise_tree(path):
        _no_splits(path, split, "exercise folders")
        problems = load_exercises(path)
    elif path.is_dir():
        problems = _load_package_tree(path, split)
    elif _looks_like_path(str(source)):
        raise DatasetError(f"problems file {source} does not exist")
    else:
        problems = load_hub_dataset(str(source), split, fmt)
    return problems[:limit] if limit else problems


def _load_package_tree(path: Path, split: str | None) -> list[Problem]:
    """Every Kattis / ICPC problem package under ``path`` (``common/packages.py``); those not
    judged yet (interactive, custom validators) are left out and counted in one log line."""
    _no_splits(path, split, "problem packages")
    try:
        problems, skipped = load_packages(path)
    except PackageError as exc:
        raise DatasetError(str(exc)) from None
    if skipped:
        first = "; ".join(f"{s.problem_id}: {s.reason}" for s in skipped[:3])
        more = ", ..." if len(skipped) > 3 else ""
        logger.info("%s: skipped %d problem package(s) (%s%s)", path, len(skipped), first, more)
    return problems


def _no_splits(path: Path, split: str | None, what: str) -> None:
    if split not in (None, "", "all", "test"):
        raise DatasetError(
            f"{path}: {what} have no splits: set split to 'all' (or 'test') to take every "
            f"one, not {split!r}"
        )


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or source.endswith(
        (".json", ".jsonl", ".gz", ".jsonl.gz")
    )


def load_hub_dataset(name: str, split: str | None, fmt: str = "auto") -> list[Problem]:
    """A dataset from the Hugging Face hub (needs the ``datasets`` package and network access).

    ``name`` may carry a configuration after a colon, e.g. ``google-research-datasets/mbpp:full``.
    The hub's own splits are used (MBPP's match the task-id ranges of the local files).
    """
    try:
        import datasets  # lazy: an optional extra, needed only for datasets named on the hub
    except ImportError:
        raise DatasetError(
            f"{name!r} is not a local file, and loading a Hugging Face dataset by name needs the "
            "'datasets' package (pip install datasets) and network access; or download the "
            "rows as JSONL and pass the file's path"
        ) from None
    repo, _, config = name.partition(":")
    try:
        table = datasets.load_dataset(repo, config or None, split=split or "test")
    except Exception as exc:  # the hub raises many types; all mean "not available"
        raise DatasetError(f"cannot load Hugging Face dataset {name!r}: {exc}") from None
    rows = [(index, dict(row)) for index, row in enumerate(table)]
    return parse_rows(rows, f"hf:{name}[{split or 'test'}]", None, fmt)
