"""The learner role: the ``Learner`` actor that trains the policy (``learner.py``), and the
parts it is built of, one module each.

The loss math and advantages are the algorithm's (``algorithm.loss``, ``algorithm.advantage``).
Importing this package needs only torch; transformers and peft load when a ``Learner`` is built.
"""
