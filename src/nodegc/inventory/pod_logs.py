"""The kubelet's per-pod log directories, `<pod log dir>/<namespace>_<name>_<uid>` (read only).

Namespaces and pod names are DNS names and never hold `_`, so a directory name splits into exactly
three parts; anything else is reported and skipped. Symlinks are never followed.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from nodegc.hostio.kubelet import PLAUSIBLE_UID
from nodegc.model.resources import Kind, PodLogDir, ReadProblem

_DNS_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")


def scan_pod_log_dirs(pod_log_dir: Path) -> tuple[tuple[PodLogDir, ...], tuple[ReadProblem, ...]]:
    base = os.fsdecode(pod_log_dir)
    try:
        with os.scandir(pod_log_dir) as it:
            dirents = sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return (), ()
    except OSError as e:
        return (), (ReadProblem(Kind.POD_LOG_DIR, base, f"cannot list pod log dir: {e.strerror or e}"),)
    found: list[PodLogDir] = []
    problems: list[ReadProblem] = []
    for dirent in dirents:
        path = os.path.join(base, dirent.name)
        parts = dirent.name.split("_")
        if len(parts) != 3 or not _DNS_NAME.fullmatch(parts[0]) or not _DNS_NAME.fullmatch(parts[1]) or not (
                PLAUSIBLE_UID.fullmatch(parts[2])):
            problems.append(ReadProblem(Kind.POD_LOG_DIR, path, "not named <namespace>_<name>_<uid>; skipped"))
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            problems.append(ReadProblem(Kind.POD_LOG_DIR, path, f"cannot stat: {e.strerror or e}"))
            continue
        if not stat.S_ISDIR(st.st_mode):
            problems.append(ReadProblem(Kind.POD_LOG_DIR, path, "not a directory (symlinks are not followed)"))
            continue
        found.append(PodLogDir(namespace=parts[0], name=parts[1], uid=parts[2], path=path, inode=st.st_ino,
                               mtime=st.st_mtime))
    return tuple(found), tuple(problems)
