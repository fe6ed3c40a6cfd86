"""Benchmark tools of the sandbox, apart from the pool they measure: ``python -m bench.sandbox``
(the pool against one ``python`` process per execution, ``throughput.py``)."""
