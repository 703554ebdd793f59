# Two entry points (see README): `make demo` and `make test`. Both create .venv and install
# the project with everything it needs; nothing has to be installed by hand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   := demo_output
# numba's compiled-kernel cache lives beside the sources (editable install) unless set
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-fast test-sweep coverage bench clean venv

venv: $(STAMP)

# every install takes the pinned versions of constraints.txt (python tools/pins.py update)
$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	# the bundled Wikipedia sample, one document per article section (data/README.md),
	# gensim's English stop words and words of 3+ letters: readable topics, none of them empty
	$(VENV)/bin/ldabeam vectorize --input data/enwiki-sample-sections.jsonl.bz2 --format jsonl \
	    --title-field title --output $(DEMO)/shards --overwrite --holdout-fraction 0.1 \
	    --no-below 3 --no-above 0.2 --stopwords gensim --min-token-len 3
	# the default algorithm (scvb0, S = 100: 14 steps a pass) for 4 passes, evaluated and
	# checkpointed at each pass end; more passes raise the held-out score a little further
	# and lower the top words' NPMI (docs/training.md)
	$(VENV)/bin/ldabeam train --shards $(DEMO)/shards --output $(DEMO)/model --overwrite \
	    --topics 12 --passes 4 --keep-checkpoints 0 --checkpoint-every 14 --eval-every 14
	$(VENV)/bin/ldabeam topics --model $(DEMO)/model --top 8
	$(VENV)/bin/ldabeam evaluate --model $(DEMO)/model --shards $(DEMO)/shards
	$(VENV)/bin/ldabeam report --model $(DEMO)/model --output $(DEMO)/report.html
	@echo
	@echo "Demo results are in $(abspath $(DEMO))/: shards in shards/, the model and its"
	@echo "checkpoints in model/, the training log in model/run_log.jsonl, and the HTML"
	@echo "report in $(abspath $(DEMO))/report.html (its Topic health section: each topic's"
	@echo "share of the tokens and NPMI; dead_topics / effective_topics / npmi are printed above)"

# The whole suite in two runs (both always run; the target fails if either failed): the tests
# that start no worker processes on 2 pytest-xdist workers (a module's tests stay on one
# worker: its fixtures are built once), then the tests marked serial (the multi-process
# DirectRunner, the portable runner, several commands at once: they use both cores
# themselves) one at a time. The 30 slowest test phases of both runs are printed at the end.
# The opt-in sweeps (marker sweep) are make test-sweep's; docs/testing.md has the fast subset.
PARALLEL := -n 2 --dist loadscope
DURATIONS = $(abspath .pytest-durations.jsonl)

test: $(STAMP)
	rm -f $(DURATIONS)
	export LDABEAM_TEST_DURATIONS=$(DURATIONS); \
	$(PY) -m pytest -ra --timeout=1800 $(PARALLEL) -m "not serial" tests; a=$$?; \
	$(PY) -m pytest -ra --timeout=1800 -m serial tests; b=$$?; \
	$(PY) tests/helpers/durations.py $(DURATIONS) 30; rm -f $(DURATIONS); \
	[ $$a -eq 0 ] && [ $$b -eq 0 ]

# while developing: the tests not marked slow (nor serial), on 2 workers
test-fast: $(STAMP)
	$(PY) -m pytest -ra $(PARALLEL) -m "not slow and not serial" tests

# the opt-in sweeps: every arrival of every kill point, kills at random times
test-sweep: $(STAMP)
	LDABEAM_SWEEP=1 $(PY) -m pytest -ra --timeout=7200 -m sweep tests

# line coverage of lda_core/, pipelines/ and ldabeam/ over the whole suite, run as make test
# runs it (child processes, forked ones and xdist workers included: .coveragerc)
coverage: $(STAMP)
	rm -rf .coverage-data && mkdir -p .coverage-data
	$(PY) -m coverage run -m pytest -q -p no:randomly --timeout=3600 $(PARALLEL) -m "not serial" tests || true
	$(PY) -m coverage run -m pytest -q -p no:randomly --timeout=3600 -m serial tests || true
	$(PY) -m coverage combine -q
	$(PY) -m coverage report | tail -n 1

clean:
	rm -rf $(DEMO) .pytest_cache build *.egg-info
