PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
# torch is pinned so that a CPU-only machine gets the CPU build (an unpinned torch pulls a multi-GB CUDA build).
TORCH_CPU ?= torch==2.13.0
WHEELS ?= wheels

.PHONY: install install-dev install-offline test test-gpu demo lint

install:
	$(PIP) install -q $(TORCH_CPU) triton==3.6.0
	$(PIP) install -q -e .

install-dev: install
	$(PIP) install -q -e ".[dev]"

# Offline install of the peer bundle made by `tflabench bundle --dest wheels/` (no network needed).
install-offline:
	$(PIP) install --no-index --no-deps $(WHEELS)/*.whl

test: install-dev
	TRITON_INTERPRET=1 $(PYTHON) -m pytest -q

test-gpu:
	$(PYTHON) -m pytest -q -m gpu

demo: install
	$(PYTHON) -m tflabench demo

lint:
	$(PYTHON) -m ruff check tflabench tests
