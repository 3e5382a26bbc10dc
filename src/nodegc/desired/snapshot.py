"""Desired state from a file saved with `kubectl get pods -o json|yaml` (offline runs, audits, tests).

A snapshot is a photograph: its time is the file's modification time (a day-old file is a day old, a file
dated in the future is a broken clock and the engine's staleness guard refuses it), and it must show the
whole node. A single Pod, a page of a paged list, a list that evidently went through a selector or a
phase filter, a list without its `kind` (kubectl writes it after the items: a file cut short), and a file
of nothing but finished pods are refused: what they do not show is not proof that
it is gone. A label-selected or namespace-scoped list carries no mark of its filter (servers stopped
writing `selfLink` in 1.20) and cannot be told from a whole node's list.

The modification time is an upper bound of the capture only while the file is the one the capture wrote:
a copy (`cp` without `-p`) or a kubelet-projected file (a ConfigMap, Secret or projected volume) is newer
than its content. Nothing in a pod list bounds its capture from above; its pods' own times (creation,
status and managed-field times) bound it from below. A projected file is therefore dated by the newest
time its pods carry, never by the kubelet's write; a plain copy cannot be detected (documented).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from nodegc.api.objects import object_resource_version, pod_from_object, resource_version_number
from nodegc.desired.source import FUTURE_TOLERANCE_SECONDS, SourceError
from nodegc.hostio.clock import utcnow
from nodegc.hostio.files import SETTLED_NS
from nodegc.model.pods import DesiredState, OwnerState, Pod
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.snapshot")

_LIST_KINDS = frozenset({"List", "PodList"})
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024
"""A pods file larger than this is refused (a whole cluster's list is a few tens of MiB)."""
_NODE_FIELD = "spec.nodeName"
_PROJECTED_DIR = re.compile(r"^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+$")
"""The kubelet's atomic writer puts a ConfigMap, Secret or projected volume's files in `..<timestamp>`."""


@dataclass(frozen=True)
class _Read:
    state: DesiredState
    stamp: tuple[int, int, int, int, int] | None
    """(device, inode, mtime ns, ctime ns, size) of the file that was parsed; None while its ctime had not
    settled at the read (a rewrite within the same clock tick would keep the stamp), so the next call reads
    the file again."""
    written: datetime
    """Its modification time: it never goes back from one read to the next of the same source."""


@dataclass(frozen=True)
class _Parsed:
    """What a snapshot's bytes say, whatever the file's time: its node's pods and the newest time they carry."""

    digest: bytes
    """SHA-256 of the bytes parsed."""
    node: str
    pods: tuple[Pod, ...]
    newest: datetime | None


class SnapshotSource:
    """A snapshot is all or nothing: one unreadable pod fails the whole fetch, as for the API.

    Photos never go back in time: a fetch or a terminate re-read dated before the photo already used (the
    file replaced by an older copy) is refused, as a list older than one already seen is. A re-read is
    also refused when dated in the future, or about another node than the photo (inferred without --node).
    """

    def __init__(self, path: Path, node: str | None, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.path = path
        self.node = node
        self.name = f"snapshot:{path}"
        self._clock = clock
        self._written: datetime | None = None
        """The file time of the newest photo fetch() handed out: what detect and terminate judged by."""
        self._last: _Read | None = None
        self._parsed: _Parsed | None = None
        """The last parse: a file kept fresh by touching it (its time moves, its bytes stay) is dated anew
        from it, not parsed again."""
        self._warned: tuple[str, ...] = ()
        self._node: str | None = None
        """The node of the photo fetch() handed out (inferred from the file without --node): a re-read about
        another node cannot re-verify it."""

    def fetch(self) -> DesiredState:
        # The file's time, not the read's and not clamped to now: a day-old file must look a day old to the
        # engine's staleness guard, and a file from the future must look like one (the guard refuses both).
        read = self._read()
        if self._written is not None and read.written < self._written:
            raise SourceError(
                f"snapshot {self.path} is now dated {_iso(read.written)}, before the one already read "
                f"({_iso(self._written)}): a file replaced by an older one says nothing about the pods since")
        self._written = read.written
        self._node = read.state.node
        return read.state

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The file as it is now: the freshest a snapshot can be. It is not a live read, which is why the
        engine only acts on a snapshot younger than its staleness limit. The file is parsed again only when
        it changed (device, inode, times or size), not once per item; a re-read older than the photo the
        scan used, or dated in the future, is refused."""
        read = self._current()
        if self._written is not None and read.written < self._written:
            raise SourceError(
                f"snapshot {self.path} re-read at terminate is dated {_iso(read.written)}, before the photo"
                f" the scan used ({_iso(self._written)}): it cannot re-verify what that photo decided")
        if self._node is not None and read.state.node != self._node:
            raise SourceError(
                f"snapshot {self.path} re-read at terminate lists the pods of node {read.state.node}, not of node"
                f" {self._node} the scan used: it cannot re-verify what that photo decided")
        ahead = (max(read.written, read.state.fetched_at) - self._clock()).total_seconds()
        if ahead > FUTURE_TOLERANCE_SECONDS:
            raise SourceError(
                f"snapshot {self.path} re-read at terminate is dated {ahead:.0f}s in the future: a broken clock")
        for pod in read.state.pods:
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None

    def _current(self) -> _Read:
        last = self._last
        if last is not None:
            try:
                st = os.stat(self.path)
            except OSError as e:
                raise SourceError(f"cannot read snapshot {self.path}: {e.strerror or e}") from e
            if _stamp(st) == last.stamp:
                return last
        return self._read()

    def _read(self) -> _Read:
        content, st = _read(self.path)
        written = _mtime(self.path, st)
        parsed, digest = self._parsed, hashlib.sha256(content).digest()
        if parsed is None or parsed.digest != digest:
            parsed = self._parsed = _parse(content, digest=digest, path=self.path, node=self.node)
        state = _dated(parsed, path=self.path, written=written, source=self.name, projected=_projected(self.path))
        if (written - self._clock()).total_seconds() > FUTURE_TOLERANCE_SECONDS:
            # Written by a clock ahead of this one (it stepped back since): a broken clock, whatever the
            # content says; dated so, the engine refuses it.
            state = replace(state, fetched_at=max(written, state.fetched_at))
        if state.warnings != self._warned:
            self._warned = state.warnings
            for warning in state.warnings:
                log.warning("snapshot dating", source=self.name, detail=warning)
        settled = time.time_ns() - st.st_ctime_ns > SETTLED_NS
        self._last = _Read(state, _stamp(st) if settled else None, written)
        return self._last


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds")


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _projected(path: Path) -> bool:
    """Whether the file lives in a kubelet-projected volume (its real path goes through `..<timestamp>`)."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    return any(_PROJECTED_DIR.match(part) for part in Path(real).parts)


def parse_snapshot(content: bytes, *, path: Path, node: str | None, written: datetime, source: str,
                   projected: bool = False) -> DesiredState:
    """The desired state a snapshot's bytes describe, or SourceError: no other exception, whatever the bytes.

    `written` is the file's modification time; `projected` says the file is a kubelet-projected volume's,
    whose modification time is the kubelet's write, not the capture.
    """
    parsed = _parse(content, digest=b"", path=path, node=node)
    return _dated(parsed, path=path, written=written, source=source, projected=projected)


def _parse(content: bytes, *, digest: bytes, path: Path, node: str | None) -> _Parsed:
    """The pods of `node` (inferred when None) the bytes list: a function of the bytes, the path (named in
    errors) and the node alone, so equal bytes parse to equal pods."""
    objects = list(_pod_objects(_load(content, path), path))
    pods: list[Pod] = []
    for index, obj in enumerate(objects):
        try:
            pods.append(pod_from_object(obj))
        except ValueError as e:
            raise SourceError(f"{path}: pod #{index}: {e}") from e
    pods = _once_each(pods, path)
    node = node if node is not None else _infer_node(pods, path)
    mine = tuple(pod for pod in pods if pod.node_name == node)
    if pods and not mine:
        raise SourceError(f"snapshot {path} lists {len(pods)} pods, none of them on node {node}: another node's"
                          " list says nothing about this one; save this node's pods or pass the right --node")
    _refuse_filtered(mine, node, path)
    return _Parsed(digest=digest, node=node, pods=mine, newest=_newest_time(objects))


def _once_each(pods: list[Pod], path: Path) -> list[Pod]:
    """Each UID once. The same entry twice (overlapping lists joined) says nothing new; two different entries
    under one UID are two photographs glued together, whose order would decide the pod's phase and name."""
    first: dict[str, Pod] = {}
    for pod in pods:
        seen = first.setdefault(pod.uid, pod)
        if seen != pod:
            raise SourceError(
                f"snapshot {path} lists pod UID {pod.uid} twice, as {seen.namespace}/{seen.name} ({seen.phase})"
                f" and as {pod.namespace}/{pod.name} ({pod.phase}): a file joined from lists taken at different"
                " times says nothing certain about that pod; save one list of the node's pods")
    return list(first.values()) if len(first) < len(pods) else pods


def _dated(parsed: _Parsed, *, path: Path, written: datetime, source: str, projected: bool) -> DesiredState:
    taken, warnings = _dating(parsed.newest, path=path, written=written, projected=projected)
    return DesiredState(node=parsed.node, pods=parsed.pods, source=source, fetched_at=taken, warnings=warnings)


def _dating(newest: datetime | None, *, path: Path, written: datetime,
            projected: bool) -> tuple[datetime, tuple[str, ...]]:
    """The photo's time: never later than the capture. The modification time bounds the capture from above
    only for the file the capture wrote; the pods' own times (`newest`) bound it from below."""
    if projected:
        if newest is None:
            raise SourceError(
                f"snapshot {path} is a file of a ConfigMap, Secret or projected volume: its modification time"
                " is when the kubelet wrote it, not when the pods were listed, and no pod in it carries a"
                " time that could date it")
        taken = min(newest, written)
        return taken, (f"snapshot {path} is a file of a ConfigMap, Secret or projected volume: its modification"
                       f" time ({_iso(written)}) is the kubelet's write, not the capture; dated by the newest"
                       f" time its pods carry ({_iso(taken)})",)
    if newest is not None and (newest - written).total_seconds() > FUTURE_TOLERANCE_SECONDS:
        return written, (f"snapshot {path} is dated {_iso(written)}, before the newest time its pods carry"
                         f" ({_iso(newest)}): a clock is off or the file's time was set back; its time"
                         " is kept (the older one)",)
    return written, ()


_TIME_FIELDS = ("startedAt", "finishedAt")
_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


def _newest_time(objects: list[Mapping[str, Any]]) -> datetime | None:
    """The newest time the pods themselves carry (creation, managed fields, status): the capture came after
    it. deletionTimestamp is left out: it is a deadline in the future. Unreadable values are skipped."""
    found: list[object] = []
    for obj in objects:
        meta = obj.get("metadata")
        if isinstance(meta, Mapping):
            found.append(meta.get("creationTimestamp"))
            found += [m.get("time") for m in _list(meta.get("managedFields"))]
        status = obj.get("status")
        if not isinstance(status, Mapping):
            continue
        found.append(status.get("startTime"))
        for cond in _list(status.get("conditions")):
            found += [cond.get("lastTransitionTime"), cond.get("lastProbeTime")]
        for key in _STATUS_LISTS:
            for cs in _list(status.get(key)):
                for which in ("state", "lastState"):
                    state = cs.get(which)
                    for detail in (state.values() if isinstance(state, Mapping) else ()):
                        if isinstance(detail, Mapping):
                            found += [detail.get(f) for f in _TIME_FIELDS]
    times = [t for t in map(_time, found) if t is not None]
    return max(times, default=None)


def _list(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _read(path: Path) -> tuple[bytes, os.stat_result]:
    """The content and status of one regular file, read with a bound.

    O_NONBLOCK keeps a FIFO from blocking the open; fstat on the open descriptor makes the type, size and
    time refer to the very file that is read. A symlink is followed (a mounted ConfigMap is one).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise SourceError(f"cannot read snapshot {path}: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"snapshot {path} is not a regular file (a FIFO, device or directory is not read)")
        if st.st_size > MAX_SNAPSHOT_BYTES:
            raise SourceError(f"snapshot {path} is {st.st_size} bytes, above the {MAX_SNAPSHOT_BYTES} byte limit")
        chunks: list[bytes] = []
        remaining = MAX_SNAPSHOT_BYTES + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        if remaining <= 0:
            raise SourceError(f"snapshot {path} grew above the {MAX_SNAPSHOT_BYTES} byte limit while read")
        return b"".join(chunks), st
    except OSError as e:
        raise SourceError(f"cannot read snapshot {path}: {e.strerror or e}") from e
    finally:
        os.close(fd)


def _mtime(path: Path, st: os.stat_result) -> datetime:
    try:
        return datetime.fromtimestamp(st.st_mtime, UTC)
    except (ValueError, OverflowError, OSError) as e:
        raise SourceError(f"snapshot {path} has a modification time out of range ({st.st_mtime:.0f}):"
                          " the clock that wrote it is broken") from e


def _load(content: bytes, path: Path) -> list[Any]:
    """JSON gets its own parser because its errors carry line and column; anything else is YAML.

    Both parsers raise more than their own error type on hostile input: ValueError for an integer of
    thousands of digits or a timestamp out of range, RecursionError for nesting thousands deep.
    """
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SourceError(f"cannot read snapshot {path}: not valid UTF-8 (byte {e.start})") from e
    if text.lstrip().startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as e:
            raise SourceError(
                f"snapshot {path} is not valid JSON: {e.msg} "
                f"at line {e.lineno} column {e.colno} (char {e.pos})"
            ) from e
        except RecursionError as e:
            raise SourceError(f"snapshot {path} is not a pod list: JSON nested too deeply") from e
        except ValueError as e:
            raise SourceError(f"snapshot {path} is not a pod list: {e}") from e
    import yaml  # here: a process that reads no YAML file never holds the parser (about 0.75 MB)

    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise SourceError(f"snapshot {path} is not valid YAML: {problem}{where}") from e
    except RecursionError as e:
        raise SourceError(f"snapshot {path} is not a pod list: YAML nested too deeply") from e
    except (ValueError, TypeError, OverflowError) as e:
        raise SourceError(f"snapshot {path} is not a pod list: {e}") from e


def _pod_objects(documents: list[Any], path: Path) -> Iterator[Mapping[str, Any]]:
    """The items of the one list the file holds. A Pod (`kubectl get pod NAME -o json`), or a stream of
    several documents, can never show that any other pod is absent: refused."""
    if not documents:
        raise SourceError(f"snapshot {path} is empty")
    if len(documents) > 1:
        raise SourceError(
            f"snapshot {path} holds {len(documents)} documents: separate reads, any of which may leave pods"
            f" out; save the node's pods as one list ({_SAVE_HINT})")
    for doc in documents:
        if not isinstance(doc, Mapping):
            found = type(doc).__name__
            raise SourceError(f"snapshot {path}: expected a Pod or a List of Pods, found a {found}")
        kind = doc.get("kind")
        if kind is not None and not isinstance(kind, str):
            raise SourceError(f"snapshot {path}: kind is a {type(kind).__name__}, not a string")
        if kind is None and "items" in doc:
            raise SourceError(
                f"snapshot {path} has items but no kind: kubectl writes `kind: List` after the items, so the"
                " file was cut short (read while written, or a disk that filled) and the pods past the cut"
                f" would look absent; save the list again ({_SAVE_HINT}), to a new file renamed into place")
        if kind in _LIST_KINDS:
            _refuse_partial_list(doc.get("metadata"), path)
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                raise SourceError(f"snapshot {path}: items is not a list")
            for index, item in enumerate(items):
                if not isinstance(item, Mapping) or item.get("kind", "Pod") != "Pod":
                    raise SourceError(f"snapshot {path}: item #{index} is not a Pod")
            _refuse_assembled(doc.get("metadata"), items, path)
            yield from items
        elif kind == "Pod":
            raise SourceError(
                f"snapshot {path} is a single Pod, not a list: one pod cannot show that any other pod is"
                f" absent, so nothing could be concluded from it; save the node's list ({_SAVE_HINT})")
        else:
            raise SourceError(f"snapshot {path}: expected a Pod or a List of Pods, found kind {kind!r}")


_SAVE_HINT = "kubectl get pods -A -o json --field-selector spec.nodeName=<node>"


def _refuse_assembled(meta: object, items: list[Mapping[str, Any]], path: Path) -> None:
    """A server's list (PodList) is one consistent read at its resourceVersion: an item newer than that was
    not in it (the file was put together from several reads). kubectl's own List carries no version."""
    if not isinstance(meta, Mapping):
        return
    number = resource_version_number(meta.get("resourceVersion"))
    if number is None:
        return
    newest = max((n for item in items if (n := object_resource_version(item)) is not None), default=None)
    if newest is not None and newest > number:
        raise SourceError(
            f"snapshot {path} is a list at resourceVersion {number} holding a pod at {newest}: not one read of"
            " the API (put together from several?); save the list again")


def _refuse_partial_list(meta: object, path: Path) -> None:
    """A page of a paged list, or a list whose selfLink shows a selector other than the node's, is not the
    node's desired state: every pod it leaves out would look absent."""
    if meta is None:
        return
    if not isinstance(meta, Mapping):
        raise SourceError(f"snapshot {path}: the list's metadata is a {type(meta).__name__}, not an object")
    token = meta.get("continue")
    remaining = meta.get("remainingItemCount")
    if token not in (None, ""):
        raise SourceError(
            f"snapshot {path} is one page of a paged list (metadata.continue is set): it does not show every"
            " pod; save the whole list (`kubectl get pods -o json` fetches every page, a raw API read with"
            " `limit` does not)")
    if remaining is not None and not (isinstance(remaining, int) and not isinstance(remaining, bool)
                                      and remaining == 0):
        raise SourceError(
            f"snapshot {path} is one page of a paged list (metadata.remainingItemCount is {remaining!r}):"
            " it does not show every pod; save the whole list")
    link = meta.get("selfLink")
    if isinstance(link, str) and link:
        selectors = _foreign_selectors(link)
        if selectors:
            raise SourceError(
                f"snapshot {path} is a filtered list ({'; '.join(selectors)} in metadata.selfLink): it does"
                f" not show every pod of the node; save the list filtered by {_NODE_FIELD} only")


def _foreign_selectors(link: str) -> list[str]:
    """The selector terms of a list's selfLink other than `spec.nodeName=<node>`."""
    try:
        query = parse_qs(urlsplit(link).query, keep_blank_values=True)
    except ValueError:
        return [f"an unreadable selfLink {link[:120]!r}"]
    found: list[str] = []
    for term in (t for v in query.get("labelSelector", []) for t in v.split(",") if t):
        found.append(f"label selector {term!r}")
    for term in (t for v in query.get("fieldSelector", []) for t in v.split(",") if t):
        name, _, _ = term.partition("=")
        if name not in (_NODE_FIELD, _NODE_FIELD + "="):
            found.append(f"field selector {term!r}")
    return found


def _refuse_filtered(mine: tuple[Pod, ...], node: str, path: Path) -> None:
    """A node's pods that are all finished, or all in one phase other than Running, are what a phase filter
    (`--field-selector status.phase=...`) prints, not a node: a node runs its daemons."""
    if not mine:
        return
    if all(p.state is OwnerState.TERMINAL for p in mine):
        raise SourceError(
            f"snapshot {path} lists only finished pods for node {node} ({len(mine)}, all Succeeded or Failed):"
            " it looks filtered by phase, and the running pods it leaves out would look absent; save every"
            " pod of the node")
    phases = {p.phase for p in mine}
    if len(mine) > 1 and len(phases) == 1 and (phase := next(iter(phases))) not in (None, "Running"):
        raise SourceError(
            f"snapshot {path} lists {len(mine)} pods for node {node}, all in phase {phase}: it looks"
            " filtered by phase; save every pod of the node")


def _infer_node(pods: list[Pod], path: Path) -> str:
    nodes = sorted({pod.node_name for pod in pods if pod.node_name})
    if len(nodes) == 1:
        if all(pod.state is OwnerState.TERMINAL for pod in pods):
            raise SourceError(
                f"snapshot {path} has only finished pods (Succeeded or Failed): they do not tell which node"
                " it is about (another node's finished Jobs look the same); pass --node")
        return nodes[0]
    if not nodes:
        raise SourceError(f"snapshot {path} has no pod bound to a node; pass --node")
    shown = ", ".join(nodes[:5]) + (", ..." if len(nodes) > 5 else "")
    raise SourceError(f"snapshot {path} has pods on {len(nodes)} nodes ({shown}); pass --node")
