"""Benchmark tools of the whole system, apart from the product modules they measure.

``python -m bench.launch`` (the step-time breakdown, ``--vs-trl`` for TRL's trainer on the same
work) and ``python -m bench.launch.push`` (one weight push per bucket size). They build their
own actors on a private Ray cluster; numbers and commands are in ``docs/benchmarks.md``.
"""
