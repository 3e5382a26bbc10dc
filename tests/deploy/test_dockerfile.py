"""A static lint of the Dockerfile: no Docker engine here, so the image is never built in the tests.

What it checks is what a build would not tell anyway until too late: the base is pinned (a tag that is
not `latest`, and a digest), the entry point is the console script pyproject declares, the image says
why it runs as root, and the files the build copies exist and are not excluded by .dockerignore.
"""

from __future__ import annotations

import re
import shlex
import tomllib

from tests.deploy.conftest import REPO

DOCKERFILE = REPO / "Dockerfile"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def build_args() -> dict[str, str]:
    args = {}
    for word, rest in instructions():
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value.strip('"')
    return args


def base_images() -> list[str]:
    """Every FROM that is not a stage built earlier, with ${ARG} defaults expanded."""
    args, stages, images = build_args(), set(), []
    for word, rest in instructions():
        if word != "FROM":
            continue
        parts = rest.split()
        ref = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), parts[0])
        if len(parts) >= 3 and parts[1].upper() == "AS":
            stages.add(parts[2].lower())
        if ref.lower() not in stages:
            images.append(ref)
    return images


def test_every_base_image_is_pinned_by_tag_and_digest() -> None:
    images = base_images()
    assert images
    for ref in images:
        assert "$" not in ref, f"unresolved build argument in {ref}"
        assert DIGEST.search(ref), f"{ref} is not pinned by digest"
        name_tag = DIGEST.sub("", ref)
        assert ":" in name_tag.rsplit("/", 1)[-1], f"{ref} has no tag"
        tag = name_tag.rsplit(":", 1)[1]
        assert tag != "latest", ref
        assert re.search(r"\d+\.\d+\.\d+", tag), f"{ref}: tag {tag} is not a concrete version"
    assert ":latest" not in DOCKERFILE.read_text()


def test_multi_stage_build_installs_a_wheel_into_a_venv() -> None:
    froms = [rest for word, rest in instructions() if word == "FROM"]
    assert len(froms) >= 2
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert "pip wheel" in runs and "-m venv" in runs
    assert any(word == "COPY" and rest.startswith("--from=") for word, rest in instructions())


def test_entrypoint_is_the_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    entry = [rest for word, rest in instructions() if word == "ENTRYPOINT"]
    assert len(entry) == 1
    assert entry[0] == '["nodegc"]', "exec form, so signals reach nodegc (PID 1) and the agent stops cleanly"
    assert "nodegc" in scripts


def test_runs_as_root_only_with_a_reason() -> None:
    users = [rest for word, rest in instructions() if word == "USER"]
    if users and users[-1] not in {"0", "root", "0:0"}:
        return
    text = DOCKERFILE.read_text()
    assert re.search(r"#.*[Rr]uns as root", text), "the image runs as root: a comment must say why"
    assert "CAP_SYS_ADMIN" in text and "CAP_NET_ADMIN" in text


def test_apt_installs_are_lean_and_include_what_nodegc_executes() -> None:
    for word, rest in instructions():
        if word == "RUN" and "apt-get install" in rest:
            assert "--no-install-recommends" in rest
            assert "rm -rf /var/lib/apt/lists/*" in rest
            words = set(shlex.split(rest.replace("&&", " ")))
            assert {"iptables", "util-linux"} <= words  # iptables-save/restore, nsenter
            assert "containernetworking-plugins" not in words  # the node's plugins are used


def test_copied_sources_exist_and_are_not_ignored() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for word, rest in instructions():
        if word != "COPY" or rest.startswith("--from="):
            continue
        *sources, _dest = rest.split()
        for src in sources:
            assert (REPO / src).exists(), f"COPY {src}: no such file in the repository"
            assert f"!{src.rstrip('/')}" in {line.rstrip("/") for line in ignore}, f"{src} is not let through"


# --- the dependency set the image installs -----------------------------------------------------------


def _pins() -> dict[str, str]:
    pins = {}
    for raw in (REPO / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[_norm(name)] = version
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_installs_from_the_constraints_file() -> None:
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert re.search(r"pip install (--constraint|-c) constraints.txt", runs)
    copies = " ".join(rest for word, rest in instructions() if word == "COPY")
    assert "constraints.txt" in copies


def test_constraints_pin_the_whole_runtime_closure_inside_the_declared_ranges() -> None:
    """Every runtime dependency, transitively, is pinned; each pin satisfies pyproject's range; and the
    venv the tests run in has exactly those versions (so the pins are the tested set)."""
    from importlib.metadata import PackageNotFoundError, distribution, requires

    from packaging.requirements import Requirement

    pins = _pins()
    declared = [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "dependencies"]]
    for req in declared:
        assert _norm(req.name) in pins, f"{req.name} is not in constraints.txt"
        assert req.specifier.contains(pins[_norm(req.name)]), f"{req.name}=={pins[_norm(req.name)]} not in {req}"
        assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), f"{req.name} has no upper bound"
    seen: set[str] = set()
    todo = [(r.name, frozenset(r.extras)) for r in declared]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        raw, extras = todo.pop()
        name = _norm(raw)
        if (name, extras) in done:
            continue
        done.add((name, extras))
        seen.add(name)
        assert name in pins, f"{name} (a runtime dependency) is not pinned in constraints.txt"
        try:
            installed = distribution(name).version
        except PackageNotFoundError:
            raise AssertionError(f"{name} is pinned but not installed in the test venv") from None
        assert installed == pins[name], f"the tests ran with {name} {installed}, constraints.txt pins {pins[name]}"
        for r in requires(name) or []:
            req = Requirement(r)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *extras}):
                todo.append((req.name, frozenset(req.extras)))
    assert set(pins) == seen, f"pinned but not needed: {sorted(set(pins) - seen)}"


def test_the_minimum_constraints_are_the_lower_bounds() -> None:
    """constraints-min.txt (the oldest tested set) pins every declared dependency at its range's lower bound."""
    from packaging.requirements import Requirement

    pins = {}
    for raw in (REPO / "constraints-min.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_norm(name)] = version
    declared = [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "dependencies"]]
    assert set(pins) == {_norm(r.name) for r in declared}
    for req in declared:
        lower = [s.version for s in req.specifier if s.operator == ">="]
        assert lower == [pins[_norm(req.name)]], f"{req.name}: lower bound {lower} vs constraints-min.txt"
