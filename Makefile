# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv if missing and
# installs the package with what it needs; both are quick when that is already done.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.fpsim-installed

.PHONY: demo figures test install lint bench verify lessons clean-cache clean browser explore explore-figure

# The test set-up includes PyTorch (the `torch` extra, pinned to torch==2.13.0) for the live
# comparisons of tests/test_torch_parity.py and others: pip on these machines resolves that pin
# to a local CPU build (no multi-GB download). A plain `pip install .` needs no torch.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,bench,torch]"
	touch $(STAMP)

install: $(STAMP)

# Trains a small model in fp32, fp16 and fp16 with loss scaling (seconds), prints how many true
# gradients fp16 lost, and writes its four figures to figures/ (the committed ones: fixed seeds,
# no version metadata, so on the same numpy/matplotlib they come out byte for byte the same).
demo: $(STAMP)
	$(PY) -m fpsim.demo underflow

# Regenerates every figure in figures/ that the README and the lessons use (fpsim/demo/figures.py:
# the drawing demos on their default settings, plus the static format / bit-field / number-line
# figures); about 20 s.
figures: $(STAMP)
	$(PY) -m fpsim.demo figures

lint: $(STAMP)
	$(PY) -m ruff check .

# The explorer's browser tests (tests/test_explore_browser.py) drive Debian's chromium through
# chromedriver. Where they are missing and this runs as root with apt (a fresh CI machine), they
# are installed (about 3 minutes); elsewhere those tests skip and say why.
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium and chromium-driver for the browser tests"; \
		apt-get update -q >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; \
	else \
		echo "chromium/chromedriver missing (not root, or no apt): the browser tests will skip"; \
	fi

# The CUDA tests run in their own process: NUMBA_ENABLE_CUDASIM must be set before numba.cuda is
# first imported (tests/cudasim/conftest.py sets it unless the environment already chose).
# `-n auto --dist worksteal` (pytest-xdist): one worker per core, idle workers take tests queued
# on busy ones, so the few long tests (lessons, demos) do not leave a core waiting at the end.
test: $(STAMP) lint browser
	$(PY) -m pytest -q -n auto --dist worksteal --ignore=tests/cudasim \
		--doctest-glob=README.md tests fpsim README.md
	$(PY) -m pytest -q -n auto --dist worksteal tests/cudasim

# Jupyter, nbconvert (to run a lesson headless) and ipywidgets come with the lessons extra.
lessons: $(STAMP)
	$(PY) -m pip install --quiet -e ".[lessons]"
	$(PY) -m jupyter lab lessons/

# The bit explorer in the browser (fpsim.explore): prints its address and opens the page.
explore: $(STAMP)
	$(PY) -m fpsim.explore

# figures/explore.png, the README's screenshot, taken by the browser tests in headless Chromium.
explore-figure: $(STAMP) browser
	FPSIM_EXPLORE_FIGURE=figures/explore.png $(PY) -m pytest -q tests/test_explore_browser.py \
		-k small_format

bench: $(STAMP)
	$(PY) benchmarks/bench_round.py
	$(PY) benchmarks/bench_bits.py
	$(PY) benchmarks/bench_arith.py
	$(PY) benchmarks/bench_train.py
	$(PY) benchmarks/bench_scaling.py
	$(PY) benchmarks/bench_torch_watch.py

verify: $(STAMP)
	$(PY) benchmarks/verify_exhaustive.py
	FPSIM_VERIFY=1 $(PY) -m pytest -q tests/test_optim_bitexact.py -k optimizer_bit_identical

# numba's on-disk cache is keyed on the file that holds each kernel; after editing
# fpsim/kernels/scalar.py alone, clear it so the kernels in cpu.py are recompiled.
clean-cache:
	find fpsim -name __pycache__ -type d -prune -exec rm -rf {} +

clean: clean-cache
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
