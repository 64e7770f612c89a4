# Two entry points for a fresh machine (both install what they need):
#   make demo   the main job: program a throwaway node from the example log, probe it
#   make test   everything CI checks: lint, types, unit/golden/property/process tests,
#               and the checks of deploy/ (manifests, image recipe, probe)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-releases lint typecheck pytest deploy-check proto bench system-deps upstream clean

# With the bench extra: mypy checks benchmarks/ too, and bench_iptc.py
# imports python-iptables (without it, `make typecheck` fails on that import).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	rm -f $(VENV)/.installed-*
	touch $@

# Kernel tools the Linux platform and its tests drive (no-op when present).
system-deps:
	@./scripts/install-system-deps.sh

# As root: a throwaway node and pods in network namespaces, programmed from
# examples/demo-node.log, with the measured connectivity matrix beside the
# expected one. Without root: the in-memory (sim) state instead, and says so.
# On native nftables instead of iptables: make demo DEMO_FLAGS=--nftables
demo: $(STAMP) system-deps
	$(BIN)/python examples/demo.py $(DEMO_FLAGS)

test: $(STAMP) system-deps upstream lint typecheck pytest

# The real upstream peers: kube-apiserver, kube-controller-manager,
# kube-proxy and etcd from testbed/upstream/*/go.mod (the Go module proxy);
# calico-felix, calicoctl and the Calico CNI plugin (also calico-ipam) from
# Calico's source archives in ../shared/upstream/ (checked against its
# SHA256SUMS): the pinned release (v3.31.7) and the newest (master). Built
# into a cache outside the work tree (~/.cache/dataplane-upstream): minutes
# cold, seconds after. Prints `NAME PATH` per binary; what could not be
# built is one line on stderr, and the tests that need it skip with the
# same words.
upstream: $(STAMP)
	$(BIN)/python -m testbed.upstream

# The real-Felix suite (tests/felix/) under every release in ../shared/upstream.
test-releases: $(STAMP) system-deps
	$(BIN)/python -m testbed.upstream --all-releases
	DATAPLANE_TEST_FELIX_RELEASES=all $(BIN)/pytest -q tests/felix

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q

# Only the checks of deploy/ (image recipe, manifests, probe); `make test`
# runs them too, as part of pytest (tests/test_deploy.py).
deploy-check: $(STAMP)
	$(BIN)/pytest -q tests/test_deploy.py

# Regenerate dataplane/wire/_pb from proto/ (tests/test_proto_generated.py fails
# when the committed output is stale).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto \
		--python_out=dataplane/wire/_pb --pyi_out=dataplane/wire/_pb proto/felixbackend.proto

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_phase1.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
