"""The two reads under every desired state and cache: a whole list (paged) and a live GET of one object.

One home for both, so the one-shot list (`desired.kube`), the watch caches (`api.reflector`) and the
controller's EndpointSlice sweeper (`kube.endpointslices`, when it lists instead of using its caches) page
the same way and turn objects into the same plain JSON.

The requests are lightkube's (`api.streaming.RawReads`: its client, URLs, auth and errors); the bodies are
decoded here, straight from the bytes into `shape` (msgspec): for pods `api.objects.POD_FIELDS`, only
the fields nodegc reads, so a page of pods costs those fields rather than lightkube's typed model of every
field and then a dict of each. The default shape is the whole object (an EndpointSlice is patched back
with fields no model here knows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypedDict, TypeVar
from urllib.parse import quote

import lightkube
import msgspec
from lightkube.core.selector import build_selector

from nodegc.api.errors import KubeError, call
from nodegc.api.streaming import RawReads

CHUNK_SIZE = 500
"""Objects per page of a list (`limit`); the continue token keeps every page at the first one's version."""

WHOLE: Any = dict[str, Any]
"""The shape of an object kept whole (every field, as the API sent it). Every shape is an object at the
top (a list item or a GET that is not one is a malformed answer, as it was to lightkube)."""

_ListMeta = TypedDict("_ListMeta", {"resourceVersion": str | None, "continue": str | None,
                                   "remainingItemCount": int | None}, total=False)
"""A list's metadata, checked as lightkube checks it (strings or null; the count of objects still to come an
integer or null)."""

T = TypeVar("T")


class _Page(msgspec.Struct, Generic[T]):
    """A page of a list: `items` required (as lightkube requires it), its metadata optional; anything else
    (not an object, items not a list of objects) is a malformed answer."""

    items: list[T]
    metadata: _ListMeta | None = None


_decoders: dict[Any, tuple[msgspec.json.Decoder[_Page[Any]], msgspec.json.Decoder[Any]]] = {}


def _decoders_of(shape: Any) -> tuple[msgspec.json.Decoder[_Page[Any]], msgspec.json.Decoder[Any]]:
    """(page decoder, object decoder) for `shape`, built once."""
    found = _decoders.get(shape)
    if found is None:
        found = (msgspec.json.Decoder(_Page[shape]), msgspec.json.Decoder(shape))
        _decoders[shape] = found
    return found


MAX_PAGES = 10_000
"""Pages one list may take: a server or proxy that hands out a new continue token with every page, at one
resourceVersion, would otherwise be followed forever (500 objects a page: 5 million objects)."""


def list_all(
    client: lightkube.Client,
    resource: type[Any],
    *,
    what: str,
    fields: Mapping[str, str] | None = None,
    timeout: float | None = None,
    chunk_size: int = CHUNK_SIZE,
    shape: Any = WHOLE,
) -> tuple[list[dict[str, Any]], str | None]:
    """Every object of `resource` in all namespaces (paged by `chunk_size`, filtered by `fields` on the
    server) decoded into `shape`, and the resourceVersion of that consistent list.

    No resourceVersion is sent, so the API server answers from a quorum read (never its possibly lagging
    watch cache). Any failure on any page raises KubeError: a partial list would make the missing objects
    look gone; so does a continue token the server no longer knows (410 Gone on a later page: the list
    cannot be finished at the first page's version, and is not finished at another). Pages at different
    resourceVersions (a lagging cache or proxy that answered some, the store the others) are no one list
    either: what was created in between and sorts into an older page is missing, while the list would
    report its last page's, newer, version. Every page is compared, an empty one too. A page that ends the
    list (no continue token) while it counts objects still to come (`remainingItemCount`) is a list cut short,
    and a continue token handed out a second time (a proxy that ignores `continue` answers the same page
    again) would be followed forever: both raise.
    """
    pages, _ = _decoders_of(shape)
    params: dict[str, Any] = {"limit": chunk_size,
                              "fieldSelector": build_selector(dict(fields), for_fields=True) if fields else None}

    def fetch() -> tuple[list[dict[str, Any]], str | None]:
        reads = RawReads(client)
        objects: list[dict[str, Any]] = []
        first: str | None = None
        tokens: set[str] = set()
        index = 0
        while True:
            with reads.list_page(resource, namespace=lightkube.ALL_NS, params=params) as body:
                page = pages.decode(body.view())
            meta = page.metadata or {}
            rv = meta.get("resourceVersion") or None
            if index == 0:
                first = rv
            elif rv != first:
                raise _mixed(what, first, rv)
            objects.extend(page.items)
            token = meta.get("continue")
            if not token:
                remaining = meta.get("remainingItemCount")
                if remaining:
                    raise KubeError(f"{what}: its last page says {remaining} more objects remain but gives no "
                                    "continue token: a list cut short")
                return objects, first
            if token in tokens:
                raise KubeError(f"{what}: page {index + 1} hands out a continue token given before (the server "
                                "or a proxy ignores continue): the list would never end")
            if index + 1 >= MAX_PAGES:
                raise KubeError(f"{what}: still handing out continue tokens after {MAX_PAGES} pages: a list "
                                "that would never end")
            tokens.add(token)
            params["continue"] = token
            index += 1

    return call(what, fetch, timeout=timeout)


def _mixed(what: str, first: str | None, later: str | None) -> KubeError:
    return KubeError(f"{what}: its pages are at resourceVersion {first} and {later}, not one list (a lagging "
                     "cache or proxy answered part of it)")


def get_live(client: lightkube.Client, resource: type[Any], *, namespace: str, name: str,
             what: str, shape: Any = WHOLE) -> dict[str, Any] | None:
    """A live GET of one object decoded into `shape` (None when the API server says it does not exist;
    KubeError otherwise): a fresh read, never a cache.

    The API server's NotFound names the object (details.name); a 404 that does not (a path the server or a
    proxy in front of it does not serve, an HTML error page) says nothing about this object, and would read
    as its absence: it raises (KubeError without a code).

    The namespace and the name are each one segment of the path, escaped: a name taken from the node or from
    another object (a sandbox's metadata, a cache entry's K8S_POD_NAME, a targetRef) is checked by nobody, and
    `web#1`, `web?x` or `web/status` put there as they are ask about pod `web`. A name holding `/`, or `.` or
    `..`, cannot be one segment (the API server splits its decoded path; the client normalizes dot segments),
    and no object is called so (the API server refuses them as names): None without a request. An answer
    about another object than the one asked for is no answer (KubeError)."""
    if not _one_segment(namespace) or not _one_segment(name):
        return None
    _, one = _decoders_of(shape)
    segment_ns, segment = quote(namespace, safe=""), quote(name, safe="")
    try:
        obj: dict[str, Any] = call(what, lambda: one.decode(RawReads(client).get(resource, namespace=segment_ns,
                                                                                  name=segment)))
    except KubeError as e:
        if not e.not_found:
            raise
        if _names(e.__cause__, name):
            return None
        raise KubeError(f"{what} failed: HTTP 404 that does not name {name}: not the API server's word that it "
                        "does not exist") from e.__cause__
    meta = obj.get("metadata")
    found = (meta.get("namespace"), meta.get("name")) if isinstance(meta, Mapping) else (None, None)
    if found[1] != name or found[0] not in (None, namespace):
        raise KubeError(f"{what} failed: the answer is about {found[0]}/{found[1]}, not {namespace}/{name}")
    return obj


def _one_segment(name: str) -> bool:
    return "/" not in name and name not in (".", "..")


def _names(cause: BaseException | None, name: str) -> bool:
    """Whether a 404 is the API server's NotFound of the object called `name` (its Status names it)."""
    status = getattr(cause, "status", None) if isinstance(cause, lightkube.ApiError) else None
    details = getattr(status, "details", None)
    return details is not None and details.name == name


def decode(data: bytes | str, *, shape: Any = WHOLE) -> Any:
    """One object (a watch event's) decoded into `shape`; ValueError (msgspec's DecodeError) when it is not
    JSON."""
    return _decoders_of(shape)[1].decode(data)
