# Two entry points (see README): `make demo` and `make test`. Both create .venv and install
# the project with everything it needs; nothing has to be installed by hand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   := demo_output
# numba's compiled-kernel cache lives beside the sources (editable install) unless set
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-fast bench clean venv

venv: $(STAMP)

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ldabeam vectorize --output $(DEMO)/shards --holdout-fraction 0.1 \
	    --no-below 2 --no-above 0.5
	@if $(PY) -c "import pipelines.commands.train" 2>/dev/null; then \
	  $(VENV)/bin/ldabeam train --shards $(DEMO)/shards --output $(DEMO)/model --topics 20 \
	      --passes 5 --minibatch 64 && \
	  $(VENV)/bin/ldabeam topics --model $(DEMO)/model --top 8 2>/dev/null || true; \
	  $(VENV)/bin/ldabeam evaluate --model $(DEMO)/model --shards $(DEMO)/shards; \
	fi
	@echo
	@echo "Demo results are in $(abspath $(DEMO))/ (shards: $(abspath $(DEMO))/shards)"

test: $(STAMP)
	$(PY) -m pytest -ra --timeout=1800 tests

test-fast: $(STAMP)
	$(PY) -m pytest -ra -m "not slow" tests

clean:
	rm -rf $(DEMO) .pytest_cache build *.egg-info
