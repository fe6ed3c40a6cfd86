"""The tools' user mistakes end with one error line naming the flag or file and exit status 2,
before any sample is generated or run: an output path that cannot take the results, a number
out of range, a model that is not there, problems without the references asked for.

Nothing here loads a model or starts a sandbox: the stages after the checks are replaced by
stubs that fail the test if they are reached before the refusal.
"""

from __future__ import annotations

import argparse

import pytest

from common.arguments import (
    OutputPathError,
    check_output_dir,
    check_output_file,
    non_negative_int,
    positive_float,
    positive_int,
)

# ---- the shared argument types and output checks ------------------------------------------


@pytest.mark.parametrize(
    ("kind", "text", "said"),
    [
        (positive_int, "0", "must be at least 1, got 0"),
        (positive_int, "1.5", "must be a whole number, got '1.5'"),
        (non_negative_int, "-1", "must be 0 or more, got -1"),
        (positive_float, "-1", "must be a finite number above 0, got '-1'"),
        (positive_float, "0", "above 0"),
        (positive_float, "nan", "above 0"),
        (positive_float, "inf", "finite"),
        (positive_float, "x", "must be a number, got 'x'"),
    ],
)
def test_an_argument_type_names_what_it_needs(kind, text, said):
    with pytest.raises(argparse.ArgumentTypeError, match=said):
        kind(text)


def test_argument_types_take_their_values():
    assert (positive_int("3"), non_negative_int("0"), positive_float("1e-4")) == (3, 0, 1e-4)


def test_an_output_file_is_checked_before_it_is_written(tmp_path):
    (tmp_path / "a_file").write_text("x")
    assert check_output_file(tmp_path / "new" / "deeper" / "out.jsonl", "--out")  # made later
    assert check_output_file(tmp_path / "a_file", "--out")  # replaced
    with pytest.raises(OutputPathError, match=r"^--out: .* is a directory; give the path of"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(OutputPathError, match=r"a_file is not a directory"):
        check_output_file(tmp_path / "a_file" / "deeper" / "out.jsonl", "--out")


def test_an_output_directory_with_results_needs_overwrite(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    assert check_output_dir(tmp_path / "new", "--out", overwrite=False)
    assert check_output_dir(tmp_path, "--out", overwrite=True)
    with pytest.raises(OutputPathError, match=r"already holds summary.json: .* --overwrite"):
        check_output_dir(tmp_path, "--out", overwrite=False)
    with pytest.raises(OutputPathError, match=r"summary.json is a file; give a directory"):
        check_output_dir(tmp_path / "summary.json", "--out", overwrite=True)
