"""The check a decode shape (`api.objects.POD_FIELDS`, `SLICE_FIELDS`) must pass for any JSON a server sends:
decoded into the shape, an object gives its parser exactly what the whole object gives (the same record or
the same refusal in the same words) and the same resourceVersion; what is not JSON text, or not an object,
is refused by the shape as it is whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import assume

from nodegc.api.objects import object_resource_version
from nodegc.api.reads import decode


def outcome(parse: Callable[[Any], object], obj: Any) -> object:
    """What `parse` makes of `obj`: its record, or its refusal's words."""
    try:
        return parse(obj)
    except ValueError as e:
        return f"refused: {e}"


def assert_shape_gives_the_whole(obj: Any, shape: Any, parse: Callable[[Any], object]) -> None:
    try:
        data = json.dumps(obj, allow_nan=False).encode()
    except ValueError:
        assume(False)  # not JSON (an infinite number): no server sends it
        return
    try:
        whole = msgspec.json.decode(data)
    except msgspec.DecodeError:
        # Text that is not Unicode (a lone surrogate's escape): refused whole, wherever it is.
        with pytest.raises(msgspec.DecodeError):
            decode(data, shape=shape)
        return
    if not isinstance(whole, dict):
        with pytest.raises(msgspec.ValidationError):
            decode(data, shape=shape)
        return
    shaped = decode(data, shape=shape)
    assert outcome(parse, shaped) == outcome(parse, whole)
    assert object_resource_version(shaped) == object_resource_version(whole)
