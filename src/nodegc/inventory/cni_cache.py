"""libcni result cache: `<cni data>/results/<net>-<cid>-<ifname>`, written by the runtime at CNI ADD.

The cache is what ties a container id (the one in an IP reservation) to a pod UID and a netns, and it keeps
the exact network configuration a CNI DEL needs. libcni writes it non-atomically, so truncated files are
expected after a crash; each one becomes a ReadProblem, never a guess.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import sys
from pathlib import Path
from typing import Any

from nodegc.hostio.cni_files import CACHE_KIND, MAX_CACHE_BYTES
from nodegc.hostio.files import (
    FileMemo,
    FileReadError,
    Shared,
    irregular,
    list_top_dir,
    os_reason,
    read_small_file,
    symlink_reason,
)
from nodegc.model.addresses import interface_ip
from nodegc.model.resources import CNICacheEntry, Kind, ReadProblem

_POD_ARGS = {
    "K8S_POD_NAMESPACE": "pod_namespace",
    "K8S_POD_NAME": "pod_name",
    "K8S_POD_UID": "pod_uid",
    "K8S_POD_INFRA_CONTAINER_ID": "infra_container_id",
}


def _load(content: bytes) -> dict[str, Any]:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not valid UTF-8 (byte {e.start})") from e
    try:
        doc = json.loads(text)
    except RecursionError as e:  # a corrupt file of nested brackets must not take the whole scan down
        raise ValueError("JSON nested too deeply") from e
    except json.JSONDecodeError as e:
        if not text.strip():
            raise ValueError("empty file") from e
        if _cut_off(text, e):
            # Cut off mid-write: say where the data stops, which is what a reader of the file can check.
            raise ValueError(f"truncated JSON at char {len(text)}") from e
        raise ValueError(f"malformed JSON at char {e.pos}: {e.msg}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"top level is {type(doc).__name__}, not an object")
    if "\\u" in text:
        # An escape such as "\\ud800" decodes to a lone surrogate, which no ledger, log or terminal can carry.
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError("a string is not valid Unicode text (a lone surrogate escape)") from e
    return doc


def _cut_off(text: str, e: json.JSONDecodeError) -> bool:
    """Whether the document is a prefix of valid JSON rather than wrong in the middle (best effort)."""
    body = text.rstrip()
    rest = body[e.pos :]
    if not rest or e.msg.startswith("Unterminated string"):
        return True
    if any(word != rest and word.startswith(rest) for word in ("true", "false", "null")):
        return True
    return e.pos == len(body) - 1 and body[-1] in ".eE+-"


def _required_str(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"missing or empty {key!r}")
    return value


_OWN_ARGS = frozenset({"K8S_POD_NAME", "K8S_POD_UID", "K8S_POD_INFRA_CONTAINER_ID"})
"""cniArgs whose value is each pod's own: not worth sharing between entries."""


def _cni_args(raw: object, shared: Shared) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("cniArgs is not a list")
    pairs: list[tuple[str, str]] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise ValueError(f"cniArgs entry {item!r} is not a [key, value] pair of strings")
        key = shared.text(item[0])
        pairs.append((key, sys.intern(item[1])) if key in _OWN_ARGS else shared.pair((key, item[1])))
    return tuple(pairs)


def _address(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"result address {value!r} is not a string")
    try:
        return interface_ip(value)
    except ValueError as e:
        raise ValueError(f"result address {value!r} is not an IP address") from e


def _result_ips(result: object) -> tuple[str, ...]:
    """Addresses from a current result (`ips[].address`) or a pre-0.3.0 one (`ip4.ip`, `ip6.ip`)."""
    if result is None:
        return ()
    if not isinstance(result, dict):
        raise ValueError("result is not an object")
    ips: list[str] = []
    entries = result.get("ips") or []
    if not isinstance(entries, list):
        raise ValueError("result.ips is not a list")
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError("result.ips entry is not an object")
        ips.append(_address(entry.get("address")))
    for legacy in ("ip4", "ip6"):
        block = result.get(legacy)
        if isinstance(block, dict) and "ip" in block:
            ips.append(_address(block["ip"]))
    return tuple(dict.fromkeys(ips))


def _config(raw: object) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValueError("config is not a base64 string")
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as e:
        raise ValueError(f"bad base64 in config: {e}") from e


def parse_cache_entry(path: str, content: bytes, *, inode: int, mtime: float,
                      shared: Shared | None = None) -> CNICacheEntry:
    """Strict on purpose: an entry that is not exactly what libcni writes is no evidence of ownership.

    `shared` (the scan's): equal strings and argument pairs of other entries, taken instead of this entry's
    own copies (every entry of a network carries the same configuration, a kilobyte or more).
    """
    share = Shared() if shared is None else shared
    doc = _load(content)
    kind = doc.get("kind")
    if kind != CACHE_KIND:
        raise ValueError(f"kind is {kind!r}, not {CACHE_KIND!r}")
    # Interned: the ids, names and paths other readers' records, the pods and the findings also hold.
    container_id = sys.intern(_required_str(doc, "containerId"))
    network = _required_str(doc, "networkName")
    ifname = _required_str(doc, "ifName")
    netns = doc.get("netns")
    if netns is not None and not isinstance(netns, str):
        raise ValueError("netns is not a string")
    args = _cni_args(doc.get("cniArgs"), share)
    pod: dict[str, str] = {}
    for key, value in args:  # later keys win, as they do when libcni builds CNI_ARGS
        if key in _POD_ARGS:
            pod[_POD_ARGS[key]] = value
    capability_args = doc.get("capabilityArgs")
    config = _config(doc.get("config"))
    capabilities = None if capability_args is None else json.dumps(capability_args, sort_keys=True)
    return CNICacheEntry(
        path=path,
        inode=inode,
        mtime=mtime,
        network=share.text(network),
        container_id=container_id,
        ifname=share.text(ifname),
        netns=sys.intern(netns) if netns else None,
        pod_namespace=pod.get("pod_namespace") or None,
        pod_name=pod.get("pod_name") or None,
        pod_uid=pod.get("pod_uid") or None,
        infra_container_id=_same(pod.get("infra_container_id") or None, container_id),
        ips=_result_ips(doc.get("result")),
        cni_args=args,
        config_json=None if config is None else share.text(config),
        capability_args_json=None if capabilities is None else share.text(capabilities),
    )


def _same(value: str | None, other: str) -> str | None:
    """`other` when equal to `value` (the sandbox's own id, named twice in an entry): one string kept."""
    return other if value == other else value


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def scan_cni_cache(cni_data_dir: Path) -> tuple[tuple[CNICacheEntry, ...], tuple[ReadProblem, ...]]:
    results_path = os.path.join(os.fsdecode(cni_data_dir), "results")
    entries, problem = list_top_dir(results_path, kind=Kind.CNI_CACHE)
    problems: list[ReadProblem] = [problem] if problem else []
    found: list[CNICacheEntry] = []
    shared = Shared()
    for entry in entries:
        try:
            if entry.is_symlink():
                problems.append(ReadProblem(Kind.CNI_CACHE, entry.path, symlink_reason(entry.path)))
                continue
            if entry.is_dir(follow_symlinks=False):
                continue
        except OSError as e:
            problems.append(ReadProblem(Kind.CNI_CACHE, entry.path, str(e)))
            continue
        if (why := irregular(entry)) is not None:
            problems.append(ReadProblem(Kind.CNI_CACHE, entry.path, why))
            continue
        if not entry.name.isascii() and not _utf8(entry.name):
            # libcni names entries <network>-<container id>-<ifname>; no such name is other than UTF-8.
            shown = os.fsencode(entry.path).decode("utf-8", "backslashreplace")
            problems.append(ReadProblem(Kind.CNI_CACHE, shown, "file name is not valid UTF-8, not read"))
            continue
        try:
            known = _PARSED.get(entry.path, entry.stat(follow_symlinks=False))
            if known is not None:
                found.append(known)
                _share_with(shared, known)
                continue
            small = read_small_file(entry.path, limit=MAX_CACHE_BYTES)
            parsed = parse_cache_entry(entry.path, small.content, inode=small.inode, mtime=small.mtime,
                                       shared=shared)
            _PARSED.put(entry.path, small, parsed)
            found.append(parsed)
        except (FileReadError, ValueError) as e:
            problems.append(ReadProblem(Kind.CNI_CACHE, entry.path, str(e)))
        except OSError as e:
            problems.append(ReadProblem(Kind.CNI_CACHE, entry.path, os_reason(e)))
    _PARSED.end_scan()
    return tuple(found), tuple(problems)


def _share_with(shared: Shared, entry: CNICacheEntry) -> None:
    """A remembered entry's configuration is what an entry parsed later in the scan takes (its other
    shared parts are small); without it, each entry written after the scan that parsed the others would
    keep a copy of its own."""
    if entry.config_json is not None:
        shared.text(entry.config_json)


_PARSED: FileMemo[CNICacheEntry] = FileMemo()
"""Entries parsed by earlier scans of this process, taken again while their file's stamp is unchanged."""


def forget_parsed_entries() -> None:
    """Forget every remembered parse: the next scan reads every entry (a process's first scan)."""
    _PARSED.clear()
