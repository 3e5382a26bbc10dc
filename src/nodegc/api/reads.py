"""The two reads under every desired state and cache: a whole list (paged) and a live GET of one object.

One home for both, so the one-shot list (`desired.kube`), the watch caches (`api.reflector`) and the
controller's EndpointSlice sweeper (`kube.endpointslices`, when it lists instead of using its caches) page
the same way and turn objects into the same plain JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightkube

from nodegc.api.errors import KubeError, call, get_or_none

CHUNK_SIZE = 500
"""Objects per page of a list (`limit`); the continue token keeps every page at the first one's version."""


def list_all(
    client: lightkube.Client,
    resource: type[Any],
    *,
    what: str,
    fields: Mapping[str, str] | None = None,
    timeout: float | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[list[dict[str, Any]], str | None]:
    """Every object of `resource` in all namespaces (paged by `chunk_size`, filtered by `fields` on the
    server), and the resourceVersion of that consistent list.

    No resourceVersion is sent, so the API server answers from a quorum read (never its possibly lagging
    watch cache). Any failure on any page raises KubeError: a partial list would make the missing objects
    look gone; so does a continue token the server no longer knows (410 Gone on a later page: the list
    cannot be finished at the first page's version, and is not finished at another). Pages at different
    resourceVersions (a lagging cache or proxy that answered some, the store the others) are no one list
    either: what was created in between and sorts into an older page is missing, while the list would
    report its last page's, newer, version.
    """

    def fetch() -> tuple[list[dict[str, Any]], str | None]:
        items = client.list(resource, namespace=lightkube.ALL_NS, chunk_size=chunk_size,
                            fields=dict(fields) if fields else None)
        objects: list[dict[str, Any]] = []
        first: str | None = None
        for item in items:
            page = _page_version(items)
            if first is None:
                first = page
            elif page != first:
                raise _mixed(what, first, page)
            objects.append(plain(item))
        rv = _page_version(items)  # the last page's (an empty first page without metadata: None)
        if first is not None and rv != first:
            raise _mixed(what, first, rv)
        return objects, rv

    return call(what, fetch, timeout=timeout)


def _page_version(items: Any) -> str | None:
    try:
        rv: str = items.resourceVersion
    except lightkube.NotReadyError:
        return None
    return rv


def _mixed(what: str, first: str | None, later: str | None) -> KubeError:
    return KubeError(f"{what}: its pages are at resourceVersion {first} and {later}, not one list (a lagging "
                     "cache or proxy answered part of it)")


def get_live(client: lightkube.Client, resource: type[Any], *, namespace: str, name: str,
             what: str) -> dict[str, Any] | None:
    """A live GET of one object as JSON (None on 404; KubeError otherwise): a fresh read, never a cache."""
    obj = get_or_none(what, lambda: client.get(resource, name=name, namespace=namespace))
    return None if obj is None else plain(obj)


def plain(item: Any) -> dict[str, Any]:
    """A typed lightkube object, or a generic resource (a dict whose metadata may be a model), as JSON."""
    to_dict = getattr(item, "to_dict", None)
    if callable(to_dict) and not isinstance(item, dict):
        as_dict: dict[str, Any] = to_dict()
        return as_dict
    as_dict = dict(item)
    meta = as_dict.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        as_dict["metadata"] = meta.to_dict()
    return as_dict
