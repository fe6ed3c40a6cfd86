"""Benchmark tools of the learner, apart from the learner itself: ``python -m learner.bench``
(one learner step of a model shape on random weights) and a learner whose weights a benchmark
or test can move without training (``perturb.py``)."""
