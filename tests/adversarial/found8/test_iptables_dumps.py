"""The scan's iptables dumps: the memo of rule lines (a legacy node parses only the lines it did not meet in
the last dump) against dumps whose lines move between tables and chains, change order or whose chains are
renamed; and a dump cut short (its last table without COMMIT), which must not read as a complete table: a
chain whose rules were cut may have lost the comment of a second owner."""

from __future__ import annotations

import random

from nodegc.hostio.iptables import RuleMemo, parse_iptables_save
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import correlate
from tests.unit.factories import NOW, cache, desired, pod
from tests.unit.test_iptables_parse import CID1, CID2, FIXTURE, _comment

CHAIN = "CNI-0123456789abcdef01234567"


def test_the_memo_parses_moved_reordered_and_renamed_lines_as_a_fresh_parse() -> None:
    rng = random.Random(8)  # noqa: S311 - test data, not secrets
    base = FIXTURE.read_text().split("\n")
    memo = RuleMemo()
    for _ in range(60):
        lines = list(base)
        for _ in range(rng.randrange(1, 6)):
            rules = [i for i, line in enumerate(lines) if line.startswith("-A ")]
            if not rules:
                break
            i = rng.choice(rules)
            choice = rng.randrange(4)
            if choice == 0:  # the same text in another table (or chain position)
                j = rng.randrange(1, len(lines))
                lines.insert(j, lines[i])
            elif choice == 1:  # order changed
                j = rng.choice(rules)
                lines[i], lines[j] = lines[j], lines[i]
            elif choice == 2:  # a chain renamed, declaration and rules
                name = lines[i].split()[1]
                lines = [line.replace(name, name[:-1] + "Z") for line in lines]
            else:
                lines[i] = lines[i].replace(CID1, CID2)
        text = "\n".join(lines)
        assert parse_iptables_save(text, memo=memo) == parse_iptables_save(text)


def _dump(*, cut: bool) -> str:
    lines = ["*nat", f":{CHAIN} - [0:0]", f"-A {CHAIN} -d 10.244.0.0/16 {_comment(CID1)} -j ACCEPT",
             f"-A {CHAIN} ! -d 224.0.0.0/4 {_comment(CID2)} -j MASQUERADE", "COMMIT"]
    return "\n".join(lines[:3] if cut else lines) + "\n"


def test_a_table_cut_short_gives_its_chains_no_owner() -> None:
    whole, _, _ = parse_iptables_save(_dump(cut=False))
    assert whole[0].container_id is None  # two owners: none
    for memo in (None, RuleMemo()):
        chains, _, skipped = parse_iptables_save(_dump(cut=True), memo=memo)
        assert [c.name for c in chains] == [CHAIN]
        assert chains[0].container_id is None, "the cut may have hidden another owner's comment"
        assert any("has no COMMIT" in s for s in skipped)


def test_a_chain_whose_second_owner_was_cut_is_not_residue() -> None:
    """CID1's sandbox is a dead pod's, CID2's a live one's; the dump is cut after CID1's rule: the chain
    may be both, and must not be judged CID1's leaked chain."""
    web = pod("web", "uid-web", ip="10.0.0.9")
    entries = (cache(CID1, uid="uid-gone", name="gone"), cache(CID2, uid="uid-web", name="web", ip="10.0.0.9"))
    verdicts = {}
    for cut in (False, True):
        chains, hostport, _ = parse_iptables_save(_dump(cut=cut))
        inventory = Inventory(taken_at=NOW, chains=chains, hostport_rules=hostport, cni_cache=entries)
        verdicts[cut] = [f.cls for f in correlate(inventory, desired(web), now=NOW)
                         if f.kind is Kind.IPTABLES_CHAIN]
    assert verdicts[False] and not any(c.is_residue for c in verdicts[False])
    assert verdicts[True] and not any(c.is_residue for c in verdicts[True]), verdicts
