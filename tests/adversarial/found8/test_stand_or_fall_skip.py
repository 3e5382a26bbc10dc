"""The stand-or-fall-together rule skips groups whose parts are all of one class. Differential against the
rule without the skip (as it was), on random groups of parts of random classes, kinds and owners: the
verdicts, evidence included, are the same."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import cast

import pytest

from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind
from nodegc.planning.context import Context, short
from nodegc.planning.network import _ATTACHMENT, stand_or_fall_together


@dataclass
class _Ctx:
    findings: list[Finding] = field(default_factory=list)


def _reference(findings: list[Finding]) -> list[Finding]:
    """The rule before the skip."""
    findings = list(findings)
    groups: dict[str, list[int]] = defaultdict(list)
    for index, finding in enumerate(findings):
        if finding.owner.container_id and finding.kind in _ATTACHMENT:
            groups[finding.owner.container_id].append(index)
    for cid, indexes in groups.items():
        keeping = [findings[i] for i in indexes if not findings[i].cls.is_residue]
        if not keeping:
            continue
        in_use = next((f for f in keeping if f.cls is FindingClass.IN_USE), None)
        ref = in_use or keeping[0]
        cls = FindingClass.IN_USE if in_use else FindingClass.PROTECTED
        weaker = {FindingClass.PROTECTED} if in_use else set()
        changed = [i for i in indexes if findings[i].cls.is_residue or findings[i].cls in weaker]
        note = f"{ref.kind.value} {ref.id} of the same container {short(cid)} is {ref.cls.value}"
        for i in changed:
            old = findings[i]
            findings[i] = Finding(cls, old.kind, old.id, ref.owner if in_use else old.owner,
                                  ref.owner_state if in_use else old.owner_state, (*old.evidence, note),
                                  netns=old.netns, ip=old.ip, sandbox=old.sandbox)
    return findings


@pytest.mark.parametrize("seed", range(30))
def test_the_skip_of_single_class_groups_changes_no_verdict(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    kinds = [*sorted(_ATTACHMENT, key=lambda k: k.value), Kind.SANDBOX, Kind.POD_DIR]
    classes = list(FindingClass)
    cids = [f"c{n:02d}" * 8 for n in range(rnd.randrange(1, 12))]
    one_class = {cid: rnd.choice(classes) for cid in [*cids, None]}
    findings = []
    for n in range(rnd.randrange(1, 80)):
        cid = rnd.choice([*cids, None])
        # groups of one class are common (all in use, all leaked): draw from a small palette per container
        palette = classes if rnd.random() < 0.5 else [one_class[cid]]
        findings.append(Finding(rnd.choice(palette), rnd.choice(kinds), f"id-{n}",
                                Owner(uid=f"u{n}", container_id=cid), rnd.choice(list(OwnerState)), (f"e{n}",)))
    ctx = _Ctx(list(findings))
    stand_or_fall_together(cast(Context, ctx))
    assert ctx.findings == _reference(findings)
