"""LiveCodeBench (livecodebench/code_generation_lite) and DeepCoder
(agentica-org/DeepCoder-Preview-Dataset) rows, whose tests are lists of
``{"input", "output", "testtype"}`` entries; built as :mod:`common.public_sets` builds every
public set's problems. LiveCodeBench's hidden tests may be a compressed pickle, read by
:func:`common.safe_pickle.loads_compressed`, which never calls anything a file names.
"""

from __future__ import annotations

import ast
import json

from common.public_sets import (
    Case,
    RowInfo,
    build_problem,
    first_solution,
    io_cases,
    json_field,
    line_id,
)
from common.rows import DatasetError, require_fields, row_string
from common.safe_pickle import UnsafePickle, loads_compressed
from common.types import Problem

STDIN_TYPES = ("stdin", "stdin_stdout")  # LiveCodeBench's name, PrimeIntellect's
FUNCTIONAL_TYPES = ("functional", "function_call")


def parse_livecodebench_row(row: dict, where: str) -> Problem:
    """A LiveCodeBench row: public tests are samples, private ones secret; ``metadata`` names
    the method (``func_name``) that functional tests call on ``Solution()``."""
    fields = ("question_id", "question_content", "public_test_cases", "private_test_cases")
    require_fields(row, fields, where)
    metadata = json_field(row, "metadata", where, {})
    if not isinstance(metadata, dict):
        raise DatasetError(f"{where}: metadata must hold an object")
    public = json_field(row, "public_test_cases", where, [])
    cases = entry_cases(public, "public_test_cases", "sample", where)
    cases += entry_cases(_private_cases(row, where), "private_test_cases", "secret", where)
    info = RowInfo(
        f"livecodebench/{row['question_id']}",
        row_string(row, "question_content", where),
        title=row_string(row, "question_title", where),
        starter=row_string(row, "starter_code", where),
        fn_name=str(metadata.get("func_name") or ""),
        difficulty=str(row.get("difficulty") or ""),
    )
    return build_problem(info, cases, where)


def _private_cases(row: dict, where: str) -> object:
    """The private tests: JSON text, or the compressed pickle of JSON text."""
    value = row.get("private_test_cases")
    if not isinstance(value, str) or not value.strip() or value.lstrip().startswith("["):
        return json_field(row, "private_test_cases", where, [])
    try:
        inner = loads_compressed(value)
    except UnsafePickle as exc:
        raise DatasetError(f"{where}: private_test_cases: {exc}") from None
    return json_field({"private_test_cases": inner}, "private_test_cases", where, [])


def entry_cases(entries: object, field: str, group: str, where: str) -> list[Case]:
    """``[{"input", "output", "testtype"?, "fn_name"?}, ...]`` as cases: functional where the
    type says so (or, without a type, where the entry names a function)."""
    if not isinstance(entries, list):
        raise DatasetError(f"{where}: {field} must be a list of tests")
    cases = []
    for number, entry in enumerate(entries):
        origin = f"{field}[{number}]"
        if not isinstance(entry, dict) or "input" not in entry or "output" not in entry:
            raise DatasetError(f"{where}: {origin} must be an object with input and output")
        kind = entry.get("testtype", entry.get("type"))
        if kind is None:
            functional = "fn_name" in entry
        elif kind in STDIN_TYPES + FUNCTIONAL_TYPES:
            functional = kind in FUNCTIONAL_TYPES
        else:
            known = ", ".join(STDIN_TYPES + FUNCTIONAL_TYPES)
            raise DatasetError(f"{where}: {origin}: test type {kind!r} is not one of {known}")
        cases.append(Case(group, entry["input"], entry["output"], functional, origin))
    return cases


def parse_deepcoder_row(row: dict, where: str) -> Problem:
    """A DeepCoder row: ``problem``, ``tests`` (entries as LiveCodeBench's, or APPS'
    ``{"inputs", "outputs", "fn_name"?}``), ``starter_code``, ``metadata``; no id: its line."""
    require_fields(row, ("problem", "tests"), where)
    tests = _deepcoder_tests(row["tests"], where)
    metadata = _as_dict(row.get("metadata"))
    if isinstance(tests, dict):
        fn_name = tests.get("fn_name") or ""
        cases = io_cases(tests, bool(fn_name), "tests", where)
    else:
        cases = entry_cases(tests, "tests", "secret", where)
        fn_name = _function_name(tests, metadata)
    info = RowInfo(
        f"deepcoder/{line_id(where)}",
        row_string(row, "problem", where),
        starter=row_string(row, "starter_code", where),
        fn_name=str(fn_name),
        reference=first_solution(json_field(row, "solutions", where), where),
        difficulty=str(metadata.get("difficulty") or ""),
    )
    return build_problem(info, cases, where)


def _deepcoder_tests(value: object, where: str) -> list | dict:
    """``tests`` as a list or dict: JSON text, or a Python literal (some subsets write one)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            try:
                value = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise DatasetError(f"{where}: tests is neither JSON nor a Python literal") from None
        except RecursionError:
            raise DatasetError(f"{where}: tests is nested too deeply") from None
    if not isinstance(value, (list, dict)):
        raise DatasetError(f"{where}: tests must be a list of tests or an inputs/outputs object")
    return value


def _as_dict(value: object) -> dict:
    """A metadata object, or {} where there is none (it only ever names the function)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return {}
    return value if isinstance(value, dict) else {}


def _function_name(entries: list, metadata: dict) -> str:
    """The function functional tests call: an entry's ``fn_name`` (PrimeIntellect) or
    ``metadata.func_name`` (LiveCodeBench's), else the row's metadata."""
    for entry in entries:
        if isinstance(entry, dict):
            name = entry.get("fn_name") or _as_dict(entry.get("metadata")).get("func_name")
            if name:
                return str(name)
    return str(metadata.get("func_name") or metadata.get("fn_name") or "")
