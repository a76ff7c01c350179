# Two commands do all the set-up:  `make book`  and  `make test`.
# Both create .venv when it is missing or stale (pyproject.toml changed, or another Python).
PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.ampbook-installed
PROFILE ?=
NOTEBOOKS ?=
EXECUTED := build/executed

.PHONY: book test venv execute html check sync clean gpu-wheels gpucheck-dry

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
	$(VPY) -m booktools.run $(if $(PROFILE),--profile $(PROFILE)) --out $(EXECUTED) $(NOTEBOOKS)

html: $(STAMP)
	$(VPY) -m booktools.book --executed $(EXECUTED) --out build/book

book: execute html

check: $(STAMP)
	$(VPY) -m booktools.bookcheck build/book/_build/html

# The tests run in parallel, one worker per core (pytest-xdist; TEST_JOBS=1 for one
# process), slow ones included (budget: 7 minutes on 2 idle cores). Tests that share
# the book's one smoke execution stay on one worker, and so do the tests of a module
# that share a module-scoped fixture (tests/conftest.py); the rest are dealt out as
# workers free up. The 15 slowest are listed at the end, to see where the time goes.
TEST_JOBS ?= auto

test: $(STAMP)
	$(VPY) -m pytest -n $(TEST_JOBS) --dist loadgroup --durations=15

sync: $(STAMP)
	$(VPY) -m jupytext --sync notebooks/[0-9][0-9]_*.py

clean:
	rm -rf build book/_build

# Wheels for a GPU machine without a package index (python -m booktools.gpucheck installs them
# there): gpu-wheels.txt, for CPython 3.12 on manylinux x86_64, one version each, no
# dependencies resolved by pip (the list names them). Needs pip and PyPI; the venv is not used.
WHEEL_PIP ?= $(PYTHON) -m pip
WHEEL_MAX_MIB := 40
WHEEL_PLATFORMS := manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 \
	manylinux_2_24_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64 manylinux_2_31_x86_64 \
	manylinux_2_34_x86_64 manylinux_2_35_x86_64 manylinux_2_39_x86_64

# The whole GPU check (the lease in one call) on this CPU at tiny sizes, before a GPU session.
gpucheck-dry: $(STAMP)
	rm -rf build/gpucheck-dry
	$(VPY) -m booktools.gpucheck --lease --dry-run --out build/gpucheck-dry

gpu-wheels:
	@rm -rf .whl && mkdir -p .whl
	$(WHEEL_PIP) download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp $(addprefix --platform ,$(WHEEL_PLATFORMS)) -d .whl -r gpu-wheels.txt
	@set -e; n=$$(ls .whl/*.whl | wc -l); want=$$(grep -c '^[A-Za-z0-9]' gpu-wheels.txt); \
	bytes=$$(cat .whl/*.whl | wc -c); mib=$$(( (bytes + 1048575) / 1048576 )); \
	echo "gpu-wheels: $$n wheels in .whl, $$bytes bytes ($$mib MiB; limit $(WHEEL_MAX_MIB) MiB)"; \
	if [ "$$n" -ne "$$want" ]; then echo "error: gpu-wheels.txt lists $$want packages but .whl holds $$n wheels" >&2; exit 1; fi; \
	if [ "$$bytes" -gt $$(( $(WHEEL_MAX_MIB) * 1048576 )) ]; then \
	  echo "error: the wheels take $$mib MiB, over the $(WHEEL_MAX_MIB) MiB limit (the device's working tree must stay under 64 MiB): trim gpu-wheels.txt" >&2; exit 1; fi
