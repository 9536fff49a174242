# Two commands for a newcomer: `make run` (the dashboard) and `make test` (the whole suite).
# Both create .venv when missing and install the requirements (again only when they changed);
# `make test` also provides the browser its browser tests drive (Debian's Chromium).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501
CHROMIUM ?= /usr/bin/chromium
PIP := $(PY) -m pip install --disable-pip-version-check -q

.PHONY: run test bench browser clean

$(STAMP): requirements.txt requirements-nodeps.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -r requirements-nodeps.txt
	@touch $(STAMP)

# a port already taken (a dashboard left open from the last lesson) says how to pick another, where streamlit
# said only "Port 8501 is not available"
run: $(STAMP)
	@$(PY) -c "import socket, sys; p = '$(PORT)'; \
	  p.isdigit() and 0 < int(p) < 65536 or sys.exit(f'PORT: must be a number in [1, 65535], got {p!r}'); \
	  socket.socket().connect_ex(('127.0.0.1', int(p))) or \
	  sys.exit(f'port {p} is in use (a dashboard already running there?): make run PORT={int(p) + 1} starts another')"
	$(PY) -m streamlit run app.py --server.port $(PORT) --server.headless true --browser.gatherUsageStats false

# Chromium from apt when we are root (as on our machines and in CI); otherwise one line saying what to run.
# (LEAKDEMO_TEST_DEVICE=cuda make test runs the engine tests on a GPU and needs no browser)
browser:
	@[ -n "$$LEAKDEMO_TEST_DEVICE" ] || test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get) for the browser tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  else \
	    echo "make test needs Chromium at $(CHROMIUM) for its browser tests: run 'sudo apt-get install chromium', then 'make test' again" >&2; \
	    exit 1; \
	  fi; }
	@[ -n "$$LEAKDEMO_TEST_DEVICE" ] || test -x $(CHROMIUM) || { echo "Chromium is still missing at $(CHROMIUM): run 'sudo apt-get install chromium'" >&2; exit 1; }

test: $(STAMP) browser
	LEAKDEMO_CHROMIUM=$(CHROMIUM) $(PY) -m pytest

bench: $(STAMP)
	$(PY) -m leakdemo bench

clean:
	rm -rf $(VENV) .pytest_cache
