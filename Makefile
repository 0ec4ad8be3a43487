# Every target bootstraps what it needs on a fresh machine (Python 3.11, Go).
PYTHON ?= python3
VENV := .venv
FLWR_VENV := .venv-flwr
CRANK := .cache/bin/crank
CELCHECK := .cache/bin/celcheck
CRDCHECK := .cache/bin/crdcheck
EXAMPLE ?= examples/claims/statefulset-subprocess.yaml

.PHONY: render test serve crank generate bench image-check clean

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

# Flower pins protobuf below 7, the function SDK above: Flower gets its own venv.
$(FLWR_VENV)/.installed: tests/flwr-requirements.txt
	$(PYTHON) -m venv $(FLWR_VENV)
	$(FLWR_VENV)/bin/pip install --quiet -r tests/flwr-requirements.txt
	touch $@

# The Crossplane CLI, built from the Go module proxy at the version tools/crank pins.
$(CRANK): tools/crank/go.mod tools/crank/go.sum
	mkdir -p $(dir $(CRANK))
	cd tools/crank && go build -o $(abspath $(CRANK)) github.com/crossplane/crossplane/v2/cmd/crank

# cel-go, as provider-kubernetes evaluates readiness queries, for the tests.
$(CELCHECK): tools/crank/go.mod tools/crank/go.sum tools/crank/celcheck/main.go
	mkdir -p $(dir $(CELCHECK))
	cd tools/crank && go build -o $(abspath $(CELCHECK)) ./celcheck

# The API server's own CRD validation (CEL cost budget included), for the tests.
$(CRDCHECK): tools/crank/go.mod tools/crank/go.sum tools/crank/crdcheck/main.go
	mkdir -p $(dir $(CRDCHECK))
	cd tools/crank && go build -o $(abspath $(CRDCHECK)) ./crdcheck

crank: $(CRANK)

render: $(VENV)/.installed
	$(VENV)/bin/function render $(EXAMPLE)

serve: $(VENV)/.installed
	$(VENV)/bin/function serve --insecure --debug

generate: $(VENV)/.installed
	$(VENV)/bin/python hack/gen_xrd.py
	$(VENV)/bin/python hack/gen_k8s_schemas.py

test: $(VENV)/.installed $(FLWR_VENV)/.installed $(CRANK) $(CELCHECK) $(CRDCHECK)
	CRANK=$(abspath $(CRANK)) CELCHECK=$(abspath $(CELCHECK)) CRDCHECK=$(abspath $(CRDCHECK)) \
		FLWR_PYTHON=$(abspath $(FLWR_VENV))/bin/python \
		$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/bench.py

clean:
	rm -rf $(VENV) $(FLWR_VENV) .cache build dist
