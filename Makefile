PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
# torch is pinned so that a CPU-only machine gets the CPU build (an unpinned torch pulls a multi-GB CUDA build).
TORCH_CPU ?= torch==2.13.0
WHEELS ?= wheels

.PHONY: install install-dev install-docs install-offline test test-gpu docs docs-cli demo readme-plots lint

install:
	$(PIP) install -q $(TORCH_CPU) triton==3.6.0
	$(PIP) install -q -e .

install-dev: install
	$(PIP) install -q -e ".[dev]"

# Offline install of the peer bundle made by `tflabench bundle --dest wheels/` (no network needed).
install-offline:
	$(PIP) install --no-index --no-deps $(WHEELS)/*.whl

install-docs: install
	$(PIP) install -q -e ".[dev,docs]"

# The test suite on the CPU (Triton interpreter), then the documentation site: `mkdocs build --strict`
# fails on a broken link, a page missing from the navigation or a stale command reference.
test: install-docs
	TRITON_INTERPRET=1 $(PYTHON) -m pytest -q
	$(MAKE) docs

# The documentation site under build/site/ (mkdocs.yml; open build/site/index.html).
docs:
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict --quiet

# Regenerate docs/commands.md from the command-line app (after adding or changing a command).
docs-cli:
	$(PYTHON) -m tflabench.cli_reference --output docs/commands.md

test-gpu:
	$(PYTHON) -m pytest -q -m gpu

# The main job: analysis commands, a small sweep of our Triton kernels (CPU interpreter without a GPU),
# its plots and report, under results/_scratch/demo/.
demo: install
	$(PYTHON) -m tflabench demo

# The README's plots and the side-by-side report, from the committed H200 results (no GPU needed).
readme-plots:
	$(PYTHON) scripts/tfla_json_to_run.py
	$(PYTHON) -m tflabench plot results/h200/tfla-vs-reference/run
	$(PYTHON) -m tflabench report results/h200/tfla-vs-reference/run
	$(PYTHON) -m tflabench plot results/h200/tfla-fig4 --kind runtime,roofline --format png --out results/readme-plots/tfla-fig4
	$(PYTHON) -m tflabench plot results/h200/tfla-fig5 --kind memory,model --format png --out results/readme-plots/tfla-fig5
	$(PYTHON) -m tflabench plot results/h200/tfla-headdim --kind headdim --format png --out results/readme-plots/tfla-headdim

lint:
	$(PYTHON) -m ruff check tflabench tests
