# Two commands for a newcomer: `make run` (the dashboard) and `make test` (the whole suite).
# Both create .venv when missing and install requirements.txt (again only when it changed).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501

.PHONY: run test bench clean

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m streamlit run app.py --server.port $(PORT) --server.headless true --browser.gatherUsageStats false

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m leakdemo bench

clean:
	rm -rf $(VENV) .pytest_cache
