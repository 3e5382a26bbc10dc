"""Write constraints.txt: the exact versions of nodegc's runtime dependencies (the whole closure).

    python scripts/lock.py            # resolves pyproject's ranges with pip, as a fresh install would
The Dockerfile installs with `-c constraints.txt`, so two builds of one commit get the same packages;
tests/deploy/test_dockerfile.py checks the file against pyproject.toml and the venv the tests ran in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEADER = """\
# Runtime dependencies of nodegc, pinned: the set the tests ran with. Regenerate with
#   python scripts/lock.py
# after a change of the ranges in pyproject.toml. The image installs with `pip install -c constraints.txt`.
"""


def resolve() -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                        "--report", str(report), str(REPO)], check=True, timeout=600)
        data = json.loads(report.read_text())
    pins = [(i["metadata"]["name"], i["metadata"]["version"]) for i in data["install"]]
    return sorted((n, v) for n, v in pins if n.lower() != "nodegc")


def main() -> None:
    lines = [f"{name}=={version}" for name, version in resolve()]
    (REPO / "constraints.txt").write_text(HEADER + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
