#!/usr/bin/env bash
# Install Debian packages, waiting for the apt/dpkg locks a fresh machine's own boot-time updates may hold.
# Usage: scripts/apt-install.sh PACKAGE...
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
wait_opts=(-o DPkg::Lock::Timeout=600)
for attempt in $(seq 1 60); do
  if apt-get "${wait_opts[@]}" update -qq; then break; fi
  echo "apt-get update failed (attempt $attempt; the lists lock may be held); retrying in 10 s" >&2
  sleep 10
done
for attempt in $(seq 1 30); do
  if apt-get "${wait_opts[@]}" install -y -qq "$@"; then exit 0; fi
  echo "apt-get install failed (attempt $attempt); retrying in 10 s" >&2
  sleep 10
done
exit 1
