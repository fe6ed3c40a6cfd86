"""The pool these tests share: one per test module and zygote loop, since starting one takes a
fraction of a second and a test module's programs need not wait on another's."""

from __future__ import annotations

import pytest

from tests.unit.sandbox.helpers import shared_pool


@pytest.fixture(scope="module", params=["auto", "python"], ids=["c_loop", "python_loop"])
def pool(request):
    """A pool of ``CONFIG`` (tests/unit/sandbox/helpers.py) under each zygote loop (C where it
    builds, and Python): either may serve, so every program runs under both."""
    with shared_pool(request.param) as shared:
        yield shared
