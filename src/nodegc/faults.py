"""Crash points for tests: with NODEGC_FAULT=<point> set, the process kills itself with SIGKILL there.

Only the crash-safety tests set the variable; production never does. Points are named
`<stage>:<kind>`, e.g. `after_checkpoint:ip_reservation`, `after_clean:netns`.
"""

from __future__ import annotations

import os
import signal

ENV = "NODEGC_FAULT"


def fault_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
