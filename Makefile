# Developer entry points. `make demo` and `make test` are the README's first two commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# pytest-xdist workers of `make test` and `make unit`: one per core of the suite's 2-core budget (a serving
# cluster mostly waits on its engines, so a second group of tests runs beside it); 0 runs in one process.
TEST_WORKERS ?= 2

.PHONY: setup deps demo demo-down test lint unit k8s-rig ee-context

setup: $(VENV)/.installed deps

# The product and, beside it, the rehearsal rig (provision-sim/: adds `provision sim`).
$(VENV)/.installed: pyproject.toml provision-sim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -e ./provision-sim
	touch $@

# Debian packages the simulated cluster and the tests need (root; once per change of the list).
deps: $(VENV)/.apt-installed

$(VENV)/.apt-installed: .ci/apt-packages.txt .ci/apt-install
	mkdir -p $(VENV)
	sh .ci/apt-install
	touch $@

# The main job on the embedded default: a simulated 2-node cluster (openEuler + Ubuntu flavours,
# 8 x 910B each), then `provision apply` on it. `make demo-down` removes the cluster.
DEMO := demo
demo: setup
	$(BIN)/provision sim down --name $(DEMO)
	$(BIN)/provision sim up --nodes 2 --os openeuler-22.03,ubuntu-22.04 --serve --name $(DEMO)
	$(BIN)/provision apply /var/lib/provision-sim/$(DEMO)/inventory.ini

demo-down: setup
	$(BIN)/provision sim down --name $(DEMO)

# The build context of an execution environment (execution-environment.yml, docs/ansible.md): the collection
# and provision's wheel in dist/, then ansible-builder's context in build/ee/ (`podman build build/ee`).
ee-context: setup
	rm -rf dist build/ee
	$(BIN)/ansible-galaxy collection build --output-path dist .
	$(BIN)/pip wheel --no-deps -q -w dist .
	$(BIN)/ansible-builder create -f execution-environment.yml -c build/ee

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/yamllint -s .
	shellcheck provision/scripts/*.sh
	ANSIBLE_COLLECTIONS_PATH=$$($(BIN)/python -c 'from provision.paths import collections_path as c; print(c())') \
		$(BIN)/ansible-lint --offline playbooks roles

unit: setup
	$(BIN)/pytest -m unit -q -n $(TEST_WORKERS)

# The Kubernetes test rig's binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet),
# built once from Debian's `kubernetes` source into /var/cache/provision-k8s (tens of minutes the first time,
# instant after; a failed build stops here with the failing step's output, before any test runs).
k8s-rig: setup deps
	$(BIN)/python -m provision_sim.k8s.build prepare

# Everything: lint, then every test layer, on TEST_WORKERS pytest-xdist workers. The groups and their order
# are tests/conftest.py's; the run ends with the time of each layer and the 20 slowest tests.
test: lint k8s-rig
	$(BIN)/pytest -q -n $(TEST_WORKERS) --no-loadscope-reorder --durations=20
