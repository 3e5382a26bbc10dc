"""YAML documents that are small as text and huge as a tree: each anchor's list names the one before it
`width` times, so the last one stands for width**depth leaves. yaml.safe_load shares the nodes (cheap);
whatever walks the result as a tree (repr, str, a copy) pays for every leaf."""

from __future__ import annotations

import itertools


def anchors(depth: int, *, width: int = 9) -> tuple[str, str]:
    """A flow list defining the anchors a..., and the alias of the last (the biggest)."""
    names = [chr(ord("a") + i) for i in range(depth)]
    parts = ["&a [" + ", ".join(['"x"'] * width) + "]"]
    parts += [f"&{n} [" + ", ".join([f"*{p}"] * width) + "]" for p, n in itertools.pairwise(names)]
    return "[" + ", ".join(parts) + "]", f"*{names[-1]}"


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth
