"""The benchmarks, apart from the product packages they measure (which never import them).

- ``bench.sandbox``: the pool against one ``python`` process per execution, programs that read
  stdin and write stdout, and what the seccomp filter costs a system call.
- ``bench.learner``: one learner step of a model shape on random weights (time, memory per
  phase, model FLOPs) and the LM head's forward + backward.
- ``bench.launch``: a whole step's time per phase on a private Ray cluster (against TRL's
  trainer with ``--vs-trl``), one weight push per bucket size, a constant answer's reward.

Each runs as ``python -m bench.<package>[.<module>]`` with its own ``--help``; the numbers they
gave, and the commands that gave them, are recorded in docs/benchmarks.md.
"""
