"""``python -m bench.sandbox.filter_cost``: what the seccomp filter costs a system call."""

import pytest

from bench.sandbox import filter_cost


def test_the_filter_cost_bench_prints_each_case(capsys):
    """``python -m bench.sandbox.filter_cost`` (docs/benchmarks.md): one line per case, a
    positive time each; a bad count is a usage error."""
    assert filter_cost.main(["--calls", "1000", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(filter_cost.CASES)
    assert all(float(line.split()[-4]) > 0 for line in lines)
    with pytest.raises(SystemExit) as exit_info:
        filter_cost.main(["--calls", "0"])
    assert exit_info.value.code == 2
