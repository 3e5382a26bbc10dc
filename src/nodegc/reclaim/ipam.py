"""Releasing a host-local reservation without a cache entry (nothing to run CNI DEL with).

host-local's disk backend flocks `<data dir>/<network>/lock` around every allocation and release, so
taking that same lock makes the compare-and-remove atomic with respect to a concurrent ADD handing the
address to a new sandbox.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Sequence

from nodegc.hostio.cni_files import IPAM_LOCK_NAME, MAX_RESERVATION_BYTES, parse_reservation
from nodegc.model.resources import IPReservation
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots

LOCK_NAME = IPAM_LOCK_NAME
_POLL = 0.02


def release_ip(res: IPReservation, *, roots: Roots, lock_timeout: float = 10.0) -> Outcome:
    """Remove the file only while it still names the same container (and is the same inode)."""
    return release_ips([res], roots=roots, lock_timeout=lock_timeout)[0]


def release_ips(reservations: Sequence[IPReservation], *, roots: Roots, lock_timeout: float = 10.0) -> list[Outcome]:
    """`release_ip` for a batch, one outcome per reservation in order: host-local's lock of each network
    directory is taken once for all of that network's reservations (a lock and a directory open per
    network, not per address), and a lock that stays busy costs one timeout for the whole network."""
    out: list[Outcome | None] = [None] * len(reservations)
    by_dir: dict[str, list[int]] = {}
    data = os.path.join(os.fsdecode(roots.cni_data_dir), "networks")
    for i, res in enumerate(reservations):
        net_dir = os.path.join(data, res.network)
        odd = "/" in res.network or res.network in (".", "..") or "/" in res.ip or res.ip in (".", "..", LOCK_NAME)
        if odd or os.path.normpath(res.path) != os.path.join(net_dir, res.ip):
            out[i] = Outcome.failed(f"{res.path} is not {res.ip} in network {res.network} under the data dir")
            continue
        by_dir.setdefault(net_dir, []).append(i)
    for net_dir, indexes in by_dir.items():
        group = [reservations[i] for i in indexes]
        for i, outcome in zip(indexes, _release_in(net_dir, group, lock_timeout=lock_timeout), strict=True):
            out[i] = outcome
    return [o if o is not None else Outcome.failed("no outcome") for o in out]


def _release_in(net_dir: str, group: Sequence[IPReservation], *, lock_timeout: float) -> list[Outcome]:
    network = group[0].network
    try:
        dir_fd = os.open(net_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return [Outcome.gone("network directory already removed")] * len(group)
    except OSError as e:
        return [Outcome.failed(f"cannot open {net_dir}: {e.strerror or e}")] * len(group)
    try:
        lock_fd = _lock(dir_fd, timeout=lock_timeout)
        if lock_fd is None:
            return [Outcome.failed(f"host-local lock of {network} busy for {lock_timeout}s")] * len(group)
        try:
            return [_compare_and_remove(res, dir_fd) for res in group]
        finally:
            os.close(lock_fd)  # closing drops the flock
    except OSError as e:
        return [Outcome.failed(f"cannot lock {net_dir}/{LOCK_NAME}: {e.strerror or e}")] * len(group)
    finally:
        os.close(dir_fd)


def lock_network_dir(net_dir: str, *, timeout: float) -> tuple[int, int] | None:
    """(directory fd, lock fd) with host-local's lock of `net_dir` held, or None when it stayed busy for
    `timeout`. Close the lock fd to release it, then the directory fd. FileNotFoundError: no directory."""
    dir_fd = os.open(net_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        lock_fd = _lock(dir_fd, timeout=timeout)
    except BaseException:
        os.close(dir_fd)
        raise
    if lock_fd is None:
        os.close(dir_fd)
        return None
    return dir_fd, lock_fd


def _lock(dir_fd: int, *, timeout: float) -> int | None:
    """host-local creates the lock file the same way (O_CREATE, 0644) when it is missing."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO must not block us
    fd = os.open(LOCK_NAME, flags, 0o644, dir_fd=dir_fd)
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise OSError(errno.EINVAL, f"{LOCK_NAME} is not a regular file")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(_POLL)
        except OSError:
            os.close(fd)
            raise


def _compare_and_remove(res: IPReservation, dir_fd: int) -> Outcome:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(res.ip, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return Outcome.gone("reservation already released")
    except OSError as e:
        if e.errno == errno.ELOOP:
            return Outcome.failed("reservation is a symlink; not followed")
        return Outcome.failed(f"cannot open reservation: {e.strerror or e}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Outcome.failed("reservation is not a regular file")
        content = os.read(fd, MAX_RESERVATION_BYTES + 1)
    except OSError as e:
        return Outcome.failed(f"cannot read reservation: {e.strerror or e}")
    finally:
        os.close(fd)
    if st.st_ino != res.inode:
        return Outcome.changed(f"reservation file replaced (inode {st.st_ino}, expected {res.inode})")
    try:
        container_id, ifname, _legacy = parse_reservation(content[:MAX_RESERVATION_BYTES])
    except ValueError as e:
        return Outcome.changed(f"reservation no longer readable as before: {e}")
    if container_id != res.container_id or (res.ifname is not None and ifname != res.ifname):
        return Outcome.changed(f"reservation now held by container {container_id!r}")
    try:
        os.unlink(res.ip, dir_fd=dir_fd)
    except FileNotFoundError:
        return Outcome.gone("reservation already released")
    except OSError as e:
        return Outcome.failed(f"cannot remove reservation: {e.strerror or e}")
    return Outcome.done(f"released {res.network}/{res.ip}")
