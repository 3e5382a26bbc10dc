"""iptables-save parsing against real plugin output and small literal cases.

fixtures/iptables_portmap.txt is verbatim `iptables-save` (1.8.9, nf_tables) taken inside a private
network namespace after running the Debian containernetworking-plugins chain bridge (ipMasq) -> portmap
(hostPort 8080 / 9090 -> 80) -> firewall (iptables backend) for two containers of network k8s-pod-network.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.hostio.iptables import (
    PER_CONTAINER_CHAIN,
    parse_iptables_save,
    read_iptables_save,
    tokenize,
    tokenize_quoted,
)

FIXTURE = Path(__file__).parent / "fixtures" / "iptables_portmap.txt"
NET = "k8s-pod-network"
CID1 = "3f1c0a9e8b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e"
CID2 = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f1a2b"


def _comment(cid: str, prefix: str = "") -> str:
    return f'-m comment --comment "{prefix}name: \\"{NET}\\" id: \\"{cid}\\""'


def test_fixture_chains() -> None:
    chains, _, skipped = parse_iptables_save(FIXTURE.read_text())
    assert skipped == ()
    got = {(c.table, c.name): (c.network, c.container_id, len(c.rules), len(c.jumps)) for c in chains}
    assert got == {
        ("nat", "CNI-4c8ade6716ad295a50ab2dfb"): (NET, CID1, 2, 1),
        ("nat", "CNI-DN-4c8ade6716ad295a50ab2"): (NET, CID1, 3, 1),
        ("nat", "CNI-DN-a4e2bf60a43a717cd7257"): (NET, CID2, 3, 1),
        ("nat", "CNI-a4e2bf60a43a717cd7257be3"): (NET, CID2, 2, 1),
    }


def test_fixture_chain_rules_and_jumps_are_full_lines() -> None:
    chains, _, _ = parse_iptables_save(FIXTURE.read_text())
    masq = next(c for c in chains if c.name == "CNI-4c8ade6716ad295a50ab2dfb")
    assert masq.rules == (
        f"-A CNI-4c8ade6716ad295a50ab2dfb -d 10.244.0.0/16 {_comment(CID1)} -j ACCEPT",
        f"-A CNI-4c8ade6716ad295a50ab2dfb ! -d 224.0.0.0/4 {_comment(CID1)} -j MASQUERADE",
    )
    assert masq.jumps == (
        f"-A POSTROUTING -s 10.244.0.2/32 {_comment(CID1)} -j CNI-4c8ade6716ad295a50ab2dfb",
    )
    dn = next(c for c in chains if c.name == "CNI-DN-a4e2bf60a43a717cd7257")
    # the DN chain's own rules carry no comment: the owner comes from the jump in CNI-HOSTPORT-DNAT
    assert all("--comment" not in r for r in dn.rules)
    assert dn.rules[-1] == (
        "-A CNI-DN-a4e2bf60a43a717cd7257 -p tcp -m tcp --dport 9090 -j DNAT --to-destination 10.244.0.3:80"
    )
    assert dn.jumps == (
        f"-A CNI-HOSTPORT-DNAT -p tcp {_comment(CID2, 'dnat ')} -m multiport --dports 9090 "
        "-j CNI-DN-a4e2bf60a43a717cd7257",
    )


def test_fixture_hostport_rules() -> None:
    _, rules, _ = parse_iptables_save(FIXTURE.read_text())
    assert [(r.table, r.chain, r.network, r.container_id, r.target) for r in rules] == [
        ("nat", "CNI-HOSTPORT-DNAT", NET, CID1, "CNI-DN-4c8ade6716ad295a50ab2"),
        ("nat", "CNI-HOSTPORT-DNAT", NET, CID2, "CNI-DN-a4e2bf60a43a717cd7257"),
    ]
    assert rules[0].rule.startswith("-A CNI-HOSTPORT-DNAT -p tcp -m comment")


def test_fixture_shared_chains_not_reported() -> None:
    chains, _, _ = parse_iptables_save(FIXTURE.read_text())
    names = {c.name for c in chains}
    shared = {"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK", "CNI-FORWARD", "CNI-ADMIN"}
    assert shared <= set(FIXTURE.read_text().replace(":", " ").split())
    assert not names & shared
    assert all(c.table == "nat" for c in chains)  # the filter table holds only the shared firewall chains


@pytest.mark.parametrize(
    ("name", "per_container"),
    [
        ("CNI-4c8ade6716ad295a50ab2dfb", True),
        ("CNI-DN-4c8ade6716ad295a50ab2", True),
        ("CNI-SN-4c8ade6716ad295a50ab2", True),
        ("CNI-HOSTPORT-DNAT", False),
        ("CNI-FORWARD", False),
        ("CNI-ADMIN", False),
        ("CNI-ISOLATION-STAGE-1", False),
        ("CNI-DN-", False),
        ("CNI-XX-4c8ade6716ad295a50ab2", False),
        ("CNI-4C8ADE6716AD295A50AB2DFB", False),
        ("KUBE-SVC-4c8ade6716ad295a", False),
    ],
)
def test_per_container_chain_names(name: str, per_container: bool) -> None:
    assert bool(PER_CONTAINER_CHAIN.match(name)) is per_container


def test_shared_and_odd_cni_chains_with_comments_are_not_reported() -> None:
    text = "\n".join(
        [
            "*filter",
            ":CNI-FORWARD - [0:0]",
            ":CNI-ISOLATION-STAGE-1 - [0:0]",
            f"-A CNI-FORWARD -s 10.0.0.5/32 {_comment('abc123')} -j ACCEPT",
            f"-A CNI-ISOLATION-STAGE-1 {_comment('abc123')} -j RETURN",
            "COMMIT",
            "",
        ]
    )
    chains, rules, skipped = parse_iptables_save(text)
    assert (chains, rules, skipped) == ((), (), ())


def test_owner_from_jump_when_chain_has_no_comment() -> None:
    text = "\n".join(
        [
            "*nat",
            ":POSTROUTING ACCEPT [0:0]",
            ":CNI-0123456789abcdef01234567 - [0:0]",
            f"-A POSTROUTING -s 10.1.0.2/32 {_comment('abc123')} -j CNI-0123456789abcdef01234567",
            "-A CNI-0123456789abcdef01234567 -d 10.1.0.0/16 -j ACCEPT",
            "COMMIT",
        ]
    )
    chains, _, skipped = parse_iptables_save(text)
    assert skipped == ()
    assert len(chains) == 1
    assert (chains[0].network, chains[0].container_id) == (NET, "abc123")
    assert chains[0].rules == ("-A CNI-0123456789abcdef01234567 -d 10.1.0.0/16 -j ACCEPT",)


def test_chain_without_any_comment_has_unknown_owner_and_empty_chain_is_reported() -> None:
    text = "*nat\n:CNI-0123456789abcdef01234567 - [0:0]\n:CNI-DN-0123456789abcdef01234 - [0:0]\n" + (
        "-A CNI-0123456789abcdef01234567 -j ACCEPT\nCOMMIT\n"
    )
    chains, _, _ = parse_iptables_save(text)
    assert [(c.name, c.network, c.container_id, len(c.rules)) for c in chains] == [
        ("CNI-0123456789abcdef01234567", None, None, 1),
        ("CNI-DN-0123456789abcdef01234", None, None, 0),
    ]


def test_conflicting_owners_leave_owner_unknown() -> None:
    text = "\n".join(
        [
            "*nat",
            ":CNI-0123456789abcdef01234567 - [0:0]",
            f"-A CNI-0123456789abcdef01234567 {_comment('aaa')} -j ACCEPT",
            f"-A CNI-0123456789abcdef01234567 {_comment('bbb')} -j MASQUERADE",
            "COMMIT",
        ]
    )
    chains, _, skipped = parse_iptables_save(text)
    assert chains[0].container_id is None
    assert any("conflicting owner" in s for s in skipped)


@pytest.mark.parametrize(
    "comment",
    [
        '"name: \\"net1\\" id: \\"abc123\\""',
        '"name: net1 id: abc123"',
        "\"name: 'net1' id: 'abc123'\"",
        '"snat name: \\"net1\\" id: \\"abc123\\""',
        'name:net1',  # not a full owner comment: no owner
    ],
)
def test_comment_forms(comment: str) -> None:
    chain = "CNI-0123456789abcdef01234567"
    text = f"*nat\n:{chain} - [0:0]\n-A {chain} -m comment --comment {comment} -j ACCEPT\nCOMMIT\n"
    chains, _, skipped = parse_iptables_save(text)
    assert skipped == ()
    expected = (None, None) if comment == "name:net1" else ("net1", "abc123")
    assert (chains[0].network, chains[0].container_id) == expected


def test_hostport_rule_owner_from_dn_chain_when_rule_has_no_comment() -> None:
    text = "\n".join(
        [
            "*nat",
            ":CNI-HOSTPORT-DNAT - [0:0]",
            ":CNI-HOSTPORT-MASQ - [0:0]",
            ":CNI-DN-0123456789abcdef01234 - [0:0]",
            f"-A CNI-DN-0123456789abcdef01234 -p tcp {_comment('abc123')} -j DNAT --to 10.1.0.2:80",
            "-A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 80 -j CNI-DN-0123456789abcdef01234",
            "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
            "COMMIT",
        ]
    )
    _, rules, _ = parse_iptables_save(text)
    assert [(r.chain, r.container_id, r.target) for r in rules] == [
        ("CNI-HOSTPORT-DNAT", "abc123", "CNI-DN-0123456789abcdef01234")
    ]


def test_jumps_only_counted_in_the_same_table() -> None:
    text = "\n".join(
        [
            "*filter",
            "-A FORWARD -j CNI-0123456789abcdef01234567",
            "COMMIT",
            "*nat",
            ":CNI-0123456789abcdef01234567 - [0:0]",
            "COMMIT",
        ]
    )
    chains, _, _ = parse_iptables_save(text)
    nat = [c for c in chains if c.table == "nat"]
    assert nat[0].jumps == ()


def test_ipv4_and_ipv6_dumps_concatenated_keep_separate_blocks() -> None:
    chain = "CNI-0123456789abcdef01234567"
    block = f"*nat\n:{chain} - [0:0]\n-A {chain} {_comment('abc')} -j ACCEPT\nCOMMIT\n"
    chains, _, skipped = parse_iptables_save(block + block)
    assert skipped == ()
    assert len(chains) == 2
    assert all(len(c.rules) == 1 for c in chains)


def test_counters_prefix_is_stripped() -> None:
    chain = "CNI-0123456789abcdef01234567"
    text = f"*nat\n:{chain} - [3:180]\n[3:180] -A {chain} -j ACCEPT\nCOMMIT\n"
    chains, _, skipped = parse_iptables_save(text)
    assert skipped == ()
    assert chains[0].rules == ("-A CNI-0123456789abcdef01234567 -j ACCEPT",)


def test_malformed_lines_are_skipped_with_reasons() -> None:
    text = "\n".join(
        [
            "-A CNI-0123456789abcdef01234567 -j ACCEPT",  # before any table
            "*nat",
            ":",  # malformed declaration
            ":CNI-0123456789abcdef01234567 - [0:0]",
            '-A CNI-0123456789abcdef01234567 -m comment --comment "unterminated -j ACCEPT',
            "-I CNI-0123456789abcdef01234567 -j ACCEPT",
            "garbage",
            "-A",
            "-A CNI-0123456789abcdef01234567 -j MASQUERADE",
            "*filter",  # nat never committed
            "-A FORWARD -j ACCEPT",
        ]
    )
    chains, _, skipped = parse_iptables_save(text)
    assert chains[0].rules == ("-A CNI-0123456789abcdef01234567 -j MASQUERADE",)
    assert len(skipped) == 8
    assert skipped[0].startswith("line 1: outside a table")
    assert "malformed chain declaration" in skipped[1]
    assert "unterminated quote" in skipped[2]
    assert sum("not an -A rule" in s for s in skipped) == 3
    assert "table nat has no COMMIT" in skipped[6]
    assert "table filter has no COMMIT" in skipped[7]


def test_long_lines_are_shortened_in_reasons() -> None:
    _, _, skipped = parse_iptables_save("x" * 1000)
    assert len(skipped[0]) < 200


def test_tokenize_unescapes_quoted_comment() -> None:
    assert tokenize('-A X -m comment --comment "a \\"b\\" c\\\\d" -j Y') == [
        "-A",
        "X",
        "-m",
        "comment",
        "--comment",
        'a "b" c\\d',
        "-j",
        "Y",
    ]


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_read_iptables_save_concatenates_and_survives_failures(tmp_path: Path) -> None:
    v4 = _script(tmp_path / "v4-save", f"cat {FIXTURE}")
    v6 = _script(tmp_path / "v6-save", "printf '*nat\\nCOMMIT'")  # no trailing newline
    bad = _script(tmp_path / "bad-save", "echo 'iptables: permission denied' >&2; echo partial; exit 4")
    slow = _script(tmp_path / "slow-save", "exec sleep 5")
    missing = str(tmp_path / "missing-save")
    text, problems = read_iptables_save(commands=(v4, bad, slow, missing, v6), timeout=0.5)
    assert text == FIXTURE.read_text() + "*nat\nCOMMIT\n"
    assert [(p.path, p.reason) for p in problems] == [
        (bad, "exit 4: iptables: permission denied"),
        (slow, "timed out after 0.5s"),
        (missing, f"not found: {missing}"),
    ]


def test_tokenize_is_linear_on_hostile_lines() -> None:
    # A planted comment must not be able to stall the scan through regex backtracking.
    for line in ['-A X "abc', "-A X " + "a" * 20000 + ' "abc def', '"' * 30001, "-A " + 'x"y' * 5000 + '"']:
        with pytest.raises(ValueError, match="unterminated quote"):
            tokenize(line)


_CHARS = st.sampled_from(['"', "\\", " ", "a", "-", "x", ":", "\t"])


@settings(max_examples=500, deadline=None)
@given(before=st.text(_CHARS, max_size=12), comment=st.text(_CHARS, max_size=12), after=st.text(_CHARS, max_size=12))
def test_comment_fast_path_splits_like_the_general_tokenizer(before: str, comment: str, after: str) -> None:
    line = f'-A X {before} --comment "{comment}" {after}'
    try:
        expected: list[str] | str = tokenize_quoted(line)
    except ValueError as e:
        expected = str(e)
    try:
        got: list[str] | str = tokenize(line)
    except ValueError as e:
        got = str(e)
    assert got == expected


def test_a_missing_optional_tool_is_no_problem_but_a_missing_required_one_is() -> None:
    missing = "nodegc-no-such-iptables-save"
    assert read_iptables_save(commands=(missing,), optional={missing}) == ("", ())
    text, problems = read_iptables_save(commands=(missing,), optional=())
    assert text == "" and len(problems) == 1 and "not found" in problems[0].reason


def test_rule_memo_parses_dump_after_dump_exactly_as_a_fresh_parse() -> None:
    """Differential: the scan's memo of rule lines, over dumps that change between parses (rules gone,
    owners rewritten, a line turned malformed, a table cut short), gives what a parse without it gives."""
    import random

    from nodegc.hostio.iptables import RuleMemo

    rng = random.Random(5)  # noqa: S311 - test data, not secrets
    base = FIXTURE.read_text().split("\n")
    memo = RuleMemo()
    for _ in range(30):
        lines = list(base)
        for _ in range(rng.randrange(6)):
            if len(lines) < 2:
                break
            i = rng.randrange(1, len(lines))
            choice = rng.randrange(4)
            if choice == 0:
                del lines[i]
            elif choice == 1:
                lines[i] = lines[i].replace(CID1, CID2)
            elif choice == 2:
                lines[i] = lines[i] + ' "'
            else:
                lines = lines[:i]
        text = "\n".join(lines)
        assert parse_iptables_save(text, memo=memo) == parse_iptables_save(text)
    again = parse_iptables_save(FIXTURE.read_text(), memo=memo)
    assert again == parse_iptables_save(FIXTURE.read_text(), memo=memo) == parse_iptables_save(FIXTURE.read_text())


def test_a_parse_keeps_one_object_per_chain_name_and_owner() -> None:
    """The rules of one container name its chain and its owner several times: one object each, with the
    memo or without (what the scan keeps between cycles holds them all)."""
    from nodegc.hostio.iptables import RuleMemo

    text = FIXTURE.read_text()
    for memo in (None, RuleMemo(), RuleMemo()):
        chains, hostport, _ = parse_iptables_save(text, memo=memo)
        owned = [c for c in chains if c.container_id is not None]
        assert owned
        by_cid: dict[str, set[int]] = {}
        for c in owned:
            by_cid.setdefault(c.container_id or "", set()).add(id(c.container_id))
        for r in hostport:
            if r.container_id in by_cid:
                by_cid[r.container_id].add(id(r.container_id))
        assert all(len(ids) == 1 for ids in by_cid.values())
        assert len({id(c.network) for c in owned}) == len({c.network for c in owned})
    assert parse_iptables_save(text, memo=memo) == parse_iptables_save(text)


def test_rule_memo_keeps_one_dumps_lines_whatever_parses_overlap() -> None:
    """Two parses at once on one memo (two threads) and a clear() in the middle of one: the memo ends up
    holding the lines of one whole dump (the last one to finish), or nothing after a clear, never a
    mixture of both dumps or a part of one."""
    import sys
    import threading

    from nodegc.hostio.iptables import RuleMemo

    def dump(tag: str, n: int) -> tuple[str, set[str]]:
        rules = [f"-A CNI-{tag}{i:020d} -d 10.{i % 250}.0.0/16 {_comment(CID1)} -j ACCEPT" for i in range(n)]
        decls = [f":CNI-{tag}{i:020d} - [0:0]" for i in range(n)]
        return "\n".join(["*nat", *decls, *rules, "COMMIT"]), set(rules)

    a, a_rules = dump("a", 3000)
    b, b_rules = dump("b", 3000)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(5):
            memo = RuleMemo()
            threads = [threading.Thread(target=parse_iptables_save, args=(t,), kwargs={"memo": memo}) for t in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert set(memo._known) in (a_rules, b_rules)
            t = threading.Thread(target=parse_iptables_save, args=(a,), kwargs={"memo": memo})
            t.start()
            memo.clear()
            t.join()
            assert set(memo._known) in (set(), a_rules) and len(memo) in (0, len(a_rules))
    finally:
        sys.setswitchinterval(interval)


def test_rule_memo_keeps_one_copy_of_a_rule_line_dumped_again() -> None:
    """Each dump is a new text: a line met again is kept under the remembered rule's own text, so the memo
    holds one copy of it (the rule's), not the new dump's line as well."""
    from nodegc.hostio.iptables import RuleMemo

    memo = RuleMemo()
    first = parse_iptables_save(FIXTURE.read_text(), memo=memo)
    rules = dict(memo._known)
    again = parse_iptables_save(FIXTURE.read_text(), memo=memo)  # a new text, as every dump is
    assert again == first
    kept = [(line, found) for line, found in memo._known.items() if not isinstance(found, str)]
    assert kept
    for line, found in kept:
        assert found is rules[line]  # the remembered parse
        assert line is found.text  # its text is the key: one object
