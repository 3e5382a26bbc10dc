"""Every fuzz target at a modest count: no crash and no broken property (`make fuzz` runs them at scale)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz.targets import TARGETS, Target

EXAMPLES = 150


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_fuzz_target(target: Target) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(target.strategy)
    def run(value: Any) -> None:
        target.run(value)

    run()
