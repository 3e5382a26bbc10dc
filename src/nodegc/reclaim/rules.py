"""Removing CNI chains and hostport rules with one iptables-restore per address family.

One `--noflush` transaction per family touches only the named chains and rules and applies all of them
or none, which is both faster and safer than one iptables call per rule. The dump is re-read first so
the transaction cannot fail on a rule that is already gone, and so nothing whose owner changed is sent.
The model has no family field: the family is wherever the fresh dumps show the chain (possibly both).
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodegc.hostio.iptables import parse_iptables_save, read_iptables_save, rule_owner
from nodegc.hostio.iptables_backend import commands as iptables_commands
from nodegc.model.resources import HostportRule, IptablesChain
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import in_net_ns

MAX_ISOLATED = 64
"""After a failed batch, at most this many single-item restores are tried to find the bad item."""


@dataclass(frozen=True)
class _Family:
    save: str
    restore: str


FAMILIES = (_Family("iptables-save", "iptables-restore"), _Family("ip6tables-save", "ip6tables-restore"))


def _families(backend: str, net_ns: Path | None, timeout: float) -> tuple[_Family, _Family]:
    """The save/restore pair of each address family, of the backend that holds the node's rules."""
    c = iptables_commands(backend, net_ns=net_ns, timeout=timeout)
    return _Family(c.save[0], c.restore[0]), _Family(c.save[1], c.restore[1])


@dataclass
class _Dump:
    chains: dict[tuple[str, str], IptablesChain] = field(default_factory=dict)
    rules: dict[tuple[str, str, str], HostportRule] = field(default_factory=dict)
    lines: set[tuple[str, str]] = field(default_factory=set)
    """(table, rule) of every rule of the dump, as iptables-save prints it."""
    by_name: dict[str, list[tuple[str, IptablesChain]]] = field(default_factory=dict)
    """Chain name -> (table, chain) wherever a per-container chain of that name exists."""


@dataclass
class _Unit:
    """What must go in one transaction: a chain with the jumps into it, or one standalone rule."""

    table: str
    keys: list[str]
    deletes: list[str]
    chain: str | None = None


def remove_rules(
    chains: Sequence[IptablesChain],
    rules: Sequence[HostportRule],
    *,
    net_ns: Path | None,
    timeout: float = 30.0,
    backend: str = "auto",
) -> dict[str, Outcome]:
    """Outcomes keyed by chain name and by rule text (rule texts start with `-A`, so keys never clash)."""
    deadline = time.monotonic() + timeout
    families = _families(backend, net_ns, timeout)
    dumps: list[_Dump | None] = []
    read_errors: list[str] = []
    for fam in families:
        dump, error = _read(fam, net_ns=net_ns, deadline=deadline)
        dumps.append(dump)
        if error:
            read_errors.append(error)

    outcomes: dict[str, list[Outcome]] = {}
    units: list[list[_Unit]] = [[] for _ in families]
    for chain in chains:
        _plan_chain(chain, dumps, units, outcomes, read_errors)
    index = _index(units)
    for rule in rules:
        _plan_rule(rule, dumps, units, outcomes, read_errors, index=index)

    for fam, fam_units in zip(families, units, strict=True):
        if not fam_units:
            continue
        for unit, outcome in _apply(fam, fam_units, net_ns=net_ns, deadline=deadline):
            for key in unit.keys:
                outcomes.setdefault(key, []).append(outcome)
    return {key: _merge(found) for key, found in outcomes.items()}


def _read(fam: _Family, *, net_ns: Path | None, deadline: float) -> tuple[_Dump | None, str | None]:
    text, problems = read_iptables_save(
        commands=(fam.save,), net_ns=net_ns, timeout=max(deadline - time.monotonic(), 0.1)
    )
    if problems:
        return None, f"{fam.save}: {problems[0].reason}"
    parsed_chains, parsed_rules, _skipped = parse_iptables_save(text)
    dump = _Dump()
    for c in parsed_chains:
        dump.chains[(c.table, c.name)] = c
        dump.by_name.setdefault(c.name, []).append((c.table, c))
    for r in parsed_rules:
        dump.rules[(r.table, r.chain, r.rule)] = r
    table = ""
    for raw in text.split("\n"):
        line = raw.strip()
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith("-A "):
            dump.lines.add((table, line))
    return dump, None


def _plan_chain(
    chain: IptablesChain,
    dumps: list[_Dump | None],
    units: list[list[_Unit]],
    outcomes: dict[str, list[Outcome]],
    read_errors: list[str],
) -> None:
    found = [(i, d.chains[(chain.table, chain.name)]) for i, d in enumerate(dumps)
             if d is not None and (chain.table, chain.name) in d.chains]
    if not found:
        outcomes[chain.name] = [_absent(read_errors, f"chain {chain.name} already gone")]
        return
    for _, fresh in found:
        if (fresh.network, fresh.container_id) != (chain.network, chain.container_id):
            outcomes[chain.name] = [Outcome.changed(
                f"chain {chain.name} now belongs to {fresh.network!r}/{fresh.container_id!r}"
            )]
            return
    for i, fresh in found:
        deletes = [_as_delete(j) for j in fresh.jumps]
        units[i].append(_Unit(table=chain.table, keys=[chain.name], deletes=deletes, chain=chain.name))


def _index(units: list[list[_Unit]]) -> list[dict[tuple[str, str], _Unit]]:
    """Per family, (table, delete line) -> the unit that already deletes it."""
    return [{(u.table, d): u for u in fam_units for d in u.deletes} for fam_units in units]


def _plan_rule(
    rule: HostportRule,
    dumps: list[_Dump | None],
    units: list[list[_Unit]],
    outcomes: dict[str, list[Outcome]],
    read_errors: list[str],
    *,
    index: list[dict[tuple[str, str], _Unit]],
) -> None:
    key = (rule.table, rule.chain, rule.rule)
    found = [(i, d.rules[key]) for i, d in enumerate(dumps) if d is not None and key in d.rules]
    if not found:
        outcomes[rule.rule] = [_absent(read_errors, "rule already gone")]
        return
    for _, fresh in found:
        if (fresh.network, fresh.container_id) != (rule.network, rule.container_id):
            outcomes[rule.rule] = [Outcome.changed(
                f"rule now belongs to {fresh.network!r}/{fresh.container_id!r}"
            )]
            return
    delete = _as_delete(rule.rule)
    for i, _ in found:
        # A jump into a chain removed in this call is deleted with that chain, never twice.
        owner = index[i].get((rule.table, delete))
        if owner is not None:
            owner.keys.append(rule.rule)
        else:
            unit = _Unit(table=rule.table, keys=[rule.rule], deletes=[delete])
            units[i].append(unit)
            index[i][(rule.table, delete)] = unit


def _absent(read_errors: list[str], detail: str) -> Outcome:
    """Absent from a dump that could not be read is not proof of absence."""
    if read_errors:
        return Outcome.failed(f"not found, but not every family could be read: {'; '.join(read_errors)}")
    return Outcome.gone(detail)


def _as_delete(rule_text: str) -> str:
    return "-D " + rule_text[3:] if rule_text.startswith("-A ") else rule_text


def _batch(units: Sequence[_Unit]) -> str:
    """Deletes first, then flush every chain, then delete every chain: chains may jump to each other."""
    lines: list[str] = []
    for table in dict.fromkeys(u.table for u in units):
        mine = [u for u in units if u.table == table]
        names = list(dict.fromkeys(u.chain for u in mine if u.chain is not None))
        lines.append(f"*{table}")
        lines += list(dict.fromkeys(d for u in mine for d in u.deletes))
        lines += [f"-F {n}" for n in names]
        lines += [f"-X {n}" for n in names]
        lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def _apply(
    fam: _Family, units: Sequence[_Unit], *, net_ns: Path | None, deadline: float
) -> list[tuple[_Unit, Outcome]]:
    error = _restore(fam, _batch(units), net_ns=net_ns, deadline=deadline)
    if error is None:
        return [(u, Outcome.done(f"removed by {fam.restore}")) for u in units]
    if len(units) == 1:
        return [(units[0], Outcome.failed(error))]
    out: list[tuple[_Unit, Outcome]] = []
    for n, unit in enumerate(units):
        if n >= MAX_ISOLATED:
            out.append((unit, Outcome.failed(f"batch failed ({error}); not retried alone")))
            continue
        single = _restore(fam, _batch([unit]), net_ns=net_ns, deadline=deadline)
        out.append((unit, Outcome.failed(single) if single else Outcome.done(f"removed by {fam.restore}")))
    return out


def _restore(fam: _Family, text: str, *, net_ns: Path | None, deadline: float) -> str | None:
    """None on success, else why it failed (first line of stderr)."""
    argv = in_net_ns([fam.restore, "--noflush", "-w"], net_ns)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return f"{fam.restore} not run: time budget spent"
    try:
        proc = subprocess.run(
            argv,
            input=text.encode("utf-8", "surrogateescape"),
            capture_output=True,
            timeout=remaining,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{fam.restore} timed out after {remaining:.1f}s"
    except OSError as e:
        return f"cannot run {fam.restore}: {e.strerror or e}"
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{fam.restore} exit {proc.returncode}: {err[0][:200] if err else 'no error output'}"
    return None


def _merge(found: Sequence[Outcome]) -> Outcome:
    """One key may live in both families: it is reclaimed only when every family agrees."""
    if len(found) == 1:
        return found[0]
    bad = [o for o in found if not o.ok]
    if bad:
        return bad[0]
    return next((o for o in found if not o.already_gone), found[0])


@dataclass(frozen=True)
class RuleTarget:
    """One thing a plugin's DEL removes: a per-container chain (with every jump into it, in any table and
    family where it exists) or one rule, exactly as iptables-save prints it."""

    key: str
    """Outcomes are merged per key (one attachment has several targets)."""
    owner: tuple[str, str] | None
    """(network, container id) a chain's comments may name; a chain claimed by another container is left."""
    chain: str | None = None
    rule: str | None = None
    table: str = "filter"
    """The table of `rule`."""
    family: int = 0
    """Index into FAMILIES of `rule`."""


def remove_targets(
    targets: Sequence[RuleTarget], *, net_ns: Path | None, deadline: float, backend: str = "auto"
) -> dict[str, Outcome]:
    """Like `remove_rules`, for targets named the way the plugins name them rather than as scanned: the
    fresh dumps decide what exists and who owns it; one iptables-restore per family for all of them."""
    families = _families(backend, net_ns, max(deadline - time.monotonic(), 0.1))
    dumps: list[_Dump | None] = []
    read_errors: list[str] = []
    for fam in families:
        dump, error = _read(fam, net_ns=net_ns, deadline=deadline)
        dumps.append(dump)
        if error:
            read_errors.append(error)
    outcomes: dict[str, list[Outcome]] = {}
    units: list[list[_Unit]] = [[] for _ in families]
    index: list[dict[tuple[str, str], _Unit]] | None = None
    chain_units: list[dict[tuple[str, str], _Unit]] = [{} for _ in families]
    for t in sorted(targets, key=lambda t: t.chain is None):  # chains first: their jumps go with them
        if t.chain is None and index is None:
            index = _index(units)
        found = _target_units(t, dumps, units, index, chain_units)
        if isinstance(found, Outcome):
            outcomes.setdefault(t.key, []).append(found)
        elif not found:
            outcomes.setdefault(t.key, []).append(_absent(read_errors, "already gone"))
        elif t.chain is not None and read_errors:
            # Removed where it was seen, but a family that could not be read may hold it too: not done.
            outcomes.setdefault(t.key, []).append(
                Outcome.failed(f"not every family could be read: {'; '.join(read_errors)}"))
    for fam, fam_units in zip(families, units, strict=True):
        if fam_units:
            for unit, outcome in _apply(fam, fam_units, net_ns=net_ns, deadline=deadline):
                for key in dict.fromkeys(unit.keys):
                    what = f"chain {unit.chain}" if unit.chain else f"rule '{unit.deletes[0][3:]}'"
                    detail = f"removed {what} ({fam.restore})" if outcome.ok else outcome.detail
                    outcomes.setdefault(key, []).append(dataclasses.replace(outcome, detail=detail))
    merged: dict[str, Outcome] = {}
    for key, results in outcomes.items():
        bad = [o for o in results if not o.ok]
        done = [o for o in results if o.ok and not o.already_gone]
        if bad:
            merged[key] = bad[0]
        elif done:
            merged[key] = Outcome.done("; ".join(o.detail for o in done))
        else:
            merged[key] = results[0]
    return merged


def _other_claim(chain: IptablesChain, owner: tuple[str, str] | None) -> tuple[str, str] | None:
    """An owner other than `owner` that a comment of the chain's rules or of a jump into it names, or None.

    The parse leaves a chain claimed by two containers without an owner ("conflicting owner comments"): that
    is no licence to remove it, with the other container's rule in it or jumping to it."""
    if chain.container_id is not None:
        claimed = (chain.network or "", chain.container_id)
        if claimed != owner:
            return claimed
    for text in (*chain.rules, *chain.jumps):
        named = rule_owner(text)
        if named is not None and named != owner:
            return named
    return None


def _target_units(t: RuleTarget, dumps: list[_Dump | None], units: list[list[_Unit]],
                  index: list[dict[tuple[str, str], _Unit]] | None,
                  chain_units: list[dict[tuple[str, str], _Unit]]) -> Outcome | bool:
    """Adds the units that remove `t`; True when any was added, an Outcome when `t` must be left.

    A chain two targets name (two attachments of one container on one network share its masquerade and
    portmap chains) is removed once, for both: deleting it twice in one transaction fails the transaction."""
    added = False
    if t.chain is not None:
        for i, d in enumerate(dumps):
            if d is None:
                continue
            for table, fresh in d.by_name.get(t.chain, []):
                name = fresh.name
                other = _other_claim(fresh, t.owner)
                if other is not None:
                    return Outcome.changed(f"chain {name} belongs to {other[0]!r}/{other[1]!r}")
                same = chain_units[i].get((table, name))
                if same is not None:
                    same.keys.append(t.key)
                else:
                    unit = _Unit(table=table, keys=[t.key], deletes=[_as_delete(j) for j in fresh.jumps], chain=name)
                    units[i].append(unit)
                    chain_units[i][(table, name)] = unit
                added = True
        return added
    d = dumps[t.family]
    if t.rule is not None and d is not None and index is not None and (t.table, t.rule) in d.lines:
        delete = _as_delete(t.rule)
        if (t.table, delete) not in index[t.family]:
            unit = _Unit(table=t.table, keys=[t.key], deletes=[delete])
            units[t.family].append(unit)
            index[t.family][(t.table, delete)] = unit
        else:
            index[t.family][(t.table, delete)].keys.append(t.key)  # the same rule for another target
        added = True
    return added
