"""``python -m bench.sandbox.fork_cost``: what a fork and exit cost by the forking heap's size."""

from __future__ import annotations

from bench.sandbox import fork_cost


def test_the_fork_cost_bench_prints_each_size_per_round(capsys):
    assert fork_cost.main(["--extra-mb", "0", "2", "--forks", "20", "--rounds", "2"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(row[0], row[1]) for row in rows] == [
        ("1", "0.0"),
        ("1", "2.0"),
        ("2", "0.0"),
        ("2", "2.0"),
    ]
    # the heap asked for is there: 2048 kB of pages, plus malloc's chunk headers, the 512
    # bytearray objects and their list (~40 kB by arithmetic; measured 2,104-2,108 kB in all)
    anon = {row[1]: int(row[3]) for row in rows}
    assert 2048 <= anon["2.0"] - anon["0.0"] <= 2048 + 100
    assert all(float(row[5]) > 0 and float(row[7]) > 0 for row in rows)
