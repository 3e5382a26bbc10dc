"""Finding's and Owner's hand-written __init__ are the dataclass's own: same fields, defaults, equality, hash, pickling,
copying and dataclasses.replace, and it stays frozen."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import pytest

from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind


def _finding(**changes: object) -> Finding:
    base = Finding(FindingClass.LEAKED_NETNS, Kind.NETNS, "/run/netns/cni-1", Owner(uid="u1"), OwnerState.ABSENT,
                   ("no pod", "no process"), netns="/run/netns/cni-1")
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [Finding, Owner])
def test_init_takes_the_fields_in_order_with_their_defaults(cls: type[Finding | Owner]) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert p.default == (inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
        assert f.default_factory is dataclasses.MISSING


def test_every_field_is_set_by_position_and_by_keyword() -> None:
    values = [FindingClass.IN_USE, Kind.VETH, "veth1", Owner(uid="u"), OwnerState.LIVE, ("e",), "ns", "10.0.0.1", "sb"]
    by_position = Finding(*values)  # type: ignore[arg-type]
    by_keyword = Finding(**{f.name: v for f, v in zip(dataclasses.fields(Finding), values, strict=True)})  # type: ignore[arg-type]
    for f, v in zip(dataclasses.fields(Finding), values, strict=True):
        assert getattr(by_position, f.name) is v
        assert getattr(by_keyword, f.name) is v
    assert by_position == by_keyword
    assert hash(by_position) == hash(by_keyword)
    short = Finding(FindingClass.IN_USE, Kind.VETH, "veth1", Owner(), OwnerState.LIVE, ())
    assert (short.netns, short.ip, short.sandbox) == (None, None, None)


def test_equality_hash_repr_pickle_copy_and_replace() -> None:
    f = _finding()
    assert f == _finding()
    assert hash(f) == hash(_finding())
    assert f != _finding(ip="10.0.0.9")
    assert repr(f).startswith("Finding(cls=<FindingClass.LEAKED_NETNS: 'leaked_netns'>, kind=")
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(f, protocol=protocol))  # noqa: S301 (our own bytes)
        assert back == f
        assert hash(back) == hash(f)
    assert copy.copy(f) == f
    assert copy.deepcopy(f) == f
    changed = dataclasses.replace(f, cls=FindingClass.CONFLICT, sandbox="abc")
    assert (changed.cls, changed.sandbox, changed.id, changed.evidence) == (
        FindingClass.CONFLICT, "abc", f.id, f.evidence)
    assert dataclasses.astuple(changed)[-1] == "abc"
    assert not hasattr(f, "__dict__")


def test_still_frozen() -> None:
    f = _finding()
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.cls = FindingClass.IN_USE  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del f.ip
    with pytest.raises((AttributeError, TypeError)):
        f.other = 1  # type: ignore[attr-defined]


def test_owner_is_the_dataclass_it_was() -> None:
    o = Owner(uid="u", namespace="ns", name="n", container_id="c" * 64)
    assert (o.uid, o.namespace, o.name, o.container_id) == ("u", "ns", "n", "c" * 64)
    assert o == Owner("u", "ns", "n", "c" * 64)
    assert hash(o) == hash(Owner("u", "ns", "n", "c" * 64))
    assert Owner() == Owner(None, None, None, None)
    assert Owner(container_id="c" * 64).label() == "container:" + "c" * 12
    assert repr(Owner(uid="u")) == "Owner(uid='u', namespace=None, name=None, container_id=None)"
    assert pickle.loads(pickle.dumps(o)) == o  # noqa: S301 (our own bytes)
    assert dataclasses.replace(o, name="m") == Owner("u", "ns", "m", "c" * 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.uid = "x"  # type: ignore[misc]
    assert not hasattr(o, "__dict__")
