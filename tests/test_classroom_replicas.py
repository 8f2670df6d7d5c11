"""Two app processes sharing their classes' rooms through one real redis-server (``SPECDEC_CLASS_STORE``), driven
over HTTP by the class load test's clients (``tools.classload``), marked slow: the presenter leads from the first
process; students join, follow and guess on both; every student sees the same histogram, which counts exactly the
last guess of each (none lost, none twice), the presenter's count reads them all, and the results the presenter
downloads from the other process hold exactly those guesses. Skipped without redis-server."""
from __future__ import annotations

import pytest

from tools.classload import CHOICES, guesses_of, run_class
from tools.redisproc import redis_missing

pytestmark = [pytest.mark.slow, pytest.mark.skipif(redis_missing() is not None, reason=redis_missing() or "")]


def test_a_class_across_two_app_processes_and_one_redis_counts_exactly():
    n = 40
    result = run_class(n, replicas=2, idle_s=2.0, measure=False)
    assert result["problems"] == [], result["problems"]
    sent = {c: sum(guesses_of(i)[-1] == c for i in range(n)) for c in CHOICES}
    assert result["counted"] == result["exported"] == sent and sum(sent.values()) == n
    assert result["replicas"] == 2 and f"Guesses in: {n} of {n}" in result["presenter_count"]
    assert all(v["n"] == n for v in result["latency"].values())
