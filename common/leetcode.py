"""LeetCodeDataset rows (newfacade/LeetCodeDataset): LeetCode problems as a method of
``class Solution``, judged with a fresh instance per test (docs/datasets.md, LeetCodeDataset).

The row's import header is both the program's prefix and the tests' setup code; each assert of
its ``check(candidate)`` becomes one test on ``Solution().method``. An assert the trusted side
can judge from values alone is judged there, the rest run in the tests' own process, with the
header's classes crossing by value (``sandbox/isolated/split.py``).
"""

from __future__ import annotations

import re

from common.rows import DatasetError, humaneval_tests, require_fields, row_string
from common.types import Problem

ENTRY = re.compile(r"Solution\(\)\.[A-Za-z_]\w*")
# The dataset's own spellings, as they are in its files (42 rows of v0.1.0 say "Meidum").
DIFFICULTIES = {"Easy": "Easy", "Medium": "Medium", "Meidum": "Medium", "Hard": "Hard"}


def parse_leetcode_row(row: dict, where: str) -> Problem:
    """A LeetCodeDataset row: the model writes ``class Solution`` after the import header."""
    require_fields(row, ("task_id", "query", "prompt", "completion", "entry_point", "test"), where)
    entry = row_string(row, "entry_point", where)
    if not ENTRY.fullmatch(entry):
        raise DatasetError(f"{where}: entry_point {entry[:60]!r} is not Solution().<method>")
    header = row_string(row, "prompt", where)
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    return Problem(
        problem_id=f"leetcode/{row['task_id']}",
        prompt=row_string(row, "query", where),
        tests=humaneval_tests(row_string(row, "test", where), entry, where),
        setup_code=header,  # the tests' process runs it too: their helpers and node classes
        program_prefix=header,
        reference_solution=row_string(row, "completion", where),
        entry_point=entry,
        difficulty=DIFFICULTIES.get(str(meta.get("difficulty", "")), ""),
    )
