"""Just enough rtnetlink for nodegc: link dumps, batched netnsid queries and link deletes, decoded by hand.

pyroute2 decodes every attribute of every link in pure Python and pays a round trip per netnsid query; on
a node with a thousand pods that was most of a scan. A link message is a fixed header and a flat list of
attributes, of which the veth reader needs six, so walking the list with `struct` and skipping the rest
is enough.

The socket is opened in the node's network namespace by a short-lived thread: namespace membership is
per thread, and a socket keeps the namespace it was created in, so the thread enters the namespace,
creates the socket, goes back and exits. The calling thread never changes namespace.
"""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from nodegc.hostio.libc import CLONE_NEWNET, setns

NETLINK_ROUTE = 0

NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
RTM_SETLINK = 19
RTM_NEWADDR = 20
RTM_GETADDR = 22
RTM_NEWNSID = 88
RTM_GETNSID = 90

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300

IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_LINK = 5
IFLA_MASTER = 10
IFLA_LINKINFO = 18
IFLA_GROUP = 27
IFLA_EXT_MASK = 29
IFLA_LINK_NETNSID = 37
IFLA_TARGET_NETNSID = 46
IFLA_INFO_KIND = 1
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_TARGET_NETNSID = 10
NETNSA_NSID = 1
NETNSA_FD = 3
RTEXT_FILTER_SKIP_STATS = 1 << 3
"""Counters are most of a link message and none of the reader's business; old kernels ignore the bit."""
IFF_LOOPBACK = 0x8
LOOPBACK_IFINDEX = 1
"""The loopback's index in every network namespace (include/net/flow.h)."""

_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
_NLMSG_HDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_NLA_HDR = struct.Struct("=HH")
_IFADDRMSG = struct.Struct("=BBBBI")
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_SO_NETNS_COOKIE = 71
_SOL_NETLINK = 270
_NETLINK_GET_STRICT_CHK = 12
_I32 = struct.Struct("=i")
_RECV_BUF = 1 << 16
"""The kernel fills a dump datagram up to 32 KiB; anything longer than the buffer is reported, not cut."""
_LINK_ATTRS = frozenset((IFLA_ADDRESS, IFLA_IFNAME, IFLA_LINK, IFLA_MASTER, IFLA_LINKINFO, IFLA_LINK_NETNSID,
                         IFLA_GROUP))
_NSID_BATCH = 64
"""Requests per send: their replies (one small datagram each) must fit the default receive buffer."""
_DELETE_BATCH = 64
"""Link deletes per send, for the same reason (each is acknowledged by a small datagram)."""
_LOOKUP_BATCH = 16
"""Link lookups per send: each reply is a link message (about 1.5 KiB without counters); a batch of them
must fit the default receive buffer (208 KiB)."""

_T = TypeVar("_T")


class _NoAnswer:
    """What a batch's answer function returns for a message that answers nothing (see `_ask_each`)."""


_NO_ANSWER = _NoAnswer()

_DUMP_ATTEMPTS = 3

DEFAULT_TIMEOUT = 10.0
"""Seconds any single receive may wait; a kernel that never answers fails the read instead of the scan."""

DUMP_MAX_MESSAGES = 16384
"""Links or addresses one dump accepts. A pod with CAP_NET_ADMIN can fill its namespace with addresses (or
links) without end: each read item is kept until the dump ends, and the receive timeout bounds only the wait
for each datagram, not the dump. Past the bound the dump fails (NetlinkError): that namespace's read fails
with the reason, and what it would have shown is kept. A node's own namespace holds a link per pod."""
DUMP_MAX_BYTES = 64 << 20
"""Bytes of datagrams one dump reads, for the same reason (a few large messages instead of many)."""


class _DumpBudget:
    """What one dump has read so far, against its bounds."""

    __slots__ = ("_bytes", "_max_bytes", "_max_messages", "_messages", "_what")

    def __init__(self, what: str, max_messages: int, max_bytes: int) -> None:
        self._what = what
        self._max_messages, self._max_bytes = max_messages, max_bytes
        self._messages = self._bytes = 0

    def datagram(self, size: int) -> None:
        self._bytes += size
        if self._bytes > self._max_bytes:
            raise DumpBoundError(f"{self._what}: more than {self._max_bytes} bytes: not read to its end (a namespace"
                               " filled past the bound)")

    def message(self) -> None:
        self._messages += 1
        if self._messages > self._max_messages:
            raise DumpBoundError(f"{self._what}: more than {self._max_messages} messages: not read to its end (a"
                               " namespace filled past the bound)")


class NetlinkError(Exception):
    """The namespace could not be entered, the kernel refused, went quiet or sent something malformed.

    `code` is the errno the kernel answered with, when it answered with one.
    """

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class DumpBoundError(NetlinkError):
    """A dump past DUMP_MAX_MESSAGES or DUMP_MAX_BYTES: not read to its end (a namespace filled past the
    bound, as a pod with CAP_NET_ADMIN can fill its own)."""


def _time_left(timeout: float, what: str) -> float:
    """`timeout` when there is time left; NetlinkError (a timeout, with its reason) when none is: a socket
    given 0 turns non-blocking (a receive then fails with EAGAIN, not as a timeout) and a negative one is a
    ValueError."""
    if not timeout > 0:  # nan too
        raise NetlinkError(f"{what}: no time left (timeout {timeout:g}s): not sent")
    return timeout


@dataclass(frozen=True, slots=True)
class RawLink:
    """The attributes of one RTM_NEWLINK message the veth reader uses; absent ones are None.

    Strings are the kernel's NUL-terminated bytes decoded as UTF-8; a name that is not UTF-8 is None,
    as is a MAC shorter than six bytes.
    """

    index: int
    name: str | None
    mac: str | None
    master: int | None
    link: int | None
    link_netnsid: int | None
    kind: str | None
    group: int | None = None


@dataclass(frozen=True, slots=True)
class NetnsFile:
    """A netns file as a scan recorded it, to be opened only as that: `path` is `depth` components below a
    configured directory (1: a file of the netns dir; more: a file of the runtime's state dir, below its
    folders), and `inode`/`dev` are the namespace's as the scan saw them (None: not recorded).

    The configured directory is opened as configured (it may be a symlink, /var/run/netns -> /run/netns);
    every component below it, the file included, without following a symlink; what was opened must be
    the recorded namespace. A container that plants a symlink there, or a namespace mounted again at the
    path since the scan, is refused with a reason (`NetnsFileChanged`, or the OSError of the open), never
    read in its place."""

    path: Path
    depth: int = 1
    inode: int | None = None
    dev: int | None = None


class NetnsFileChanged(OSError):
    """The file opened is not the namespace the scan recorded at its path."""

    def __str__(self) -> str:
        return str(self.strerror)


_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO put at the path does not block the open (it is no namespace: refused after)
_FILE_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_netns(target: Path | NetnsFile) -> int:
    """A descriptor on the namespace file; a plain Path is opened as given (symlinks followed: the node's
    own namespace is often /proc/1/ns/net), a `NetnsFile` only as what the scan recorded. OSError (a
    `NetnsFileChanged` for another namespace) when it cannot be."""
    if not isinstance(target, NetnsFile):
        return os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    parts = os.path.normpath(os.fsdecode(target.path)).split("/")
    if target.depth < 1 or len(parts) <= target.depth or not all(parts[-target.depth:]):
        raise NetnsFileChanged(errno.EINVAL, f"{os.fsdecode(target.path)} is not {target.depth} below a directory")
    top = "/".join(parts[: -target.depth]) or "/"
    current = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[-target.depth : -1]:
            below = os.open(part, _DIR_NOFOLLOW, dir_fd=current)
            os.close(current)
            current = below
        fd = os.open(parts[-1], _FILE_NOFOLLOW, dir_fd=current)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NetnsFileChanged(e.errno, f"a symlink (or a file that is no directory) on its path below {top}, "
                                   f"not followed") from e
        raise
    finally:
        os.close(current)
    try:
        st = os.fstat(fd)
        if (target.inode is not None and st.st_ino != target.inode) or (
                target.dev is not None and st.st_dev != target.dev):
            raise NetnsFileChanged(
                errno.ESTALE, f"not the namespace the scan recorded (inode {st.st_ino} on device {st.st_dev}, "
                f"scanned {target.inode} on {target.dev})")
    except BaseException:
        os.close(fd)
        raise
    return fd


class RtnlSocket:
    """A NETLINK_ROUTE socket bound to the namespace it was opened in; use as a context manager."""

    def __init__(self, sock: socket.socket, *, max_dump_messages: int | None = None,
                 max_dump_bytes: int | None = None) -> None:
        self._sock = sock
        self._max_messages = DUMP_MAX_MESSAGES if max_dump_messages is None else max_dump_messages
        self._max_bytes = DUMP_MAX_BYTES if max_dump_bytes is None else max_dump_bytes
        self._seq = itertools.count(1)
        self._buf = bytearray()
        """Allocated at the first receive and dropped at close: `open_many` hands out hundreds of sockets that
        are read one after the other, and their buffers then take turns in the same memory."""

    @classmethod
    def open(cls, net_ns: Path | NetnsFile | None = None, *, timeout: float = DEFAULT_TIMEOUT,
             max_dump_messages: int | None = None, max_dump_bytes: int | None = None) -> RtnlSocket:
        """In the current namespace, or in the one the netns file `net_ns` names (never created; a
        `NetnsFile` only when it is still what the scan recorded, see `open_netns`). A dump accepts at most
        `max_dump_messages` items and `max_dump_bytes` (default DUMP_MAX_MESSAGES, DUMP_MAX_BYTES)."""
        _time_left(timeout, "netlink socket")
        sock = _socket_in(net_ns, timeout=timeout) if net_ns is not None else _new_socket()
        try:
            sock.settimeout(timeout)
            sock.bind((0, 0))
        except OSError as e:
            sock.close()
            raise NetlinkError(f"cannot bind netlink socket: {e.strerror or e}") from e
        return cls(sock, max_dump_messages=max_dump_messages, max_dump_bytes=max_dump_bytes)

    def _budget(self, what: str) -> _DumpBudget:
        return _DumpBudget(what, self._max_messages, self._max_bytes)

    def close(self) -> None:
        self._sock.close()
        self._buf = bytearray()

    def __enter__(self) -> RtnlSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def netns_cookie(self) -> int | None:
        """The cookie of the namespace the socket lives in (SO_NETNS_COOKIE, Linux 5.14): an id no other
        namespace is given while the machine runs, unlike an inode; None where the kernel has none."""
        try:
            raw = self._sock.getsockopt(socket.SOL_SOCKET, _SO_NETNS_COOKIE, _U64.size)
        except OSError:
            return None
        return int(_U64.unpack(raw)[0]) if len(raw) == _U64.size else None

    def dump_links(self) -> tuple[list[RawLink], list[str]]:
        """Every link, and why each unreadable link message could not be read.

        A dump the kernel flags as interrupted (links changed while it ran) is retried; the last attempt
        is taken as it is, as `ip link` would.
        """
        for attempt in range(_DUMP_ATTEMPTS):
            links, bad, interrupted = self._dump_links_once()
            if not interrupted or attempt == _DUMP_ATTEMPTS - 1:
                break
        return links, bad

    def netnsids(self, fds: Sequence[int]) -> list[int | NetlinkError]:
        """The id each namespace fd has as seen from this socket's namespace, or why it has none.

        Ids come back unsigned, as the kernel sends them: 2**32 - 1 is NETNSA_NSID_NOT_ASSIGNED.
        """
        out: list[int | NetlinkError] = []
        for start in range(0, len(fds), _NSID_BATCH):
            out += self._netnsid_batch(fds[start : start + _NSID_BATCH])
        return out

    def get_link(self, index: int) -> RawLink | None:
        """The link with this index now, or None when there is none (ENODEV)."""
        seq = next(self._seq)
        ext_mask = _nla(IFLA_EXT_MASK, _U32.pack(RTEXT_FILTER_SKIP_STATS))
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, 0, 0) + ext_mask
        self._send(_message(RTM_GETLINK, NLM_F_REQUEST, seq, body))
        while True:
            size = self._recv()
            buf = self._buf
            for mtype, _flags, mseq, start, end in _messages(buf, size):
                if mseq != seq:
                    continue
                if mtype == NLMSG_ERROR:
                    try:
                        _raise_if_error(buf, start, end, f"link {index}")
                    except NetlinkError as e:
                        if e.code in (errno.ENODEV, errno.ENOENT):
                            return None
                        raise
                    raise NetlinkError(f"link {index}: acknowledged without the link")
                if mtype == RTM_NEWLINK:
                    return _parse_link(buf, start, end)

    def delete_links(self, indexes: Sequence[int]) -> list[NetlinkError | None]:
        """Delete each link by index (a veth takes its peer along); None where the kernel acknowledged, else
        why not (`code` ENODEV: no such link). Sent in batches, each request acknowledged on its own, so one
        refusal does not stop the others."""
        out: list[NetlinkError | None] = []
        for start in range(0, len(indexes), _DELETE_BATCH):
            out += self._delete_batch(indexes[start : start + _DELETE_BATCH])
        return out

    def set_groups(self, pairs: Sequence[tuple[int, int]]) -> list[NetlinkError | None]:
        """Put each link (index, group) into a device group; None where acknowledged."""
        out: list[NetlinkError | None] = []
        for start in range(0, len(pairs), _DELETE_BATCH):
            chunk = pairs[start : start + _DELETE_BATCH]
            bodies = [_IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, 0, 0) + _nla(IFLA_GROUP, _U32.pack(group))
                      for index, group in chunk]
            out += self._acked(RTM_SETLINK, bodies, [f"set group of link {index}" for index, _ in chunk])
        return out

    def delete_group(self, group: int) -> NetlinkError | None:
        """Delete every link of the device group at once: the kernel unregisters them together, paying its
        synchronisation once instead of once per link. None when acknowledged."""
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + _nla(IFLA_GROUP, _U32.pack(group))
        return self._acked(RTM_DELLINK, [body], [f"delete link group {group}"])[0]

    def _delete_batch(self, indexes: Sequence[int]) -> list[NetlinkError | None]:
        bodies = [_IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, 0, 0) for index in indexes]
        return self._acked(RTM_DELLINK, bodies, [f"delete link {index}" for index in indexes])

    def _acked(self, request: int, bodies: Sequence[bytes], what: Sequence[str]) -> list[NetlinkError | None]:
        """Send one request per body in one datagram, each acknowledged on its own (none: nothing sent)."""
        if not bodies:
            return []
        seqs = [next(self._seq) for _ in bodies]
        flags = NLM_F_REQUEST | NLM_F_ACK
        requests = (_message(request, flags, seq, body) for seq, body in zip(seqs, bodies, strict=True))
        self._send(b"".join(requests))
        first = seqs[0]
        answers: dict[int, NetlinkError | None] = {}
        while len(answers) < len(seqs):
            size = self._recv()
            buf = self._buf
            for mtype, _flags, mseq, start, end in _messages(buf, size):
                slot = mseq - first
                if not 0 <= slot < len(seqs) or mseq in answers or mtype != NLMSG_ERROR:
                    continue
                try:
                    _raise_if_error(buf, start, end, what[slot])
                except NetlinkError as e:
                    answers[mseq] = e
                else:
                    answers[mseq] = None
        return [answers[seq] for seq in seqs]

    def dump_addresses(self) -> list[tuple[int, str]]:
        """(interface index, address) of every address, IFA_LOCAL before IFA_ADDRESS (the peer on
        point-to-point links). One dump; a message that cannot be read fails it."""
        seq = next(self._seq)
        self._send(_message(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, seq, _IFADDRMSG.pack(0, 0, 0, 0, 0)))
        out: list[tuple[int, str]] = []
        budget = self._budget("address dump")
        while True:
            size = self._recv()
            budget.datagram(size)
            buf = self._buf
            for mtype, _flags, mseq, start, end in _messages(buf, size):
                if mseq == seq and self._address_message(buf, mtype, start, end, out, budget=budget):
                    return out

    def strict(self) -> bool:
        """Ask the kernel to check this socket's requests strictly (NETLINK_GET_STRICT_CHK, Linux 4.20): an
        attribute it does not know in a request is refused, never ignored. False where it cannot."""
        try:
            self._sock.setsockopt(_SOL_NETLINK, _NETLINK_GET_STRICT_CHK, 1)
        except OSError:
            return False
        return True

    def addresses_off_loopback(self) -> list[tuple[int, str]]:
        """`dump_addresses` without those of the namespace's loopback, in one round trip: the lookup of
        that one link and the address dump go in one datagram, instead of a dump of every link.

        The loopback is found by what the kernel makes it, not by its name: every network namespace's
        loopback is ifindex 1 (LOOPBACK_IFINDEX), from the namespace's birth to its death (it can be
        neither deleted nor moved), and carries IFF_LOOPBACK. A name would not do: a pod with
        CAP_NET_ADMIN may rename its loopback and call another link `lo`, by name or by alternative name
        (which the kernel's lookup by name matches). An answer about any other link, or a link 1 without
        IFF_LOOPBACK, fails the read; no link 1 (no kernel does that) leaves nothing out."""
        link_seq, addr_seq = next(self._seq), next(self._seq)
        self._send(_message(RTM_GETLINK, NLM_F_REQUEST, link_seq, _LOOPBACK_LOOKUP)
                   + _message(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, addr_seq, _IFADDRMSG.pack(0, 0, 0, 0, 0)))
        skip: int | None = None
        looked_up = False
        out: list[tuple[int, str]] = []
        done = False
        budget = self._budget("address dump")
        while not (done and looked_up):
            size = self._recv()
            budget.datagram(size)
            buf = self._buf
            for mtype, _flags, mseq, start, end in _messages(buf, size):
                if mseq == link_seq and not looked_up:
                    if mtype == NLMSG_ERROR:
                        _no_loopback(buf, start, end)
                        looked_up = True
                    elif mtype == RTM_NEWLINK:
                        skip, looked_up = _loopback_index(buf, start, end), True
                elif mseq == addr_seq and not done:
                    done = self._address_message(buf, mtype, start, end, out, budget=budget)
        return [(index, address) for index, address in out if index != skip]

    def peer_addresses_off_loopback(self, netnsids: Sequence[int]) -> list[list[tuple[int, str]]]:
        """`addresses_off_loopback` of each namespace that has one of these ids in the socket's namespace,
        read from here (IFLA_/IFA_TARGET_NETNSID): no socket in each namespace. The lookups of link 1 go a
        batch to a datagram, then each namespace's address dump (a socket runs one dump at a time).

        Only on a socket made `strict`, so that a kernel that does not know the attributes refuses the
        requests rather than answering for the socket's own namespace; every answer must also name its
        id, or the read fails. Any failure fails the whole read (NetlinkError): the socket may still be in
        a dump, so the caller must not use it again."""
        out: list[list[tuple[int, str]]] = []
        for start in range(0, len(netnsids), _LOOKUP_BATCH):
            chunk = netnsids[start : start + _LOOKUP_BATCH]
            skips = self._peer_loopbacks(chunk)
            for nsid, skip in zip(chunk, skips, strict=True):
                out.append([(i, a) for i, a in self._peer_addresses(nsid) if i != skip])
        return out

    def _peer_loopbacks(self, netnsids: Sequence[int]) -> list[int | None]:
        """The loopback's index (link 1, checked as `_loopback_index` checks it) in each namespace, None
        where there is no link 1."""
        def answer(slot: int, mtype: int, buf: bytearray, start: int, end: int) -> int | _NoAnswer | None:
            if mtype == NLMSG_ERROR:
                _no_loopback(buf, start, end)
                return None
            if mtype == RTM_NEWLINK:
                if _link_target(buf, start, end) != netnsids[slot]:
                    raise NetlinkError(f"link {LOOPBACK_IFINDEX}: the answer does not name netnsid "
                                       f"{netnsids[slot]}")
                return _loopback_index(buf, start, end)
            return _NO_ANSWER

        return self._ask_each([(RTM_GETLINK, _LOOPBACK_LOOKUP + _nla(IFLA_TARGET_NETNSID, _I32.pack(nsid)))
                               for nsid in netnsids], answer)

    def _peer_addresses(self, netnsid: int) -> list[tuple[int, str]]:
        seq = next(self._seq)
        target = _I32.pack(netnsid)
        body = _IFADDRMSG.pack(0, 0, 0, 0, 0) + _nla(IFA_TARGET_NETNSID, target)
        self._send(_message(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, seq, body))
        out: list[tuple[int, str]] = []
        budget = self._budget(f"address dump of netnsid {netnsid}")
        while True:
            size = self._recv()
            budget.datagram(size)
            buf = self._buf
            for mtype, _flags, mseq, start, end in _messages(buf, size):
                if mseq == seq and self._address_message(buf, mtype, start, end, out, target=target,
                                                         budget=budget):
                    return out

    def _address_message(self, buf: bytearray, mtype: int, start: int, end: int,
                         out: list[tuple[int, str]], *, target: bytes = b"", budget: _DumpBudget) -> bool:
        """One message of an address dump into `out`; True at its end. `target`: the IFA_TARGET_NETNSID
        payload every address must carry (none when empty); `budget`: the dump's bounds."""
        if mtype in (NLMSG_DONE, NLMSG_ERROR):
            _raise_if_error(buf, start, end, "address dump")
            return mtype == NLMSG_DONE
        if mtype == RTM_NEWADDR:
            budget.message()
            if end - start < _IFADDRMSG.size:
                raise NetlinkError("truncated address message")
            family, _plen, _flags2, _scope, index = _IFADDRMSG.unpack_from(buf, start)
            found = {t: bytes(buf[a:b]) for t, a, b in _attrs(buf, start + _IFADDRMSG.size, end)
                     if t in (IFA_LOCAL, IFA_ADDRESS, IFA_TARGET_NETNSID)}
            if target and found.get(IFA_TARGET_NETNSID) != target:
                raise NetlinkError(f"address dump: an address does not name netnsid {_I32.unpack(target)[0]}")
            raw = found.get(IFA_LOCAL) or found.get(IFA_ADDRESS)
            if raw is not None and family in (socket.AF_INET, socket.AF_INET6):
                out.append((index, socket.inet_ntop(family, raw)))
        return False

    def _dump_links_once(self) -> tuple[list[RawLink], list[str], bool]:
        seq = next(self._seq)
        ext_mask = _nla(IFLA_EXT_MASK, _U32.pack(RTEXT_FILTER_SKIP_STATS))
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + ext_mask
        self._send(_message(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, body))
        links: list[RawLink] = []
        bad: list[str] = []
        interrupted = False
        budget = self._budget("link dump")
        while True:
            size = self._recv()
            budget.datagram(size)
            buf = self._buf
            for mtype, flags, mseq, start, end in _messages(buf, size):
                if mseq != seq:
                    continue  # a late reply to an earlier request
                if flags & NLM_F_DUMP_INTR:
                    interrupted = True
                if mtype == NLMSG_DONE:
                    _raise_if_error(buf, start, end, "link dump")
                    return links, bad, interrupted
                if mtype == NLMSG_ERROR:
                    _raise_if_error(buf, start, end, "link dump")
                elif mtype == RTM_NEWLINK:
                    budget.message()
                    try:
                        links.append(_parse_link(buf, start, end))
                    except NetlinkError as e:
                        bad.append(str(e))

    def _netnsid_batch(self, fds: Sequence[int]) -> list[int | NetlinkError]:
        def answer(_slot: int, mtype: int, buf: bytearray, start: int, end: int) -> int | NetlinkError | _NoAnswer:
            if mtype == NLMSG_ERROR:
                try:
                    _raise_if_error(buf, start, end, "netnsid query")
                except NetlinkError as e:
                    return e
                return NetlinkError("netnsid query acknowledged without an answer")
            if mtype == RTM_NEWNSID:
                return _parse_nsid(buf, start, end)
            return _NO_ANSWER

        return self._ask_each([(RTM_GETNSID, b"\0\0\0\0" + _nla(NETNSA_FD, _U32.pack(fd))) for fd in fds], answer)

    def _ask_each(self, requests: Sequence[tuple[int, bytes]],
                  answer: Callable[[int, int, bytearray, int, int], _T | _NoAnswer]) -> list[_T]:
        """Send every (type, body) request in one write, each under its own sequence number, and read until
        each has its answer: `answer(slot, mtype, buf, start, end)` for every message to a request still
        unanswered (`_NO_ANSWER`: not an answer; it may raise). A message to no request, or to one already
        answered, is passed over. The answers come in the requests' order; no request is no answer (and
        nothing is sent)."""
        if not requests:
            return []
        seqs = [next(self._seq) for _ in requests]
        first = seqs[0]
        self._send(b"".join(_message(mtype, NLM_F_REQUEST, seq, body)
                            for seq, (mtype, body) in zip(seqs, requests, strict=True)))
        answers: dict[int, _T] = {}
        while len(answers) < len(seqs):
            size = self._recv()
            buf = self._buf
            for mtype, _flags, mseq, start, end in _messages(buf, size):
                slot = mseq - first
                if not 0 <= slot < len(seqs) or mseq in answers:
                    continue
                got = answer(slot, mtype, buf, start, end)
                if not isinstance(got, _NoAnswer):
                    answers[mseq] = got
        return [answers[seq] for seq in seqs]

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as e:
            raise NetlinkError(f"netlink send failed: {e.strerror or e}") from e

    def _recv(self) -> int:
        if not self._buf:
            self._buf = bytearray(_RECV_BUF)
        try:
            size = self._sock.recv_into(self._buf, _RECV_BUF, socket.MSG_TRUNC)
        except TimeoutError as e:
            raise NetlinkError("no answer from the kernel in time") from e
        except OSError as e:
            raise NetlinkError(f"netlink receive failed: {e.strerror or e}", code=e.errno) from e
        if size > _RECV_BUF:
            raise NetlinkError(f"netlink datagram of {size} bytes exceeds the {_RECV_BUF} byte buffer")
        return size


def _new_socket(protocol: int = NETLINK_ROUTE) -> socket.socket:
    try:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
    except OSError as e:
        raise NetlinkError(f"cannot open netlink socket: {e.strerror or e}") from e


def _socket_in(net_ns: Path | NetnsFile, *, timeout: float, protocol: int = NETLINK_ROUTE) -> socket.socket:
    """A netlink socket created in the namespace of `net_ns` by a thread of its own.

    A thread still entering the namespace when `timeout` runs out is abandoned: whatever socket it makes
    afterwards it closes itself, so a slow namespace never leaves an open descriptor behind.
    """
    handoff = _Handoff()
    thread = threading.Thread(target=_open_in_thread, args=(net_ns, handoff, protocol), name="nodegc-netns",
                              daemon=True)
    try:
        thread.start()
    except RuntimeError as e:  # no thread can be started
        raise NetlinkError(f"{_where(net_ns)}: cannot start a thread to enter the namespace: {e}") from e
    try:
        thread.join(timeout)
    except BaseException:
        _close(handoff.claim())
        raise
    outcome = handoff.claim()
    if outcome is None:
        raise NetlinkError(f"{_where(net_ns)}: entering the namespace did not finish in time")
    if isinstance(outcome, BaseException):
        raise NetlinkError(f"{_where(net_ns)}: {outcome}") from outcome
    return outcome


class _Handoff:
    """What the namespace thread made, taken by the caller once: after that, the thread keeps nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcome: socket.socket | BaseException | None = None
        self._claimed = False

    def claim(self) -> socket.socket | BaseException | None:
        """The thread's outcome, or None when it has none yet (then it closes what it makes later)."""
        with self._lock:
            self._claimed = True
            outcome, self._outcome = self._outcome, None
            return outcome

    def offer(self, outcome: socket.socket | BaseException) -> None:
        with self._lock:
            if not self._claimed:
                self._outcome = outcome
                return
        _close(outcome)


def _close(outcome: socket.socket | BaseException | None) -> None:
    if isinstance(outcome, socket.socket):
        outcome.close()


def _where(net_ns: Path | NetnsFile) -> str:
    return os.fsdecode(net_ns.path if isinstance(net_ns, NetnsFile) else net_ns)


def _open_in_thread(net_ns: Path | NetnsFile, handoff: _Handoff, protocol: int) -> None:
    try:
        outcome: socket.socket | BaseException = _enter_and_open(net_ns, protocol)
    except BaseException as e:  # handed to the caller, which raises it in its own thread
        outcome = e
    handoff.offer(outcome)


def open_many(paths: Sequence[Path | NetnsFile], *,
              timeout: float = DEFAULT_TIMEOUT) -> list[RtnlSocket | NetlinkError]:
    """A socket in the namespace of each netns file, in order, or why there is none (a `NetnsFile` is
    entered only when it is still what the scan recorded, see `open_netns`).

    One thread enters the namespaces in turn (a thread costs far more than a setns, and a scan may read
    hundreds of namespaces); like `RtnlSocket.open`, it goes back to its own namespace after each one and
    the calling thread never changes namespace. Namespaces not entered within `timeout` fail; a socket
    the thread makes after that it closes itself, so no descriptor is left behind.
    """
    if not paths:
        return []
    try:
        _time_left(timeout, "netlink sockets")
    except NetlinkError as e:
        return [NetlinkError(f"{_where(p)}: {e}") for p in paths]
    batch = _Batch()
    thread = threading.Thread(target=_open_many_in_thread, args=(list(paths), batch), name="nodegc-netns",
                              daemon=True)
    try:
        thread.start()
    except RuntimeError as e:  # no thread can be started
        return [NetlinkError(f"{_where(p)}: cannot start a thread to enter the namespace: {e}") for p in paths]
    try:
        thread.join(timeout)
    except BaseException:
        for outcome in batch.claim():
            _close(outcome)
        raise
    results = batch.claim()
    out: list[RtnlSocket | NetlinkError] = []
    for i, path in enumerate(paths):
        where = _where(path)
        if i >= len(results):
            out.append(NetlinkError(f"{where}: entering the namespace did not finish in time"))
            continue
        outcome = results[i]
        if isinstance(outcome, BaseException):
            error = NetlinkError(f"{where}: {outcome}")
            error.__cause__ = outcome
            out.append(error)
            continue
        try:
            outcome.settimeout(timeout)
            outcome.bind((0, 0))
        except OSError as e:
            outcome.close()
            out.append(NetlinkError(f"cannot bind netlink socket: {e.strerror or e}"))
            continue
        out.append(RtnlSocket(outcome))
    return out


class _Batch:
    """What the namespace thread of `open_many` made so far, taken by the caller once (then the thread
    closes what it makes later and stops)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: list[socket.socket | BaseException] = []
        self._claimed = False

    def claim(self) -> list[socket.socket | BaseException]:
        with self._lock:
            self._claimed = True
            made, self._made = self._made, []
            return made

    def offer(self, outcomes: list[socket.socket | BaseException]) -> bool:
        """False (and every socket closed) once the caller has claimed."""
        with self._lock:
            if not self._claimed:
                self._made.extend(outcomes)
                return True
        for outcome in outcomes:
            _close(outcome)
        return False


def _open_many_in_thread(paths: list[Path | NetnsFile], batch: _Batch) -> None:
    for done, path in enumerate(paths):
        try:
            outcome: socket.socket | BaseException = _enter_and_open(path)
        except BaseException as e:  # handed to the caller, which raises it in its own thread
            outcome = e
        if isinstance(outcome, _Stranded):
            # A thread that could not go back is no longer where it started: it enters nothing more.
            batch.offer([outcome] * (len(paths) - done))
            return
        if not batch.offer([outcome]):
            return


def _enter_and_open(net_ns: Path | NetnsFile, protocol: int = NETLINK_ROUTE) -> socket.socket:
    # the thread's own namespace, to go back to; a thread that could not go back is never used again
    # (`_Stranded`), and the socket is not handed out then
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # O_NONBLOCK: a FIFO at the path does not block the open (setns then refuses it)
        target = open_netns(net_ns)
        try:
            _setns(target, f"cannot enter {_where(net_ns)}")
        finally:
            os.close(target)
        sock: socket.socket | None = None
        try:
            sock = _new_socket(protocol)
        finally:
            try:
                _return(home)
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
        return sock
    finally:
        os.close(home)


class _Stranded(OSError):
    """The thread entered a namespace and could not go back to its own."""


def _return(home: int) -> None:
    try:
        _setns(home, "cannot return to the original namespace")
    except OSError as e:
        raise _Stranded(e.errno, e.strerror) from e


def _setns(fd: int, what: str) -> None:
    setns(fd, CLONE_NEWNET, what=what)


def _message(mtype: int, flags: int, seq: int, body: bytes) -> bytes:
    return _NLMSG_HDR.pack(_NLMSG_HDR.size + len(body), mtype, flags, seq, 0) + body


def _nla(atype: int, payload: bytes) -> bytes:
    size = _NLA_HDR.size + len(payload)
    return _NLA_HDR.pack(size, atype) + payload + b"\0" * (-size % 4)


def _messages(buf: bytearray, size: int) -> list[tuple[int, int, int, int, int]]:
    """(type, flags, seq, payload start, message end) of each message of one datagram."""
    out: list[tuple[int, int, int, int, int]] = []
    off = 0
    hdr = _NLMSG_HDR.size
    while off < size:
        if off + hdr > size:
            raise NetlinkError(f"truncated netlink header at byte {off} of {size}")
        length, mtype, flags, seq, _pid = _NLMSG_HDR.unpack_from(buf, off)
        if length < hdr or off + length > size:
            raise NetlinkError(f"netlink message of length {length} at byte {off} of {size}")
        if seq == 0 and mtype == NLMSG_ERROR:
            _unsolicited_error(buf, off + hdr, off + length)
        out.append((mtype, flags, seq, off + hdr, off + length))
        off += (length + 3) & ~3
    return out


def _unsolicited_error(buf: bytearray, start: int, end: int) -> None:
    """An error under sequence 0 answers no request of ours (they count from 1): the kernel's word about
    the socket itself, such as ENOBUFS after replies were dropped. Whatever was asked may never be
    answered, so the read fails now, with the kernel's reason, instead of waiting for the timeout."""
    _raise_if_error(buf, start, end, "netlink error to no request")
    raise NetlinkError("netlink acknowledgement to no request (sequence 0)")


def _raise_if_error(buf: bytearray, start: int, end: int, what: str) -> None:
    """NLMSG_ERROR and NLMSG_DONE carry a negative errno (0: success) first."""
    if end - start < _I32.size:
        if end == start:
            return  # an empty NLMSG_DONE from an old kernel
        raise NetlinkError(f"{what}: truncated status message")
    (code,) = _I32.unpack_from(buf, start)
    if code < 0:
        err = -code
        raise NetlinkError(f"{what}: {errno.errorcode.get(err, err)} {os.strerror(err)}", code=err)


def _parse_link(buf: bytearray, start: int, end: int) -> RawLink:
    """One link message, the hot loop of a scan. Where its attributes are is taken from the layout of an
    earlier message of the same length whose attribute headers are all the same (one `struct` call reads
    them), else found by walking the attributes (and remembered): the same headers at the same places
    make the walk take the same steps, so it would find the same attributes at the same places."""
    size = end - start
    if size < _IFINFOMSG.size:
        raise NetlinkError("truncated link message header")
    index = _IFINFOMSG.unpack_from(buf, start)[2]
    layout = _LAYOUTS.get(size)
    if layout is None or layout.headers.unpack_from(buf, start) != layout.expected:
        layout = _learn_layout(buf, start, end)
    kind = None
    span = layout.linkinfo
    if span is not None:
        for sub, c, d in _attrs(buf, start + span[0], start + span[1]):
            if sub == IFLA_INFO_KIND:
                kind = _zstring(buf, c, d)
                break
    name, mac, master, link = layout.name, layout.mac, layout.master, layout.link
    netnsid, group = layout.netnsid, layout.group
    return RawLink(
        index,
        _zstring(buf, start + name[0], start + name[1]) if name is not None else None,
        _mac(buf, start + mac[0], start + mac[1]) if mac is not None else None,
        _u32(buf, start + master[0], start + master[1]) if master is not None else None,
        _u32(buf, start + link[0], start + link[1]) if link is not None else None,
        _i32(buf, start + netnsid[0], start + netnsid[1]) if netnsid is not None else None,
        kind,
        _u32(buf, start + group[0], start + group[1]) if group is not None else None,
    )


_Span = tuple[int, int] | None


class _Layout:
    """Where, in link messages of one length, the attributes the reader uses are (payload start and end
    counted from the message's start; the first of each type), and the attribute headers that put them
    there, as `headers` reads them from such a message."""

    __slots__ = ("expected", "group", "headers", "link", "linkinfo", "mac", "master", "name", "netnsid")

    def __init__(self, headers: struct.Struct, expected: tuple[int, ...], spans: dict[int, tuple[int, int]]) -> None:
        self.headers = headers
        self.expected = expected
        self.name: _Span = spans.get(IFLA_IFNAME)
        self.mac: _Span = spans.get(IFLA_ADDRESS)
        self.master: _Span = spans.get(IFLA_MASTER)
        self.link: _Span = spans.get(IFLA_LINK)
        self.netnsid: _Span = spans.get(IFLA_LINK_NETNSID)
        self.group: _Span = spans.get(IFLA_GROUP)
        self.linkinfo: _Span = spans.get(IFLA_LINKINFO)


_LAYOUTS: dict[int, _Layout] = {}
"""By message length. A node's links come in a few shapes: a thousand veths made alike have one."""
_LAYOUTS_MAX = 256


def _learn_layout(buf: bytearray, start: int, end: int) -> _Layout:
    """Walk the attributes of one link message (an attribute that overruns its message fails it) and
    remember their layout for messages of its length."""
    spans: dict[int, tuple[int, int]] = {}
    unpack = _NLA_HDR.unpack_from
    wanted = _LINK_ATTRS
    fmt = [f"={_IFINFOMSG.size}x"]
    expected: list[int] = []
    off = start + _IFINFOMSG.size
    gap = 0
    while off + 4 <= end:
        length, atype = unpack(buf, off)
        if length < 4 or off + length > end:
            raise NetlinkError(f"attribute {atype & _NLA_TYPE_MASK} of length {length} overruns its message")
        fmt.append(f"{gap}xHH" if gap else "HH")
        expected += (length, atype)
        masked = atype & _NLA_TYPE_MASK
        if masked in wanted and masked not in spans:
            spans[masked] = (off + 4 - start, off + length - start)
        step = (length + 3) & ~3
        gap = step - 4
        off += step
    layout = _Layout(struct.Struct("".join(fmt)), tuple(expected), spans)
    if len(_LAYOUTS) >= _LAYOUTS_MAX:
        _LAYOUTS.clear()
    _LAYOUTS[end - start] = layout
    return layout


_LOOPBACK_LOOKUP = (_IFINFOMSG.pack(socket.AF_UNSPEC, 0, LOOPBACK_IFINDEX, 0, 0)
                    + _nla(IFLA_EXT_MASK, _U32.pack(RTEXT_FILTER_SKIP_STATS)))
"""The body of an RTM_GETLINK request for link LOOPBACK_IFINDEX alone."""


def _no_loopback(buf: bytearray, start: int, end: int) -> None:
    """Raise the error answering the lookup of the loopback, unless it says the kernel has no such link
    (then there is nothing to leave out)."""
    try:
        _raise_if_error(buf, start, end, f"link {LOOPBACK_IFINDEX}")
    except NetlinkError as e:
        if e.code not in (errno.ENODEV, errno.ENOENT):
            raise


def _loopback_index(buf: bytearray, start: int, end: int) -> int:
    """The index of the link message answering the lookup of the loopback: LOOPBACK_IFINDEX, or an error
    when the message is about another link or one without IFF_LOOPBACK."""
    if end - start < _IFINFOMSG.size:
        raise NetlinkError("truncated link message header")
    index: int
    flags: int
    _family, _type, index, flags, _change = _IFINFOMSG.unpack_from(buf, start)
    if index != LOOPBACK_IFINDEX or not flags & IFF_LOOPBACK:
        raise NetlinkError(f"link {LOOPBACK_IFINDEX}: the kernel answered with link {index} (flags {flags:#x}), "
                           "not the loopback")
    return index


def _link_target(buf: bytearray, start: int, end: int) -> int | None:
    """IFLA_TARGET_NETNSID of a link message; the walk stops at it (the kernel puts it among the first)."""
    if end - start < _IFINFOMSG.size:
        raise NetlinkError("truncated link message header")
    unpack = _NLA_HDR.unpack_from
    off = start + _IFINFOMSG.size
    while off + 4 <= end:
        length, atype = unpack(buf, off)
        if length < 4 or off + length > end:
            raise NetlinkError(f"attribute {atype & _NLA_TYPE_MASK} of length {length} overruns its message")
        if atype & _NLA_TYPE_MASK == IFLA_TARGET_NETNSID:
            return _i32(buf, off + 4, off + length)
        off += (length + 3) & ~3
    return None


def _parse_nsid(buf: bytearray, start: int, end: int) -> int | NetlinkError:
    try:
        for atype, a, b in _attrs(buf, start + 4, end):  # after struct rtgenmsg, padded to four bytes
            if atype == NETNSA_NSID:
                value = _u32(buf, a, b)
                if value is not None:
                    return value
    except NetlinkError as e:
        return e
    return NetlinkError("netnsid reply without an id")


def _attrs(buf: bytearray, off: int, end: int) -> list[tuple[int, int, int]]:
    """(type, payload start, payload end) of each attribute between off and end."""
    out: list[tuple[int, int, int]] = []
    unpack = _NLA_HDR.unpack_from
    while off + 4 <= end:
        length, atype = unpack(buf, off)
        if length < 4 or off + length > end:
            raise NetlinkError(f"attribute {atype & _NLA_TYPE_MASK} of length {length} overruns its message")
        out.append((atype & _NLA_TYPE_MASK, off + 4, off + length))
        off += (length + 3) & ~3
    return out


def _u32(buf: bytearray, a: int, b: int) -> int | None:
    return int(_U32.unpack_from(buf, a)[0]) if b - a >= 4 else None


def _i32(buf: bytearray, a: int, b: int) -> int | None:
    return int(_I32.unpack_from(buf, a)[0]) if b - a >= 4 else None


def _mac(buf: bytearray, a: int, b: int) -> str | None:
    return buf[a : a + 6].hex(":") if b - a >= 6 else None


def _zstring(buf: bytearray, a: int, b: int) -> str | None:
    try:
        return buf[a:b].strip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        return None


_GROUP_BASE = 0x4E470000
"""Device groups nodegc marks links with right before deleting them together ("NG" and 16 random bits)."""


def delete_together(rtnl: RtnlSocket, links: Sequence[RawLink]) -> list[NetlinkError | None]:
    """Delete these links (as the caller's dump showed them and the caller checked them) in one kernel batch.

    The kernel pays a synchronisation per unregistered batch of devices, a good part of a second for a few
    hundred deleted one by one. So the links are put into a device group no link uses, a fresh dump must
    show exactly them in it with the same name, kind and MAC (an index reused in between is caught here),
    and the group is deleted in one request. Any surprise puts the groups back and deletes nothing: the
    caller reports the failure and the next cycle tries again. None per link where it is gone afterwards.
    """
    if len(links) < 2:
        return rtnl.delete_links([link.index for link in links])
    before, _ = rtnl.dump_links()
    used = {link.group for link in before}
    group = next(g for g in (_GROUP_BASE | secrets.randbelow(0x10000) for _ in range(64)) if g not in used)
    original = {link.index: link.group or 0 for link in before}
    marks = rtnl.set_groups([(link.index, group) for link in links])
    out: list[NetlinkError | None] = list(marks)
    wanted = {link.index: link for link, mark in zip(links, marks, strict=True) if mark is None}
    members, _ = rtnl.dump_links()
    marked = [link for link in members if link.group == group]
    odd = [link for link in marked if (w := wanted.get(link.index)) is None
           or (link.name, link.kind, link.mac) != (w.name, w.kind, w.mac)]
    failure: NetlinkError | None = None
    if odd:
        failure = NetlinkError(f"links changed while they were deleted: {[link.name for link in odd][:3]}")
    elif marked:
        failure = rtnl.delete_group(group)
    if failure is not None:
        rtnl.set_groups([(link.index, original.get(link.index, 0)) for link in marked])
        return [failure if mark is None else mark for mark in out]
    return out  # a link marked and gone before the group delete (its namespace died) is gone all the same


NETLINK_NETFILTER = 12
_NFT_GETGEN = (10 << 8) | 16  # NFNL_SUBSYS_NFTABLES, NFT_MSG_GETGEN
_NFT_NEWGEN = (10 << 8) | 15
_NFTA_GEN_ID = 1
_BE32 = struct.Struct(">I")


def nft_generation(net_ns: Path | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> int | None:
    """The nf_tables ruleset generation of the namespace: the kernel bumps it on every committed change of
    any table of any family, so an unchanged generation means an unchanged ruleset (counters aside). None
    when it cannot be read (no nf_tables, no permission, no time left): the caller must then read the rules."""
    try:
        _time_left(timeout, "nf_tables generation")
        if net_ns is not None:
            sock = _socket_in(net_ns, timeout=timeout, protocol=NETLINK_NETFILTER)
        else:
            sock = _new_socket(NETLINK_NETFILTER)
    except NetlinkError:
        return None
    try:
        sock.settimeout(timeout)
        sock.bind((0, 0))
        sock.sendall(_message(_NFT_GETGEN, NLM_F_REQUEST, 1, b"\0\0\0\0"))
        buf = bytearray(_RECV_BUF)
        size = sock.recv_into(buf, _RECV_BUF)
        for mtype, _flags, seq, start, end in _messages(buf, size):
            if seq == 1 and mtype == _NFT_NEWGEN:
                for atype, a, b in _attrs(buf, start + 4, end):  # after struct nfgenmsg
                    if atype == _NFTA_GEN_ID and b - a >= _BE32.size:
                        return int(_BE32.unpack_from(buf, a)[0])
        return None
    except (OSError, NetlinkError):
        return None
    finally:
        sock.close()
