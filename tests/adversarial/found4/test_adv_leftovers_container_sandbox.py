"""Adversarial: the runtime lists a container whose sandbox it does not list (the sandbox was listed
between ListPodSandbox and ListContainers, or containerd's recovery loaded the container and failed to
load its sandbox). The sandbox's state dir (the shm the container uses as /dev/shm) and its pause task
bundle were judged as ids the runtime does not know, and the executor's fresh check asked only about
the ids themselves."""

from __future__ import annotations

from nodegc.model.runtime import RuntimeContainer
from tests.unit.test_runtime_leftovers import run, sandbox_dir, task_dir

S = "e" * 64
C = "f" * 64


def test_a_listed_containers_sandbox_is_the_runtimes() -> None:
    sd, pause = sandbox_dir(S), task_dir(S)
    out = run(sd, pause, containers=(RuntimeContainer(id=C, sandbox_id=S, name="app", state="running"),))
    assert not any(f.cls.is_residue for f in out.values()), {k: f.evidence for k, f in out.items()}

