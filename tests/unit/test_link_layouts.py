"""A link message parsed through a remembered layout (`netlink._parse_link`) reads what a walk of its
attributes reads, whatever layouts messages of the same length left behind: same length, other headers
(another attribute order, a longer name and a shorter alias, a wanted attribute swapped for another, a
nested flag set, an overrun), in any order."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.hostio import netlink
from nodegc.hostio.netlink import NetlinkError, RawLink, _parse_link

_HDR = struct.Struct("=HH")
_INFO = struct.Struct("=BxHiII")


def _walked(buf: bytearray, start: int, end: int) -> RawLink:
    """The reader as it was: every attribute walked, the first of each wanted type kept."""
    if end - start < _INFO.size:
        raise NetlinkError("truncated link message header")
    index = _INFO.unpack_from(buf, start)[2]
    found: dict[int, tuple[int, int]] = {}
    off = start + _INFO.size
    while off + 4 <= end:
        length, atype = _HDR.unpack_from(buf, off)
        if length < 4 or off + length > end:
            raise NetlinkError(f"attribute {atype & 0x3FFF} of length {length} overruns its message")
        atype &= 0x3FFF
        if atype in netlink._LINK_ATTRS and atype not in found:
            found[atype] = (off + 4, off + length)
        off += (length + 3) & ~3
    kind = None
    if (span := found.get(netlink.IFLA_LINKINFO)) is not None:
        for sub, c, d in netlink._attrs(buf, *span):
            if sub == netlink.IFLA_INFO_KIND:
                kind = netlink._zstring(buf, c, d)
                break

    def get(atype: int, decode: object) -> object:
        span = found.get(atype)
        return decode(buf, *span) if span is not None else None  # type: ignore[operator]

    return RawLink(index, get(netlink.IFLA_IFNAME, netlink._zstring), get(netlink.IFLA_ADDRESS, netlink._mac),  # type: ignore[arg-type]
                   get(netlink.IFLA_MASTER, netlink._u32), get(netlink.IFLA_LINK, netlink._u32),  # type: ignore[arg-type]
                   get(netlink.IFLA_LINK_NETNSID, netlink._i32), kind,  # type: ignore[arg-type]
                   get(netlink.IFLA_GROUP, netlink._u32))  # type: ignore[arg-type]


def _attr(atype: int, payload: bytes) -> bytes:
    return _HDR.pack(4 + len(payload), atype) + payload + b"\0" * (-(4 + len(payload)) % 4)


_TYPES = [1, 3, 5, 10, 18, 27, 37, 4, 13, 26, 3 | 0x8000, 18 | 0x8000, 1 | 0x4000]
_payloads = st.one_of(st.binary(max_size=12), st.sampled_from([b"veth0\0", b"eth0\0", b"\x01\0\0\0",
                                                              _attr(1, b"veth\0") + _attr(2, b"x" * 8)]))
_attrs = st.lists(st.tuples(st.sampled_from(_TYPES), _payloads), max_size=10)


def _message(index: int, attrs: list[tuple[int, bytes]], *, bad_length: int | None) -> bytes:
    body = b"".join(_attr(t, p) for t, p in attrs)
    if bad_length is not None and body:
        body = _HDR.pack(bad_length, 3) + body[4:]  # the first header lies about its length
    return _INFO.pack(0, 1, index, 0, 0) + body


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10_000), _attrs, st.one_of(st.none(), st.integers(0, 300))),
                min_size=1, max_size=12),
       st.integers(0, 8))
def test_parsed_through_layouts_as_walked(messages: list[tuple[int, list[tuple[int, bytes]], int | None]],
                                          pad_to: int) -> None:
    netlink._LAYOUTS.clear()
    raw = [_message(index, attrs, bad_length=bad) for index, attrs, bad in messages]
    # Messages of one length with other headers: pad each body to a common length with an unknown attribute.
    longest = max(len(m) for m in raw) + 4 * pad_to
    raw += [m + _attr(99, b"\0" * (longest - len(m) - 4)) for m in raw if longest - len(m) >= 4]
    for message in raw + raw[::-1]:
        buf = bytearray(b"\xee" * 3 + message + b"\xee" * 5)  # the message amid other bytes
        start, end = 3, 3 + len(message)
        try:
            want: RawLink | str = _walked(buf, start, end)
        except NetlinkError as e:
            want = str(e)
        try:
            got: RawLink | str = _parse_link(buf, start, end)
        except NetlinkError as e:
            got = str(e)
        assert got == want


def test_the_same_length_with_another_name_is_read_afresh() -> None:
    netlink._LAYOUTS.clear()
    one = _message(7, [(3, b"veth12345678\0"), (1, b"\xaa" * 6), (37, b"\x05\0\0\0")], bad_length=None)
    two = _message(8, [(3, b"eth0\0"), (4, b"x" * 4), (1, b"\xbb" * 6), (37, b"\x06\0\0\0")], bad_length=None)
    assert len(one) == len(two)
    first, second = _parse_link(bytearray(one), 0, len(one)), _parse_link(bytearray(two), 0, len(two))
    assert (first.name, first.mac, first.link_netnsid) == ("veth12345678", "aa:aa:aa:aa:aa:aa", 5)
    assert (second.name, second.mac, second.link_netnsid) == ("eth0", "bb:bb:bb:bb:bb:bb", 6)
    assert _parse_link(bytearray(one), 0, len(one)) == first
