"""host-local IPAM reservations: `<cni data>/networks/<net>/<ip>`, one file per allocated address.

The file content names the container that holds the address; that id, not the pod's status, is the
evidence that ties an address to a sandbox. Files are opened with O_NOFOLLOW and read with a bound, so a
planted symlink or a huge file can neither lead the reader outside the data dir nor exhaust memory.

Scan after scan, a file whose stamp (inode, size, mtime, ctime: `hostio.files.FileMemo`) is the one an
earlier scan read, long settled, is not opened again: its parse is taken again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nodegc.hostio.cni_files import (
    IPAM_LOCK_NAME,
    LAST_RESERVED_PREFIX,
    MAX_RESERVATION_BYTES,
    parse_reservation,
)
from nodegc.hostio.files import (
    FileMemo,
    FileReadError,
    irregular,
    list_top_dir,
    os_reason,
    read_small_file,
    symlink_reason,
)
from nodegc.model.addresses import normalized_ip
from nodegc.model.resources import IPReservation, Kind, ReadProblem

_NOT_RESERVATIONS = (IPAM_LOCK_NAME,)


def _skipped(name: str) -> bool:
    return name in _NOT_RESERVATIONS or name.startswith(LAST_RESERVED_PREFIX)


def _scan_network(net: os.DirEntry[str], problems: list[ReadProblem]) -> list[IPReservation]:
    found: list[IPReservation] = []
    try:
        with os.scandir(net.path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as e:
        problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, os_reason(e)))
        return found
    for entry in entries:
        if _skipped(entry.name):
            continue
        try:
            ip = normalized_ip(entry.name)
        except ValueError:
            problems.append(ReadProblem(Kind.IP_RESERVATION, entry.path, "file name is not an IP address"))
            continue
        if (why := irregular(entry)) is not None:
            problems.append(ReadProblem(Kind.IP_RESERVATION, entry.path, why))
            continue
        try:
            known = _PARSED.get(entry.path, entry.stat(follow_symlinks=False))
        except OSError as e:
            problems.append(ReadProblem(Kind.IP_RESERVATION, entry.path, os_reason(e)))
            continue
        if known is not None:
            found.append(known)
            continue
        try:
            small = read_small_file(entry.path, limit=MAX_RESERVATION_BYTES)
            container_id, ifname, legacy = parse_reservation(small.content)
        except (FileReadError, ValueError) as e:
            problems.append(ReadProblem(Kind.IP_RESERVATION, entry.path, str(e)))
            continue
        reservation = IPReservation(
            network=net.name,
            ip=ip,
            path=entry.path,
            inode=small.inode,
            mtime=small.mtime,
            container_id=None if container_id is None else sys.intern(container_id),  # the id other records name
            ifname=None if ifname is None else sys.intern(ifname),  # a node's few interface names
            legacy_format=legacy,
        )
        _PARSED.put(entry.path, small, reservation)
        found.append(reservation)
    return found


def scan_ip_reservations(
    cni_data_dir: Path,
) -> tuple[tuple[IPReservation, ...], tuple[ReadProblem, ...]]:
    networks_path = os.path.join(os.fsdecode(cni_data_dir), "networks")
    nets, problem = list_top_dir(networks_path, kind=Kind.IP_RESERVATION)
    problems: list[ReadProblem] = [problem] if problem else []
    found: list[IPReservation] = []
    for net in nets:
        try:
            if net.is_symlink():
                problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, symlink_reason(net.path)))
                continue
            if not net.is_dir(follow_symlinks=False):
                problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, "not a network directory"))
                continue
        except OSError as e:
            problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, os_reason(e)))
            continue
        try:
            net.name.encode("utf-8")
        except UnicodeEncodeError:
            problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, "network name is not valid UTF-8"))
            continue
        found.extend(_scan_network(net, problems))
    _PARSED.end_scan()
    return tuple(found), tuple(problems)


_PARSED: FileMemo[IPReservation] = FileMemo()
"""Reservations read by earlier scans of this process, taken again while their file's stamp is unchanged."""


def forget_parsed_reservations() -> None:
    """Forget every remembered parse: the next scan reads every file (a process's first scan)."""
    _PARSED.clear()
