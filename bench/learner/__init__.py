"""Benchmark tools of the learner, apart from the learner itself: ``python -m bench.learner``
(one learner step of a model shape on random weights, its phases' memory from
``phases.py`` and, on CPU, ``live_bytes.py``), ``python -m bench.learner.lm_head`` (the LM
head's forward + backward, checkpointed chunks against ``learner/lm_head.py``),
``gpu_rows.sh`` (the open rows of issues 54 and 34 in one call on a lent GPU) and a learner
whose weights a benchmark or test can move without training (``perturb.py``)."""
