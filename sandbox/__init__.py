"""Hardened execution of untrusted code, split along its trust boundary: ``trusted/`` (the
pool's front, in the caller's process), ``isolated/`` (what runs in each worker's processes),
``wire/`` (what both sides exchange) and, here, the tools (``python -m sandbox.check``,
``python -m sandbox.verify_problem``); docs/sandbox.md, "Code layout".

Nothing is imported here: the isolated side's processes import this package first.
"""
