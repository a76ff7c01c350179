# Two commands do all the set-up:  `make book`  and  `make test`.
# Both create .venv when it is missing or stale (pyproject.toml changed, or another Python).
PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.ampbook-installed
PROFILE ?=
NOTEBOOKS ?=
EXECUTED := build/executed

.PHONY: book test venv execute html check sync clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@set -e; want="$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; \
	if [ -x $(VPY) ] && [ "$$($(VPY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$$want" ]; then \
	  echo "$(VENV) was made with another Python: recreating it"; rm -rf $(VENV); fi; \
	if [ ! -x $(VPY) ]; then echo "creating $(VENV) with $(PYTHON) $$want"; $(PYTHON) -m venv $(VENV); fi
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e .
	@touch $(STAMP)

execute: $(STAMP)
	$(VPY) -m ampbook.run $(if $(PROFILE),--profile $(PROFILE)) --out $(EXECUTED) $(NOTEBOOKS)

html: $(STAMP)
	$(VPY) -m ampbook.book --executed $(EXECUTED) --out build/book

book: execute html

check: $(STAMP)
	$(VPY) -m ampbook.bookcheck build/book/_build/html

test: $(STAMP)
	$(VPY) -m pytest

sync: $(STAMP)
	$(VPY) -m jupytext --sync notebooks/[0-9][0-9]_*.py

clean:
	rm -rf build book/_build
