"""Unmount one leftover volume mount, proving first that it is still the mount the scan saw.

The unmount runs in a child process: umount(2) of a dead network filesystem can block for minutes, and only
a separate process can be abandoned (killed) when that happens. The child opens the mount point with
O_PATH|O_NOFOLLOW and reads the mount id of what it opened from /proc/self/fdinfo, so the identity check and
the unmount look at the same mount, not at whatever the mount table said a moment earlier. A lazy detach is
even done through that very descriptor (`umount2("/proc/self/fd/N", MNT_DETACH)`), so it can only ever detach
the verified mount. A plain unmount cannot go through the descriptor (the descriptor itself keeps the mount
busy), so it closes it and unmounts the path with UMOUNT_NOFOLLOW right after the check.

Only one mount is unmounted, never a tree: mounts below the volume must be reclaimed first (a lazy detach
would take them along), and mounts stacked under the verified one are left for the next round.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodegc.hostio.kubelet import csi_mount_point
from nodegc.hostio.libc import MNT_DETACH
from nodegc.hostio.mountinfo import MountIndex, read_mounts, top_of
from nodegc.model.resources import Mount, VolumeDir
from nodegc.reclaim import unmount_child
from nodegc.reclaim.outcomes import Outcome

_KILL_GRACE = 2.0
_OUTPUT_LIMIT = 300

UNMOUNT_CHILD_PATH = Path(unmount_child.__file__)
UNMOUNT_CHILD_CODE = UNMOUNT_CHILD_PATH.read_text()
"""The child's source, for running it as `-c` (tests prepend a hang)."""
UNMOUNT_CHILD: tuple[str, ...] = (sys.executable, "-I", "-S", str(UNMOUNT_CHILD_PATH))
"""The program that unmounts (`unmount_child.py`); tests swap it for one that hangs, to exercise the timeout
path. argv: <path> <expected mount id> <umount2 flags> <proc root>; it prints one line: "ok",
"changed <mount id>", or "errno <n>"."""


@dataclass(frozen=True)
class _ChildResult:
    status: str
    """One of ok, changed, errno (value: the errno), timeout, broken (value: why)."""
    value: str = ""


def _run_child(child: Sequence[str], *, path: str, mount_id: int, flags: int, proc_root: Path,
               timeout: float) -> _ChildResult:
    argv: list[str | bytes] = [*child, os.fsencode(path), str(mount_id), str(flags), os.fsencode(proc_root)]
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as e:
        return _ChildResult("broken", f"cannot start the unmount child: {e}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        # A child stuck in the kernel even after SIGKILL is reaped by subprocess once it finally dies.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=_KILL_GRACE)
        return _ChildResult("timeout")
    words = out.decode(errors="replace").split()
    if proc.returncode == 0 and words and words[0] in ("ok", "changed", "errno"):
        return _ChildResult(words[0], words[1] if len(words) > 1 else "")
    msg = err.decode(errors="replace").strip()[-_OUTPUT_LIMIT:]
    return _ChildResult("broken", f"unmount child exited {proc.returncode}: {msg}")


@dataclass(frozen=True)
class _Seen:
    target: str
    stack: tuple[Mount, ...]
    below: tuple[Mount, ...]


def _look(volume: VolumeDir, proc_root: Path) -> _Seen | str:
    """What is mounted at the volume now; a str is the reason the mount table could not be read."""
    mounts, problems = read_mounts(proc_root)
    if problems or not mounts:
        # An unparsed line may be a mount below the volume that a lazy detach would take along.
        return problems[0].reason if problems else "empty mount table"
    index = MountIndex.build(mounts)
    target = volume.path.rstrip("/") or "/"
    stack = index.at(target)
    csi = csi_mount_point(target, plugin=volume.plugin, subpath=volume.subpath)
    if not stack and csi is not None:
        target, stack = csi, index.at(csi)
    below = [m for m in index.below(target) if m.mount_point != target]
    return _Seen(target=target, stack=tuple(stack), below=tuple(below))


def _after(volume: VolumeDir, proc_root: Path, *, lazy: bool) -> Outcome:
    """Confirm by a fresh read; stacked mounts that were under the verified one keep the item open."""
    how = "lazily detached" if lazy else "unmounted"
    seen = _look(volume, proc_root)
    if isinstance(seen, str):
        return Outcome(ok=False, detail=f"{how} mount {volume.mount_id}, but cannot re-read mounts: {seen}",
                       lazy=lazy)
    ids = [m.mount_id for m in seen.stack]
    if volume.mount_id in ids:
        detail = f"mount {volume.mount_id} still at {seen.target} after umount"
        return Outcome(ok=False, detail=detail, lazy=lazy)
    if ids:
        return Outcome(
            ok=False,
            detail=f"{how} mount {volume.mount_id}; {len(ids)} more mount(s) remain at {seen.target} "
            f"(ids {ids}), left for the next round",
            lazy=lazy,
        )
    return Outcome.done(f"{how} mount {volume.mount_id} at {seen.target}", lazy=lazy)


def _verify(volume: VolumeDir, seen: _Seen) -> Outcome | None:
    """None when the verified mount is on top at its place with nothing mounted below it."""
    if not seen.stack:
        return Outcome.gone(f"nothing mounted at {volume.path}")
    top = top_of(seen.stack)
    if volume.mount_id is None or top.mount_id != volume.mount_id:
        return Outcome.changed(
            f"mount at {seen.target} is {top.mount_id} ({top.fs_type} {top.source}), "
            f"not the verified {volume.mount_id}"
        )
    if seen.below:
        points = sorted({m.mount_point for m in seen.below})
        return Outcome.failed(
            f"{len(seen.below)} mount(s) below {seen.target} must be unmounted first: {points[:3]}"
        )
    return None


def unmount_volume(
    volume: VolumeDir,
    *,
    proc_root: Path = Path("/proc"),
    timeout: float = 10.0,
    child: Sequence[str] = UNMOUNT_CHILD,
) -> Outcome:
    """Unmount the verified mount at `volume.path`; a hung or busy unmount falls back to a lazy detach.

    Compare-and-reclaim: nothing mounted there is success (already gone), another mount on top is
    `changed` and nothing is touched.
    """
    seen = _look(volume, proc_root)
    if isinstance(seen, str):
        return Outcome.failed(f"cannot read the mount table: {seen}")
    refusal = _verify(volume, seen)
    if refusal is not None or volume.mount_id is None:
        return refusal or Outcome.failed("no verified mount id")
    mount_id = volume.mount_id
    first = _run_child(
        child, path=seen.target, mount_id=mount_id, flags=0, proc_root=proc_root, timeout=timeout
    )
    if first.status == "ok":
        return _after(volume, proc_root, lazy=False)
    if first.status == "changed":
        detail = f"mount at {seen.target} is {first.value}, not the verified {mount_id}"
        return _changed_or_gone(volume, proc_root, detail)
    if first.status == "errno" and first.value in (str(errno.ENOENT), str(errno.EINVAL)):
        # Not a mount point any more (or the path is gone): confirm with the mount table.
        return _gone_or(volume, proc_root, f"umount {seen.target}: {_strerror(first.value)}")
    if first.status == "broken" or (first.status == "errno" and first.value != str(errno.EBUSY)):
        why = first.value if first.status == "broken" else _strerror(first.value)
        return Outcome.failed(f"umount {seen.target}: {why}")
    # Hung (timeout) or busy (EBUSY): detach lazily, after proving again that the mount is the verified one.
    reason = f"timed out after {timeout:g}s" if first.status == "timeout" else "busy"
    seen = _look(volume, proc_root)
    if isinstance(seen, str):
        return Outcome.failed(f"umount {reason}; cannot re-read the mount table: {seen}")
    refusal = _verify(volume, seen)
    if refusal is not None:
        return refusal if not refusal.already_gone else Outcome.done(f"mount {mount_id} went away ({reason})")
    lazy = _run_child(child, path=seen.target, mount_id=mount_id, flags=MNT_DETACH, proc_root=proc_root,
                      timeout=timeout)
    if lazy.status == "ok":
        return _after(volume, proc_root, lazy=True)
    if lazy.status == "changed":
        detail = f"mount at {seen.target} is {lazy.value}, not the verified {mount_id}"
        return _changed_or_gone(volume, proc_root, detail)
    if lazy.status == "timeout":
        return Outcome.failed(
            f"umount {reason}; lazy detach of {seen.target} also timed out after {timeout:g}s"
        )
    why = lazy.value if lazy.status == "broken" else _strerror(lazy.value)
    return _gone_or(volume, proc_root, f"umount {reason}; lazy detach of {seen.target} failed: {why}")


def _gone_or(volume: VolumeDir, proc_root: Path, failure: str) -> Outcome:
    seen = _look(volume, proc_root)
    if not isinstance(seen, str) and volume.mount_id not in {m.mount_id for m in seen.stack}:
        return Outcome.gone(f"mount {volume.mount_id} no longer at {seen.target}")
    return Outcome.failed(failure)


def _changed_or_gone(volume: VolumeDir, proc_root: Path, detail: str) -> Outcome:
    """The child saw another mount (or none, reading its parent's id): gone if the verified one is gone."""
    outcome = _gone_or(volume, proc_root, detail)
    return outcome if outcome.already_gone else Outcome.changed(detail)


def _strerror(value: str) -> str:
    try:
        n = int(value)
    except ValueError:
        return value
    return f"{os.strerror(n)} (errno {n})"
