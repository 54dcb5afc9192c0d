# The two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test clean

run: $(STAMP)
	$(BIN)/python -m shared.devrun

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Reinstall whenever the dependencies change.
$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) .dev .pytest_cache .hypothesis
