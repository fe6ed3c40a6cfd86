"""Dataset loaders: the real MBPP files, their official splits, HumanEval and generic rows, and
malformed rows refused with the file and line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from common.datasets import DatasetError, load_dataset, parse_rows
from common.types import Problem
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT.parent / "shared" / "data"
MBPP = DATA / "mbpp.jsonl"
SANITIZED = DATA / "sanitized-mbpp.json"


def test_shared_data_is_present():
    # CI always has ../shared/data; a missing copy must fail loudly, not skip the MBPP tests.
    assert MBPP.is_file() and SANITIZED.is_file(), f"MBPP files missing under {DATA}"


def test_full_mbpp_loads_all_974_rows():
    problems = load_dataset(MBPP)
    assert len(problems) == 974
    assert all(isinstance(p, Problem) and p.tests and p.reference_solution for p in problems)
    assert [p.problem_id for p in problems[:2]] == ["1", "2"]


def test_sanitized_mbpp_loads_all_427_rows():
    problems = load_dataset(SANITIZED)
    assert len(problems) == 427
    assert all(p.prompt and p.tests for p in problems)


@pytest.mark.parametrize(
    ("path", "sizes"),
    [
        (MBPP, {"test": 500, "prompt": 10, "validation": 90, "train": 374}),
        # the sanitized file is a subset: the same id ranges, restricted to the ids present
        (SANITIZED, {"test": 257, "prompt": 7, "validation": 43, "train": 120}),
    ],
    ids=["full", "sanitized"],
)
def test_mbpp_splits_have_the_documented_sizes(path, sizes):
    splits = {name: load_dataset(path, name) for name in sizes}
    assert {name: len(problems) for name, problems in splits.items()} == sizes
    ids = [p.problem_id for problems in splits.values() for p in problems]
    assert len(set(ids)) == len(ids) == sum(sizes.values())  # disjoint and complete
    assert {int(p.problem_id) for p in splits["test"]} <= set(range(11, 511))
    assert {int(p.problem_id) for p in splits["train"]} <= set(range(601, 975))


def test_few_shot_is_an_alias_of_the_prompt_split():
    assert load_dataset(MBPP, "few-shot") == load_dataset(MBPP, "prompt")


def test_mbpp_prompt_is_the_papers_with_the_tests():
    problem = load_dataset(MBPP, "test", limit=1)[0]
    assert problem.problem_id == "11"
    assert problem.prompt.startswith(
        "You are an expert Python programmer, and here is your task: Write a python function to "
        "remove first and last occurrence"
    )
    assert problem.prompt.endswith(
        " Your code should pass these tests:\n\n" + "\n".join(problem.tests)
    )
    assert problem.program_prefix == ""


def test_sanitized_test_imports_become_setup_code():
    with_imports = [p for p in load_dataset(SANITIZED) if p.setup_code]
    assert with_imports and all("import" in p.setup_code for p in with_imports)


def test_limit_keeps_the_first_problems_of_the_split():
    assert [p.problem_id for p in load_dataset(MBPP, "validation", limit=3)] == [
        "511",
        "512",
        "513",
    ]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def mbpp_row(task_id: int) -> dict:
    return {"task_id": task_id, "text": "Add.", "code": "def f(a):\n    return a", "test_list": []}


def test_missing_field_is_refused_with_file_and_line(tmp_path):
    rows = [mbpp_row(i) for i in range(601, 620)]
    del rows[16]["test_list"]  # line 17
    rows[16]["tests"] = []
    path = write_jsonl(tmp_path / "mbpp.jsonl", rows)
    with pytest.raises(DatasetError, match=rf"^{path}:17: missing field\(s\) test_list$"):
        load_dataset(path)


def test_invalid_json_line_is_refused_with_its_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(mbpp_row(1)) + "\n\n" + '{"task_id": 2,\n')
    with pytest.raises(DatasetError, match=rf"{path}:3: not valid JSON"):
        load_dataset(path)


def test_json_array_errors_point_at_the_elements_line(tmp_path):
    rows = [mbpp_row(1), {"task_id": 2, "text": "x", "code": "", "test_list": "assert f(1)"}]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(rows, indent=1))
    line = path.read_text().splitlines().index(" {", 2) + 1  # where the second element starts
    with pytest.raises(DatasetError, match=rf"{path}:{line}: test_list must be a list of strings"):
        load_dataset(path)


def test_row_that_is_not_an_object_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [mbpp_row(1), [1, 2]])
    with pytest.raises(DatasetError, match=rf"{path}:2: expected a JSON object"):
        load_dataset(path)


def test_unknown_format_and_duplicate_ids_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"question": "?"}])
    with pytest.raises(DatasetError, match=rf"{path}:1: cannot tell the format"):
        load_dataset(path)
    path = write_jsonl(tmp_path / "q.jsonl", [mbpp_row(3), mbpp_row(3)])
    with pytest.raises(DatasetError, match=rf"{path}:2: duplicate id '3' \(first on line 1\)"):
        load_dataset(path)


def test_mbpp_row_without_a_description_is_refused_for_training(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"task_id": 1, "code": "", "test_list": []}])
    with pytest.raises(DatasetError, match=rf"{path}:1: missing field\(s\) text"):
        load_dataset(path)


def test_unknown_split_names_the_choices():
    with pytest.raises(DatasetError, match=r"no split 'dev'; choose one of prompt, test"):
        load_dataset(MBPP, "dev")


HUMANEVAL_ROW = {
    "task_id": "HumanEval/0",
    "prompt": 'from typing import List\n\n\ndef inc(x: int) -> int:\n    """Add one."""\n',
    "canonical_solution": "    return x + 1\n",
    "test": "METADATA = {}\n\n\ndef check(candidate):\n    assert candidate(1) == 2\n"
    "    assert candidate(5) == 6\n",
    "entry_point": "inc",
}


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_humaneval_rows_plain_and_gzipped(tmp_path, suffix):
    text = json.dumps(HUMANEVAL_ROW) + "\n"
    path = tmp_path / f"HumanEval{suffix}"
    path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    (problem,) = load_dataset(path, "test")
    assert problem.problem_id == "HumanEval/0"
    assert problem.program_prefix == problem.prompt == HUMANEVAL_ROW["prompt"]
    assert problem.tests == ("assert inc(1) == 2", "assert inc(5) == 6")
    with pytest.raises(DatasetError, match="HumanEval has one split"):
        load_dataset(path, "train")


def test_humaneval_missing_entry_point_names_the_field(tmp_path):
    row = {k: v for k, v in HUMANEVAL_ROW.items() if k != "canonical_solution"}
    path = write_jsonl(tmp_path / "he.jsonl", [row])
    with pytest.raises(DatasetError, match=rf"{path}:1: missing field\(s\) canonical_solution"):
        load_dataset(path)


def test_generic_rows_with_optional_fields_and_splits(tmp_path):
    rows = [
        {"id": "a", "prompt": "Write f.", "tests": ["assert f() == 1"], "split": "train"},
        {
            "id": "b",
            "prompt": "Write g.",
            "tests": ["assert g() == 2"],
            "setup_code": "import math",
            "reference_solution": "def g():\n    return 2\n",
            "split": "test",
        },
    ]
    path = write_jsonl(tmp_path / "generic.jsonl", rows)
    assert [p.problem_id for p in load_dataset(path)] == ["a", "b"]
    (test,) = load_dataset(path, "test")
    assert (test.setup_code, test.reference_solution) == (
        "import math",
        rows[1]["reference_solution"],
    )
    with pytest.raises(DatasetError, match="no split 'dev': its splits are test, train"):
        load_dataset(path, "dev")


def test_a_test_that_does_not_parse_is_named(tmp_path):
    generic = {"id": "a", "prompt": "p", "tests": ["assert f(1) == 1", "assert f(==1"]}
    path = write_jsonl(tmp_path / "g.jsonl", [generic])
    with pytest.raises(DatasetError, match=rf"{path}:1: tests\[1\] does not parse"):
        load_dataset(path)
    mbpp = {"task_id": 1, "text": "t", "code": "", "test_list": ["assert f(1) ==="]}
    path = write_jsonl(tmp_path / "m.jsonl", [mbpp])
    with pytest.raises(DatasetError, match=rf"{path}:1: test_list\[0\] does not parse"):
        load_dataset(path, "all")


def test_generic_row_without_tests_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"id": "a", "prompt": "p", "tests": []}])
    with pytest.raises(DatasetError, match=rf"{path}:1: tests is empty"):
        load_dataset(path)


def test_missing_file_and_unavailable_hub_name_are_clear_errors(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "nope.jsonl")
    # without the package (this machine) the message says what to install; with it but offline,
    # the hub's own error is wrapped
    needs = r"'datasets' package .* network access|cannot load Hugging Face dataset"
    with pytest.raises(DatasetError, match=needs):
        load_dataset("google-research-datasets/mbpp:full", "test")


def test_parse_rows_with_an_explicit_format_checks_that_formats_fields():
    with pytest.raises(
        DatasetError, match=r"x:4: missing field\(s\) canonical_solution, test, entry_point$"
    ):
        parse_rows([(4, {"task_id": 1, "prompt": "p"})], "x", fmt="humaneval")
