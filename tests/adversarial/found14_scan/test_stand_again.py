"""The stand-or-fall-together rule worked out again from an earlier run (`planning.network.Stood`) only for
the groups whose parts changed, against the rule run on the whole list: random findings, then random
changes at random places (a part's class, its container id moved to another group or to none, a part of
another kind, the very same finding kept), run after run, each from the last. The verdicts, evidence
included, must be those of the whole rule."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind
from nodegc.planning.context import Context
from nodegc.planning.network import _ATTACHMENT, Stood, stand_or_fall_together
from tests.adversarial.found8.test_stand_or_fall_skip import _reference


@dataclass
class _Ctx:
    findings: list[Finding] = field(default_factory=list)


_KINDS = [*sorted(_ATTACHMENT, key=lambda k: k.value), Kind.SANDBOX, Kind.POD_DIR]
_CLASSES = list(FindingClass)


def _finding(rnd: random.Random, cids: list[str | None], n: int) -> Finding:
    return Finding(rnd.choice(_CLASSES if rnd.random() < 0.5 else _CLASSES[:3]), rnd.choice(_KINDS), f"id-{n}",
                   Owner(uid=f"u{n}", container_id=rnd.choice(cids)), rnd.choice(list(OwnerState)), (f"e{n}",))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 1 << 30), runs=st.integers(1, 6))
def test_the_groups_worked_out_again_are_those_of_the_whole_rule(seed: int, runs: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    cids: list[str | None] = [f"c{n:02d}" * 8 for n in range(rnd.randrange(1, 15))] + [None]
    findings = [_finding(rnd, cids, n) for n in range(rnd.randrange(1, 120))]
    earlier: Stood | None = None
    again = 0
    for run in range(runs):
        if run:
            for _ in range(rnd.randrange(0, 1 + len(findings) // 8)):
                i = rnd.randrange(len(findings))
                roll = rnd.random()
                old = findings[i]
                if roll < 0.3:
                    findings[i] = replace(old, cls=rnd.choice(_CLASSES))
                elif roll < 0.55:
                    findings[i] = replace(old, owner=Owner(uid=old.owner.uid, container_id=rnd.choice(cids)))
                elif roll < 0.7:
                    findings[i] = replace(old, kind=rnd.choice(_KINDS))
                elif roll < 0.85:
                    findings[i] = _finding(rnd, cids, 1000 + run)
                else:
                    findings[i] = replace(old)  # equal, another object
        ctx = _Ctx(list(findings))
        if earlier is not None and len(earlier.before) == len(findings):
            again += 1
        earlier = stand_or_fall_together(cast(Context, ctx), earlier)
        assert ctx.findings == _reference(findings), run
        assert list(earlier.after) == ctx.findings and list(earlier.before) == findings
