"""Two listings of a node's pods for the properties of what moved between them: the first drawn, the second
made from it (each pod kept as the very same object, copied to an equal one, dropped, changed or listed
twice), with new pods added and, now and then, two of its pods swapped."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from nodegc.model.pods import Pod


@st.composite
def pod_listings(draw: st.DrawFn, pods: st.SearchStrategy[Pod], *, max_then: int, keep_weight: int,
                 insert_anywhere: bool, swap: st.SearchStrategy[bool]) -> tuple[tuple[Pod, ...], tuple[Pod, ...]]:
    """(now, then). `keep_weight`: how much likelier a pod is kept than each other fate; `insert_anywhere`:
    new pods go anywhere in the listing, not only at its end; `swap`: whether two pods change places."""
    then = draw(st.lists(pods, max_size=max_then))
    now: list[Pod] = []
    for pod in then:
        what = draw(st.sampled_from(("keep",) * keep_weight + ("copy", "drop", "change", "twice")))
        if what == "keep":
            now.append(pod)
        elif what == "copy":
            now.append(replace(pod))
        elif what == "change":
            now.append(draw(pods))
        elif what == "twice":
            now += [pod, pod]
    for pod in draw(st.lists(pods, max_size=2)):
        now.insert(draw(st.integers(0, len(now))) if insert_anywhere else len(now), pod)
    if draw(swap) and len(now) > 1:
        i, j = draw(st.integers(0, len(now) - 1)), draw(st.integers(0, len(now) - 1))
        now[i], now[j] = now[j], now[i]
    return tuple(now), tuple(then)
