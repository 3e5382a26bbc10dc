"""iptables-save, run and parsed: the CNI chains and hostport rules of a dump.

The reader (inventory.iptables) and the rule executor (reclaim.rules, which re-reads the dump right
before its transaction) parse one and the same way.

The bridge/ptp plugins (ipMasq) create one `CNI-<hash>` chain per container and portmap one
`CNI-DN-<hash>` (older versions also `CNI-SN-<hash>`); the chain names hash network name and container id,
and the rules or the jumps into them carry the comment `name: "<network>" id: "<container id>"`.
Everything else named CNI-* (CNI-HOSTPORT-*, CNI-FORWARD, CNI-ADMIN ...) is shared by all pods and is
never reported as a chain; the per-container rules inside the CNI-HOSTPORT-* chains are reported one by one.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodegc.hostio.files import Shared
from nodegc.hostio.iptables_backend import IPV6_SAVES
from nodegc.model.resources import HostportRule, IptablesChain, Kind, ReadProblem
from nodegc.settings import in_net_ns

PER_CONTAINER_CHAIN = re.compile(r"^CNI-(?:DN-|SN-)?[0-9a-f]{8,}$")
"""Only these CNI-* chains belong to one container: `CNI-<hex>`, `CNI-DN-<hex>`, `CNI-SN-<hex>`."""
HOSTPORT_CHAINS = frozenset({"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"})
_DN_CHAIN = re.compile(r"^CNI-DN-[0-9a-f]{8,}$")
_OWNER = re.compile(
    r"""(?:^|\s)name:\s*["']?(?P<network>[^"'\s]+)["']?\s+id:\s*["']?(?P<cid>[^"'\s]+)["']?"""
)
_CHAIN_DECL = re.compile(r"^:(?P<name>\S+)\s+(?P<policy>\S+)(?:\s+\[\d+:\d+\])?\s*$")
_COUNTERS = re.compile(r"^\[\d+:\d+\]\s+")
_SHOWN = 160


@dataclass(frozen=True, slots=True)
class _Rule:
    chain: str
    text: str
    target: str | None
    owner: tuple[str, str] | None


@dataclass
class _Table:
    name: str
    line_no: int
    chains: list[str] = field(default_factory=list)
    rules: list[_Rule] = field(default_factory=list)
    committed: bool = False
    """Ended by COMMIT: a table cut short (a dump that stopped early) may have lost any of its rules."""


class RuleMemo:
    """The parse of each rule line of the last dump, by the line's text: the parse is a function of the
    text alone, so a line met again parses to the same rule (a legacy node, dumped every scan, parses
    only its changed lines). Lines the last parse did not meet are forgotten. A line's parse is kept as
    the rule, or as the reason it is none.

    A parse works on its own: begin() hands it the lines remembered then, end() makes what it met the
    memo. Parses that overlap (two threads) each leave one whole dump's lines, the last to end wins; a
    parse that began before a clear() leaves nothing (what was cleared stays cleared)."""

    def __init__(self) -> None:
        self._known: dict[str, _Rule | str] = {}
        self._generation = 0
        self._lock = threading.Lock()

    def begin(self) -> RuleParse:
        with self._lock:
            return RuleParse(self._known, self._generation)

    def end(self, parse: RuleParse) -> None:
        with self._lock:
            if parse.generation == self._generation:
                self._known = parse.seen

    def clear(self) -> None:
        with self._lock:
            self._known = {}
            self._generation += 1

    def __len__(self) -> int:
        """Rule lines remembered."""
        return len(self._known)


class RuleParse:
    """One dump's parse against a memo: reads what the memo knew at begin(), records every line it meets."""

    __slots__ = ("_known", "generation", "seen")

    def __init__(self, known: dict[str, _Rule | str], generation: int) -> None:
        self._known = known  # never written: the memo replaces its dict, it does not change it
        self.generation = generation
        self.seen: dict[str, _Rule | str] = {}

    def parse(self, line: str, shared: Shared | None = None) -> tuple[_Rule | None, str]:
        found = self._known.get(line)
        if found is None:
            rule, reason = _parse_rule(_COUNTERS.sub("", line), shared)
            found = reason if rule is None else rule
        elif not isinstance(found, str) and found.text == line:
            line = found.text  # the remembered rule's own text as the key: one copy of the line is kept, not two
        self.seen[line] = found
        return (None, found) if isinstance(found, str) else (found, "")


def parse_iptables_save(
    text: str, *, memo: RuleMemo | None = None
) -> tuple[tuple[IptablesChain, ...], tuple[HostportRule, ...], tuple[str, ...]]:
    """Per-container CNI chains, per-container hostport rules, and why lines were skipped; `memo` (the
    scan's) takes the parse of a rule line the previous parse met again. The chains of a table without
    COMMIT (a dump cut short) are listed with no owner: the cut may have hidden another owner's comment."""
    skipped: list[str] = []
    tables: list[_Table] = []
    current: _Table | None = None
    session = memo.begin() if memo is not None else None
    shared = Shared()
    """One object for each chain name, target and owner of the lines parsed now (a container's chain and
    owner are named by several lines, every rule of a chain names it)."""
    # "\n" only: splitlines() would also cut a rule at a U+2028 or \x1c inside a comment.
    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            if current is not None:
                skipped.append(f"line {current.line_no}: table {current.name} has no COMMIT")
                tables.append(current)
            current = _Table(name=line[1:].strip(), line_no=line_no)
            if not current.name:
                skipped.append(f"line {line_no}: table line without a name")
                current = None
            continue
        if current is None:
            skipped.append(f"line {line_no}: outside a table: {_shown(line)}")
            continue
        if line == "COMMIT":
            current.committed = True
            tables.append(current)
            current = None
        elif line.startswith(":"):
            m = _CHAIN_DECL.match(line)
            if m is None:
                skipped.append(f"line {line_no}: malformed chain declaration: {_shown(line)}")
            elif m["name"] not in current.chains:
                current.chains.append(shared.text(m["name"]))
        else:
            rule, reason = (session.parse(line, shared) if session is not None
                            else _parse_rule(_COUNTERS.sub("", line), shared))
            if rule is None:
                skipped.append(f"line {line_no}: {reason}: {_shown(line)}")
            else:
                current.rules.append(rule)
                if rule.chain not in current.chains:
                    current.chains.append(rule.chain)
    if current is not None:
        skipped.append(f"line {current.line_no}: table {current.name} has no COMMIT")
        tables.append(current)
    if memo is not None and session is not None:
        memo.end(session)

    chains: list[IptablesChain] = []
    hostport: list[HostportRule] = []
    for table in tables:
        table_chains = _chains_of(table, skipped)
        chains.extend(table_chains)
        hostport.extend(_hostport_rules_of(table, {c.name: c for c in table_chains}))
    return tuple(chains), tuple(hostport), tuple(skipped)


def _shown(line: str) -> str:
    return line if len(line) <= _SHOWN else line[:_SHOWN] + "..."


def rule_owner(line: str) -> tuple[str, str] | None:
    """(network, container id) the first CNI comment of a rule line names, or None (no such comment, or a
    line that does not parse)."""
    rule, _ = _parse_rule(_COUNTERS.sub("", line))
    return rule.owner if rule is not None else None


def _parse_rule(line: str, shared: Shared | None = None) -> tuple[_Rule | None, str]:
    try:
        tokens = tokenize(line)
    except ValueError as e:
        return None, str(e)
    if len(tokens) < 2 or tokens[0] != "-A":
        return None, "not an -A rule"
    chain = tokens[1]
    target: str | None = None
    owner: tuple[str, str] | None = None
    for i, tok in enumerate(tokens[:-1]):
        nxt = tokens[i + 1]
        if tok in ("-j", "--jump", "-g", "--goto"):
            target = nxt
        elif tok == "--comment" and owner is None:
            m = _OWNER.search(nxt)
            if m is not None:
                owner = (m["network"], sys.intern(m["cid"]))  # the id other records name
    if shared is not None:
        chain = shared.text(chain)
        if target is not None:
            target = shared.text(target)
        if owner is not None:
            owner = shared.pair((shared.text(owner[0]), owner[1]))
    return _Rule(chain=chain, text=line, target=target, owner=owner), ""


# One character class per alternative and a mandatory separator keep both patterns linear on any input.
_WORD = r'(?:[^\s"]|"(?:[^"\\]|\\.)*")+'
_TOKENS = re.compile(_WORD)
_LINE = re.compile(rf"\s*(?:{_WORD}(?:\s+|$))*")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")


# The one quoted token CNI rules carry is the comment; the rest of such a line splits on blanks.
_COMMENT = re.compile(r'(?:^|\s)--comment\s+"((?:[^"\\]|\\.)*)"(?=\s|$)')


def tokenize(line: str) -> list[str]:
    """Split a rule the way iptables-restore does: double quotes group, backslash escapes inside them."""
    if '"' not in line:
        return line.split()  # most rules: no quoting, and the scan parses thousands of them
    m = _COMMENT.search(line)
    if m is not None:
        before, after = line[:m.start()], line[m.end():]
        if '"' not in before and '"' not in after:
            inner = m.group(1)
            comment = _ESCAPE.sub(_first_group, inner) if "\\" in inner else inner
            return [*before.split(), "--comment", comment, *after.split()]
    return tokenize_quoted(line)


def tokenize_quoted(line: str) -> list[str]:
    """The general path: any number of quoted tokens, anywhere."""
    if _LINE.fullmatch(line) is None:
        raise ValueError("unterminated quote")
    return [_QUOTED.sub(_unquote, tok) if '"' in tok else tok for tok in _TOKENS.findall(line)]


def _unquote(m: re.Match[str]) -> str:
    return _ESCAPE.sub(_first_group, m.group(1))


def _first_group(m: re.Match[str]) -> str:
    return m.group(1)


def _chains_of(table: _Table, skipped: list[str]) -> list[IptablesChain]:
    out: list[IptablesChain] = []
    by_chain: dict[str, list[_Rule]] = {}
    by_target: dict[str, list[_Rule]] = {}
    for r in table.rules:  # indexed once: a node has thousands of chains and rules
        by_chain.setdefault(r.chain, []).append(r)
        if r.target is not None and r.target != r.chain:
            by_target.setdefault(r.target, []).append(r)
    for name in table.chains:
        if not PER_CONTAINER_CHAIN.match(name):
            continue
        rules = by_chain.get(name, [])
        jumps = by_target.get(name, [])
        owners = {r.owner for r in rules if r.owner} or {r.owner for r in jumps if r.owner}
        owner: tuple[str, str] | None = None
        if not table.committed:
            pass  # its cut may have hidden another owner's comment: no evidence is better than a wrong owner
        elif len(owners) == 1:
            owner = next(iter(owners))
        elif len(owners) > 1:
            # two containers claim one chain: no evidence is better than a wrong owner
            skipped.append(f"table {table.name} chain {name}: conflicting owner comments, owner left unknown")
        out.append(
            IptablesChain(
                table=table.name,
                name=name,
                network=owner[0] if owner else None,
                container_id=owner[1] if owner else None,
                rules=tuple(r.text for r in rules),
                jumps=tuple(r.text for r in jumps),
            )
        )
    return out


def _hostport_rules_of(table: _Table, chains: dict[str, IptablesChain]) -> list[HostportRule]:
    out: list[HostportRule] = []
    for rule in table.rules:
        if rule.chain not in HOSTPORT_CHAINS:
            continue
        is_dn_jump = rule.target is not None and _DN_CHAIN.match(rule.target) is not None
        if rule.owner is None and not is_dn_jump:
            continue
        network, cid = rule.owner if rule.owner else (None, None)
        if rule.owner is None and rule.target in chains:
            network, cid = chains[rule.target].network, chains[rule.target].container_id
        out.append(
            HostportRule(
                table=table.name,
                chain=rule.chain,
                rule=rule.text,
                network=network,
                container_id=cid,
                target=rule.target,
            )
        )
    return out


OPTIONAL_COMMANDS = IPV6_SAVES
"""A node without the IPv6 tool has no IPv6 rules nodegc could see or remove: its absence is no problem
(a problem would keep every chain item of the node from ever being confirmed absent)."""
_NOT_FOUND_EXIT = 127


def read_iptables_save(
    *,
    commands: Sequence[str] = ("iptables-save", "ip6tables-save"),
    net_ns: Path | None = None,
    timeout: float = 30.0,
    optional: Collection[str] = OPTIONAL_COMMANDS,
) -> tuple[str, tuple[ReadProblem, ...]]:
    """The concatenated dumps; a command that is missing, fails or hangs is a problem, not an abort.

    Output of a failed command is dropped: a partial dump could hide the jump that names a chain's owner.
    """
    texts: list[str] = []
    problems: list[ReadProblem] = []
    for cmd in commands:
        argv = in_net_ns([cmd], net_ns)
        where = " ".join(argv)
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError as e:
            if cmd not in optional:
                problems.append(ReadProblem(Kind.IPTABLES_CHAIN, where, f"not found: {e.filename or argv[0]}"))
            continue
        except subprocess.TimeoutExpired:
            problems.append(ReadProblem(Kind.IPTABLES_CHAIN, where, f"timed out after {timeout}s"))
            continue
        except OSError as e:
            problems.append(ReadProblem(Kind.IPTABLES_CHAIN, where, f"cannot run: {e.strerror or e}"))
            continue
        if proc.returncode == _NOT_FOUND_EXIT and net_ns is not None and cmd in optional:
            continue  # nsenter could not find the optional tool
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            detail = _shown(err[0]) if err else "no error output"
            problems.append(ReadProblem(Kind.IPTABLES_CHAIN, where, f"exit {proc.returncode}: {detail}"))
            continue
        # surrogateescape keeps odd bytes in comments intact for a later iptables-restore
        texts.append(proc.stdout.decode("utf-8", "surrogateescape"))
    return "".join(t if t.endswith("\n") or not t else t + "\n" for t in texts), tuple(problems)
