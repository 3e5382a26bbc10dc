# syntax=docker/dockerfile:1
# nodegc: the node agent (DaemonSet) and the cluster controller (Deployment) share this image.
#
# Base: Debian bookworm slim with CPython 3.11, pinned by tag and by digest (the digest wins; the tag says
# what it is). Both stages use the same base so the venv's interpreter path is the same at run time.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

# --- build: a wheel of nodegc, installed with its dependencies into a venv ----------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY src ./src
# constraints.txt pins every runtime dependency (the set the tests ran with): two builds of one commit
# install the same packages.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/nodegc \
 && /opt/nodegc/bin/pip install --constraint constraints.txt /wheels/nodegc-*.whl

# --- run ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# What nodegc executes at run time:
#   iptables    iptables-save / iptables-restore (and ip6tables-*) for CNI chains and hostport rules; the
#               node's CNI plugins (run from the node's /opt/cni/bin through a hostPath) call iptables too.
#               Debian's package ships both backends (iptables-legacy-* and iptables-nft-*); nodegc
#               detects which one holds the node's rules at start, as kube-proxy and Calico do
#               (`--iptables-backend auto`), so one image serves legacy and nft nodes alike.
#   util-linux  nsenter, to run iptables and CNI plugins in the node's network namespace.
#   iproute2    not called by nodegc (it uses netlink directly); kept for `ip netns` / `ip link` when an
#               operator diagnoses a node through `kubectl exec`.
# The CNI plugins themselves are NOT installed: the agent runs the node's own plugins, the same binaries
# that made the attachments.
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables iproute2 util-linux \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/nodegc /opt/nodegc
ENV PATH=/opt/nodegc/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Runs as root (no USER line) on purpose. The node agent unmounts volumes (umount2) and nsfs bind mounts,
# enters the node's network namespace (setns), deletes veth links and rewrites iptables: that takes
# CAP_SYS_ADMIN and CAP_NET_ADMIN (CAP_NET_RAW for the legacy iptables backend) as uid 0 on files owned by
# root and by other pods. The DaemonSet (deploy/agent-daemonset.yaml) says why it is privileged. The
# controller needs none of this: its Deployment runs the same image as a non-root uid with every
# capability dropped and a read-only root filesystem.
ENTRYPOINT ["nodegc"]
CMD ["--help"]
