# Every target bootstraps what it needs on a fresh machine (Python 3.11 to 3.13, Go).
# The Python the function's venv is made with: any of 3.11 to 3.13 (`make render PYTHON=python3.13`).
PYTHON ?= python3
# The Python `make unit-py` runs the unit tests that need no peer with.
PY ?= python3.13
PY_VENV := .cache/py/$(notdir $(PY))
VENV := .venv
# One virtualenv per Flower release the tests run (tests/flower/<release>.txt).
FLWR_RELEASES := $(patsubst tests/flower/%.txt,%,$(wildcard tests/flower/*.txt))
FLWR_VENVS := $(foreach r,$(FLWR_RELEASES),.cache/flwr/$(r)/.installed)
FLWR_NEWEST := $(lastword $(sort $(FLWR_RELEASES)))
NGINX_ROOT := .cache/nginx
FUZZ_EXAMPLES ?= 10000
# pytest-xdist workers for the unit suite: one per core.
UNIT_WORKERS ?= auto
# A pytest -m expression: which unit tests unit-run runs (all when empty).
UNIT_MARKS ?=
CRANK := .cache/bin/crank
CELCHECK := .cache/bin/celcheck
XRD2CRD := .cache/bin/xrd2crd
PSSCHECK := .cache/bin/psscheck
NETPOLICY := .cache/bin/netpolicy
# The Go functions benchmarks/bench_vs_go.py measures the function against: the typed one
# (`typedgo serve`) and the near-floor one (`typedgo floor`), one binary.
TYPEDGO := .cache/bin/typedgo
# The CRDs of the pinned Crossplane and of each provider-kubernetes release the e2e runs, from their
# modules (tests/support/peers.py).
CRDS := .cache/crds/.installed
# Supported Kubernetes minors: one CRD validator each. A minor the e2e runs
# (tools/kube-1.NN) builds it from that control plane's module, so its packages
# come from the API server's compiled ones; every other minor pins its own
# k8s.io/apiextensions-apiserver in tools/crdcheck/go.1.NN.mod.
KUBE_PLANES := $(sort $(patsubst tools/kube-%,%,$(wildcard tools/kube-1.*)))
KUBE_NEWEST := $(lastword $(sort $(KUBE_PLANES)))
KUBE_MINORS := $(sort $(patsubst tools/crdcheck/go.%.mod,%,$(wildcard tools/crdcheck/go.1.*.mod)) $(KUBE_PLANES))
CRDCHECKS := $(foreach m,$(KUBE_MINORS),.cache/bin/crdcheck-$(m))
CRDCHECKS_KUBE := $(foreach m,$(KUBE_PLANES),.cache/bin/crdcheck-$(m))
EXAMPLE ?= examples/claims/flower-141.yaml
IMAGE := .cache/image/function-flower.tar
PACKAGE := .cache/package/function-flower.xpkg
# The API as Configuration packages, one per flavor, built from apis/ as committed.
CONFIGURATION := .cache/package/configuration-flower.xpkg
CONFIGURATION_V2 := .cache/package/configuration-flower-v2.xpkg
E2E_TOOLS := .cache/e2e
# The flags hack/e2e/build-tools.sh builds with: packages compiled for one
# tool are reused from Go's build cache by the others of the same module
# (crank, celcheck and xrd2crd share tools/crank; crossplane, crane and
# cert-manager share tools/crossplane), where other flags would
# compile them again.
GO_BUILD := go build -trimpath -ldflags="-s -w"

.PHONY: render lint unit unit-run unit-py unit-py-run unit-tools unit-tools-own unit-tools-kube flower-venvs flower-venv-newest test e2e e2e-run e2e-tools image package serve crank \
	generate bench fuzz clean

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

# Flower pins protobuf below 7, the function SDK above: Flower gets its own venv.
# Each list is the whole venv, so pip installs exactly it (--no-deps): Flower 1.42
# asks for a certifi newer than the index has, and runs with 1.41's.
# uv (from the project's venv) makes them: never a Python of its own, pip's timeout.
UV := UV_PYTHON_DOWNLOADS=never UV_HTTP_TIMEOUT=180 $(VENV)/bin/uv
.cache/flwr/%/.installed: tests/flower/%.txt | $(VENV)/.installed
	rm -rf $(dir $@)
	$(UV) venv --quiet --python "$$(command -v $(PYTHON))" $(dir $@)
	$(UV) pip install --quiet --python $(dir $@)bin/python --no-deps --compile-bytecode -r $<
	touch $@

# nginx, the SuperLink's Fleet API proxy from Flower 1.40, for the real runs: no
# container runtime here, so Debian's package, unpacked (its libraries are the
# machine's). apt's lists may be absent on a new machine: then fetched once.
$(NGINX_ROOT)/.installed:
	rm -rf $(NGINX_ROOT) && mkdir -p $(NGINX_ROOT)/deb
	cd $(NGINX_ROOT)/deb && (apt-get download nginx 2>/dev/null || (apt-get update -qq && apt-get download nginx))
	dpkg-deb -x $(NGINX_ROOT)/deb/nginx_*.deb $(NGINX_ROOT)
	$(NGINX_ROOT)/usr/sbin/nginx -v
	touch $@

# The Crossplane CLI, built from the Go module proxy at the version tools/crank pins.
$(CRANK): tools/crank/go.mod tools/crank/go.sum
	mkdir -p $(dir $(CRANK))
	cd tools/crank && $(GO_BUILD) -o "$(CURDIR)/$(CRANK)" github.com/crossplane/crossplane/v2/cmd/crank

# cel-go, as provider-kubernetes evaluates readiness queries, for the tests.
$(CELCHECK): tools/crank/go.mod tools/crank/go.sum tools/crank/celcheck/main.go
	mkdir -p $(dir $(CELCHECK))
	cd tools/crank && $(GO_BUILD) -o "$(CURDIR)/$(CELCHECK)" ./celcheck

# The CRDs Crossplane generates from an XRD, by Crossplane's own conversion.
$(TYPEDGO): benchmarks/typedgo/go.mod benchmarks/typedgo/go.sum $(wildcard benchmarks/typedgo/*.go)
	mkdir -p $(dir $@)
	cd benchmarks/typedgo && $(GO_BUILD) -o "$(CURDIR)/$@" .

$(XRD2CRD): tools/crank/go.mod tools/crank/go.sum tools/crank/xrd2crd/main.go
	mkdir -p $(dir $(XRD2CRD))
	cd tools/crank && $(GO_BUILD) -o "$(CURDIR)/$(XRD2CRD)" ./xrd2crd

# The API server's Pod Security admission checks (k8s.io/pod-security-admission),
# which judge every supported minor from one build.
# psscheck and netpolicy build against the newest control plane's versions of
# Kubernetes' modules (psscheck from that module itself, netpolicy from a go.mod
# that requires the same ones): after go-kube-$(KUBE_NEWEST) they compile
# little more than their own packages.
$(PSSCHECK): tools/kube-$(KUBE_NEWEST)/go.mod tools/kube-$(KUBE_NEWEST)/go.sum tools/psscheck/main.go
	mkdir -p $(dir $(PSSCHECK))
	cd tools/psscheck && $(GO_BUILD) -modfile=../kube-$(KUBE_NEWEST)/go.mod -o "$(CURDIR)/$(PSSCHECK)" .

$(NETPOLICY): tools/kube-$(KUBE_NEWEST)/go.mod tools/kube-$(KUBE_NEWEST)/go.sum
	mkdir -p $(dir $(NETPOLICY))
	cd tools/netpolicy && $(GO_BUILD) -modfile=../kube-$(KUBE_NEWEST)/go.mod -o "$(CURDIR)/$(NETPOLICY)" \
		github.com/np-guard/netpol-analyzer/cmd/netpolicy

# The API server's own CRD validation (CEL cost budget included), once per
# supported Kubernetes minor, each with that minor's apiextensions-apiserver.
$(foreach m,$(KUBE_PLANES),.cache/bin/crdcheck-$(m)): .cache/bin/crdcheck-%: tools/crdcheck/main.go tools/kube-%/go.mod tools/kube-%/go.sum
	mkdir -p $(dir $@)
	cd tools/crdcheck && $(GO_BUILD) -modfile=../kube-$*/go.mod -o "$(CURDIR)/$@" .

.cache/bin/crdcheck-%: tools/crdcheck/main.go tools/crdcheck/go.%.mod tools/crdcheck/go.%.sum
	mkdir -p $(dir $@)
	cd tools/crdcheck && $(GO_BUILD) -modfile=go.$*.mod -o "$(CURDIR)/$@" .

crank: $(CRANK)

render: $(VENV)/.installed
	$(VENV)/bin/function render $(EXAMPLE)

serve: $(VENV)/.installed
	$(VENV)/bin/function serve --insecure --debug

generate: $(VENV)/.installed
	$(VENV)/bin/python hack/gen_xrd.py
	$(VENV)/bin/python hack/gen_package.py
	$(VENV)/bin/python hack/gen_api_docs.py
	$(VENV)/bin/python hack/gen_k8s_schemas.py

# The Python this project checks: all of it.
LINT_PATHS := function benchmarks hack tests examples/app

# Style, lint and types, run before the tests: ruff's formatter as the one
# layout, ruff's rules and mypy (strict, on function/) as pyproject.toml says.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The Go programs the fast suite runs, and one venv per Flower release it runs.
unit-tools: unit-tools-own unit-tools-kube

# Those with modules of their own, and those built from the control planes'
# modules (hack/stages.py builds these after the control planes, reusing them).
unit-tools-own: $(CRANK) $(CELCHECK) $(XRD2CRD) $(TYPEDGO) $(filter-out $(CRDCHECKS_KUBE),$(CRDCHECKS)) $(CRDS)
unit-tools-kube: $(PSSCHECK) $(NETPOLICY) $(CRDCHECKS_KUBE)

$(CRDS): hack/e2e/build-tools.sh tools/crossplane/go.mod $(wildcard tools/provider-kubernetes/go*.mod)
	hack/e2e/build-tools.sh $(dir $(CRDS)) crds
	touch $@

flower-venvs: $(FLWR_VENVS) $(NGINX_ROOT)/.installed

# What the e2e's run of the quick start needs (tests/e2e): its Flower release, the
# newest, and the Fleet API proxy's nginx.
flower-venv-newest: .cache/flwr/$(FLWR_NEWEST)/.installed $(NGINX_ROOT)/.installed

# The fast suite: every test but the real control plane. hack/stages.py builds
# what it needs side by side (lint, the venvs, the Go tools), then unit-run.
unit:
	$(PYTHON) hack/stages.py unit

unit-run:
	CRANK="$(CURDIR)/$(CRANK)" CELCHECK="$(CURDIR)/$(CELCHECK)" XRD2CRD="$(CURDIR)/$(XRD2CRD)" \
		PSSCHECK="$(CURDIR)/$(PSSCHECK)" NETPOLICY="$(CURDIR)/$(NETPOLICY)" \
		CRDCHECK_DIR="$(CURDIR)/.cache/bin" \
		FLWR_PYTHON="$(CURDIR)/.cache/flwr/1.25.0"/bin/python FLWR_VENVS="$(CURDIR)/.cache/flwr" \
		NGINX_ROOT="$(CURDIR)/$(NGINX_ROOT)" \
		$(VENV)/bin/pytest --ignore=tests/e2e -n $(UNIT_WORKERS) --dist loadgroup --durations=25 -m "$(UNIT_MARKS)" $(PYTEST_ARGS)

# The function's unit tests that need no peer (marked neither podrunner nor peers: no Flower
# process or virtualenv, no Go tool; nor tooling: the tests of hack/, benchmarks/ and the like) on
# another Python, in a venv of its own with the locked dependencies: `make unit-py PY=python3.12`.
# The property tests draw 20 examples each, not 80: the same code, a quarter of their time. hack/stages.py runs it with the newest Python requires-python
# admits. PY must run, not just be found: pyenv puts a shim on PATH for every version it has,
# which fails unless that version is selected too: then the version pyenv installed is run by its own path.
# Without it the lane fails in CI (CI=true) and is skipped, saying so, elsewhere.
unit-py:
	@py="$(PY)"; \
	if ! "$$py" -c '' >/dev/null 2>&1 && command -v pyenv >/dev/null 2>&1; then \
		version=$$(pyenv versions --bare 2>/dev/null | grep -E "^$(patsubst python%,%,$(notdir $(PY)))(\.[0-9]+)?$$" | tail -n 1); \
		if [ -n "$$version" ]; then py="$$(pyenv root)/versions/$$version/bin/$(notdir $(PY))"; fi; \
	fi; \
	if "$$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory unit-py-run PY="$$py"; \
	else \
		echo "unit-py: $(PY) does not run here ($$(command -v $(PY) || echo 'not on PATH'))"; \
		if [ "$$CI" = true ]; then exit 1; fi; echo "unit-py: skipped (in CI, CI=true, this fails)"; \
	fi

unit-py-run: $(PY_VENV)/.installed
	$(PY_VENV)/bin/python --version
	PROPERTY_EXAMPLES=20 $(PY_VENV)/bin/pytest --ignore=tests/e2e -m "not podrunner and not peers and not tooling" \
		-n $(UNIT_WORKERS) --durations=10 $(PYTEST_ARGS)

# Made by uv from the project's venv, as the Flower venvs are: the same locked versions as .venv.
$(PY_VENV)/.installed: pyproject.toml requirements.lock | $(VENV)/.installed
	rm -rf $(dir $@)
	$(UV) venv --quiet --python "$$(command -v $(PY))" $(dir $@)
	$(UV) pip install --quiet --python $(dir $@)bin/python -c requirements.lock -e '.[dev]'
	touch $@

# The runtime image, built without a container daemon (needs root).
$(IMAGE): $(VENV)/.installed hack/build_image.py pyproject.toml requirements.lock $(wildcard function/* function/*/*)
	$(VENV)/bin/python hack/build_image.py $@

# The Crossplane package, with the runtime image embedded.
$(PACKAGE): $(IMAGE) $(CRANK) package/crossplane.yaml $(wildcard package/input/*.yaml) $(wildcard examples/claims/*.yaml)
	mkdir -p $(dir $@)
	$(CRANK) xpkg build --package-root=package --examples-root=examples/claims \
		--embed-runtime-image-tarball=$(IMAGE) -o $@

# The Configuration packages: the XRD and Composition of one flavor, with the
# function and provider-kubernetes as dependencies (apis/crossplane.yaml).
# apis/ holds the v2 flavor's folder too, which the claim flavor leaves out.
$(CONFIGURATION): $(CRANK) $(wildcard apis/*.yaml) $(wildcard examples/claims/*.yaml)
	mkdir -p $(dir $@)
	$(CRANK) xpkg build --package-root=apis --ignore='v2/*' --examples-root=examples/claims -o $@

$(CONFIGURATION_V2): $(CRANK) $(wildcard apis/v2/*.yaml) $(wildcard examples/v2/*.yaml)
	mkdir -p $(dir $@)
	$(CRANK) xpkg build --package-root=apis/v2 --examples-root=examples/v2 -o $@

image: $(IMAGE)
package: $(PACKAGE) $(CONFIGURATION) $(CONFIGURATION_V2)

# The real control plane (Kubernetes, KWOK, Crossplane, provider-kubernetes,
# a registry), built from the versions pinned under tools/.
e2e-tools:
	hack/e2e/build-tools.sh $(E2E_TOOLS)

# One part of them: e2e-tools-common, or e2e-tools-kube-1.NN (one minor's control plane).
e2e-tools-%:
	hack/e2e/build-tools.sh $(E2E_TOOLS) $*

# The product as users run it, on the oldest and newest supported Kubernetes:
# one control plane per minor, side by side (hack/stages.py).
e2e:
	$(PYTHON) hack/stages.py e2e

# One control plane's scenarios (E2E_MINOR=1.NN), once its tools and packages are built.
e2e-run:
	E2E_TOOLS="$(CURDIR)/$(E2E_TOOLS)" FUNCTION_XPKG="$(CURDIR)/$(PACKAGE)" CRANK="$(CURDIR)/$(CRANK)" \
		CONFIGURATION_XPKG="$(CURDIR)/$(CONFIGURATION)" CONFIGURATION_V2_XPKG="$(CURDIR)/$(CONFIGURATION_V2)" \
		FLWR_VENVS="$(CURDIR)/.cache/flwr" NGINX_ROOT="$(CURDIR)/$(NGINX_ROOT)" \
		E2E_MINOR=$(E2E_MINOR) $(VENV)/bin/pytest tests/e2e --durations=0 $(PYTEST_ARGS)

# Everything, stages side by side; each prints its wall time when it ends.
test:
	$(PYTHON) hack/stages.py test

bench: $(VENV)/.installed $(TYPEDGO)
	$(VENV)/bin/python benchmarks/bench.py
	$(VENV)/bin/python benchmarks/bench_clusters.py
	$(VENV)/bin/python benchmarks/bench_vs_go.py

# The property tests' long run: 10,000 fresh examples per invariant (about an hour).
fuzz: $(VENV)/.installed .cache/flwr/$(FLWR_NEWEST)/.installed
	$(VENV)/bin/python benchmarks/fuzz.py --examples $(FUZZ_EXAMPLES) --flwr-python "$(CURDIR)/.cache/flwr/$(FLWR_NEWEST)"/bin/python

clean:
	rm -rf $(VENV) .cache build dist
