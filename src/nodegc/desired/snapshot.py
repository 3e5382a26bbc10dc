"""Desired state from a file saved with `kubectl get pods -o json|yaml` (offline runs, audits, tests).

A snapshot is a photograph: its time is the file's modification time (a day-old file is a day old, a file
dated in the future is a broken clock and the engine's staleness guard refuses it), and it must show the
whole node. A page of a paged list, a list that evidently went through a selector or a phase filter, and
a file of nothing but finished pods are refused: what they do not show is not proof that it is gone.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from nodegc.api.objects import pod_from_object
from nodegc.desired.source import SourceError
from nodegc.hostio.clock import utcnow
from nodegc.model.pods import DesiredState, OwnerState, Pod

_LIST_KINDS = frozenset({"List", "PodList"})
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024
"""A pods file larger than this is refused (a whole cluster's list is a few tens of MiB)."""
_NODE_FIELD = "spec.nodeName"


class SnapshotSource:
    """A snapshot is all or nothing: one unreadable pod fails the whole fetch, as for the API."""

    def __init__(self, path: Path, node: str | None, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.path = path
        self.node = node
        self.name = f"snapshot:{path}"
        self._clock = clock

    def fetch(self) -> DesiredState:
        # The file's time, not the read's and not clamped to now: a day-old file must look a day old to the
        # engine's staleness guard, and a file from the future must look like one (the guard refuses both).
        content, written = _read(self.path)
        return parse_snapshot(content, path=self.path, node=self.node, written=written, source=self.name)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """Re-reads the file: the freshest a snapshot can be. It is not a live read, which is why the
        engine only acts on a snapshot younger than its staleness limit."""
        for pod in self.fetch().pods:
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None


def parse_snapshot(content: bytes, *, path: Path, node: str | None, written: datetime, source: str) -> DesiredState:
    """The desired state a snapshot's bytes describe, or SourceError: no other exception, whatever the bytes."""
    objects = list(_pod_objects(_load(content, path), path))
    pods: list[Pod] = []
    for index, obj in enumerate(objects):
        try:
            pods.append(pod_from_object(obj))
        except ValueError as e:
            raise SourceError(f"{path}: pod #{index}: {e}") from e
    node = node if node is not None else _infer_node(pods, path)
    mine = tuple(pod for pod in pods if pod.node_name == node)
    if pods and not mine:
        raise SourceError(f"snapshot {path} lists {len(pods)} pods, none of them on node {node}: another node's"
                          " list says nothing about this one; save this node's pods or pass the right --node")
    _refuse_filtered(mine, node, path)
    return DesiredState(node=node, pods=mine, source=source, fetched_at=written)


def _read(path: Path) -> tuple[bytes, datetime]:
    """The content and modification time of one regular file, read with a bound.

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
        try:
            written = datetime.fromtimestamp(st.st_mtime, UTC)
        except (ValueError, OverflowError) as e:
            raise SourceError(f"snapshot {path} has a modification time out of range ({st.st_mtime:.0f}):"
                              " the clock that wrote it is broken") from e
        return b"".join(chunks), written
    except OSError as e:
        raise SourceError(f"cannot read snapshot {path}: {e.strerror or e}") from e
    finally:
        os.close(fd)


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
    if not documents:
        raise SourceError(f"snapshot {path} is empty")
    for doc in documents:
        if not isinstance(doc, Mapping):
            found = type(doc).__name__
            raise SourceError(f"snapshot {path}: expected a Pod or a List of Pods, found a {found}")
        kind = doc.get("kind")
        if kind is not None and not isinstance(kind, str):
            raise SourceError(f"snapshot {path}: kind is a {type(kind).__name__}, not a string")
        if kind in _LIST_KINDS or (kind is None and "items" in doc):
            _refuse_partial_list(doc.get("metadata"), path)
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                raise SourceError(f"snapshot {path}: items is not a list")
            for index, item in enumerate(items):
                if not isinstance(item, Mapping) or item.get("kind", "Pod") != "Pod":
                    raise SourceError(f"snapshot {path}: item #{index} is not a Pod")
                yield item
        elif kind == "Pod":
            yield doc
        else:
            raise SourceError(f"snapshot {path}: expected a Pod or a List of Pods, found kind {kind!r}")


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
