"""Desired state from a file saved with `kubectl get pods -o json|yaml` (offline runs, audits, tests)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from nodegc.api.objects import pod_from_object
from nodegc.desired.source import SourceError
from nodegc.hostio.clock import utcnow
from nodegc.model.pods import DesiredState, Pod

_LIST_KINDS = frozenset({"List", "PodList"})


class SnapshotSource:
    """A snapshot is all or nothing: one unreadable pod fails the whole fetch, as for the API."""

    def __init__(self, path: Path, node: str | None, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.path = path
        self.node = node
        self.name = f"snapshot:{path}"
        self._clock = clock

    def fetch(self) -> DesiredState:
        # A snapshot is as fresh as the file, not as the read: a day-old file must look a day old to
        # the engine's staleness guard, or every pod created since would look like residue.
        fetched_at = self._clock()
        try:
            written = datetime.fromtimestamp(self.path.stat().st_mtime, UTC)
        except OSError as e:
            raise SourceError(f"{self.path}: cannot read: {e.strerror or e}") from e
        fetched_at = min(fetched_at, written)
        objects = list(_pod_objects(_load(self.path), self.path))
        pods: list[Pod] = []
        for index, obj in enumerate(objects):
            try:
                pods.append(pod_from_object(obj))
            except ValueError as e:
                raise SourceError(f"{self.path}: pod #{index}: {e}") from e
        node = self.node if self.node is not None else _infer_node(pods, self.path)
        mine = tuple(pod for pod in pods if pod.node_name == node)
        return DesiredState(node=node, pods=mine, source=self.name, fetched_at=fetched_at)


    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """Re-reads the file: the freshest a snapshot can be. It is not a live read, which is why the
        engine only acts on a snapshot younger than its staleness limit."""
        for pod in self.fetch().pods:
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None


def _load(path: Path) -> list[Any]:
    """JSON gets its own parser because its errors carry line and column; anything else is YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"cannot read snapshot {path}: {e}") from e
    if text.lstrip().startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as e:
            raise SourceError(
                f"snapshot {path} is not valid JSON: {e.msg} "
                f"at line {e.lineno} column {e.colno} (char {e.pos})"
            ) from e
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise SourceError(f"snapshot {path} is not valid YAML: {problem}{where}") from e


def _pod_objects(documents: list[Any], path: Path) -> Iterator[Mapping[str, Any]]:
    if not documents:
        raise SourceError(f"snapshot {path} is empty")
    for doc in documents:
        if not isinstance(doc, Mapping):
            found = type(doc).__name__
            raise SourceError(f"snapshot {path}: expected a Pod or a List of Pods, found a {found}")
        kind = doc.get("kind")
        if kind in _LIST_KINDS or (kind is None and "items" in doc):
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


def _infer_node(pods: list[Pod], path: Path) -> str:
    nodes = sorted({pod.node_name for pod in pods if pod.node_name})
    if len(nodes) == 1:
        return nodes[0]
    if not nodes:
        raise SourceError(f"snapshot {path} has no pod bound to a node; pass --node")
    shown = ", ".join(nodes[:5]) + (", ..." if len(nodes) > 5 else "")
    raise SourceError(f"snapshot {path} has pods on {len(nodes)} nodes ({shown}); pass --node")
