# Two commands do all set-up on a fresh machine (they create .venv with the CPU build of torch):
#   make demo   train NDR on CTL on this CPU (2 processes), print ood_test accuracy, export a hub-ready model
#   make test   run the test suite (what CI runs)
# `make help` lists every target with what it does (the `## ` text on its line).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_CPU := torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
DEMO_DIRECTION ?= forward
DEMO_DIR ?= outputs/ctl_$(DEMO_DIRECTION)_cpu
NPROC ?= 2
DEMO_ARGS ?=

.PHONY: help compare compare-budget release push-release setup demo demo-backward demo-backward-long demo-forward-long \
	demo-backward-bos example-finetune test test-fast test-slow test-gpu test-image-versions lint format \
	bench gpu-session datasets clean docs docs-serve space screenshot gpu-release release-continue release-cooldown \
	release-cooldown-resume \
	compare-tokens compare-ctlpp

setup: $(STAMP) ## create .venv (CPU build of torch), install the package with its test and train extras, unpack transformers' common model tests

help: ## list the targets and what they do
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# the CPU build of torch: its wheel index first (pip's default index gives Linux the CUDA build, gigabytes), the
	@# default index where that cannot be reached; then say which build came and how
	@# (torch alone from that index; its dependencies, as everything else, from pip's own index)
	@if $(BIN)/python -m pip install --quiet --no-deps --timeout 30 --retries 1 --index-url $(TORCH_CPU_INDEX) \
	        $(TORCH_CPU); then \
	    how="installed by: pip install --no-deps --index-url $(TORCH_CPU_INDEX) $(TORCH_CPU)"; \
	else \
	    how="installed by: pip install $(TORCH_CPU), as $(TORCH_CPU_INDEX) could not be reached"; \
	fi; \
	$(BIN)/python -m pip install --quiet $(TORCH_CPU) || exit 1; \
	$(BIN)/python -c "import sys, torch; build = 'the CPU build' if torch.version.cuda is None else \
	    'a CUDA ' + torch.version.cuda + ' build'; print('make setup: torch', torch.__version__, '-', build, '(' + sys.argv[1] + ')')" "$$how"
	$(BIN)/python -m pip install --quiet -e ".[test,train]"
	$(BIN)/python tests/transformers_suite.py  # transformers' common model tests, from its source distribution
	touch $(STAMP)

DEMO_PRESET ?= ctl_cpu

# gloo data parallelism on the CPU: `accelerate launch --cpu` starts one process, so --multi_gpu with
# ACCELERATE_USE_CPU and --use_cpu (without them each process silently trains alone; docs/training.md)
demo: $(STAMP) ## train NDR on CTL on this CPU (2 processes, 6-15 min), print ood_test, export a hub-ready model
	ACCELERATE_USE_CPU=true OMP_NUM_THREADS=1 $(BIN)/accelerate launch --multi_gpu --num_processes $(NPROC) \
	    --num_machines 1 --mixed_precision no --dynamo_backend no \
	    training/train.py --preset $(DEMO_PRESET) --direction $(DEMO_DIRECTION) --use_cpu --ddp_find_unused_parameters false \
	    --output_dir $(DEMO_DIR) $(DEMO_ARGS)

demo-backward: $(STAMP) ## make demo on backward CTL
	$(MAKE) demo DEMO_DIRECTION=backward

# opt-in: 18-30 minutes; the recipe under which backward learns on a CPU (in 15,000 steps for three seeds of five; the
# other two reach 0.91 and 0.995 when continued to 30,000: docs/results/demo.md)
demo-backward-long: $(STAMP) ## opt-in, ~30 min: the long recipe (ctl_cpu_long) on backward CTL (ndr-ctl-backward)
	$(MAKE) demo DEMO_DIRECTION=backward DEMO_PRESET=ctl_cpu_long DEMO_DIR=outputs/ctl_backward_cpu_long

# opt-in: about 33 minutes; the same recipe on forward (ood_test 0.995; make demo, five seeds: 0.83-1.00): ndr-ctl-forward
demo-forward-long: $(STAMP) ## opt-in, ~33 min: the long recipe on forward CTL (ndr-ctl-forward)
	$(MAKE) demo DEMO_DIRECTION=forward DEMO_PRESET=ctl_cpu_long DEMO_DIR=outputs/ctl_forward_cpu_long

# backward in the demo budget (about 11 minutes): the classifier reads [BOS], next to the last-applied function
demo-backward-bos: $(STAMP) ## backward CTL in the demo budget (~11 min) with the classifier on [BOS]
	$(MAKE) demo DEMO_DIRECTION=backward DEMO_PRESET=ctl_backward_bos_cpu DEMO_DIR=outputs/ctl_backward_bos_cpu

# the README's worked example (about 7 min after make demo; docs/results/finetune-example.md): fine-tune the demo model on a new task (CTL with three
# new functions, as jsonl) against the same size trained from scratch, then with the plain Trainer snippet
EXAMPLE_DIR ?= outputs/example_finetune
DEMO_MODEL ?= $(DEMO_DIR)/export
example-finetune: $(STAMP) ## the README's worked example: fine-tune the demo model on a new task (~7 min)
	test -f $(DEMO_MODEL)/config.json || $(MAKE) demo
	OMP_NUM_THREADS=1 $(BIN)/python training/examples/finetune_example.py --demo_model $(DEMO_MODEL) \
	    --output_dir $(EXAMPLE_DIR)

# the paper's variants on CTL, each with its own recipe (configuration/variants/*.yaml, ctl_cpu sections; at most
# about 45 minutes each, about 5 hours in all); writes docs/results/compare_ctl_<direction>.json/.png (+ _details.json,
# _curves.png) and the figure hub_cards/images/ctl_<direction>_comparison.png. Trained in COMPARE_VARIANTS' order, the
# most telling first; an interrupted comparison resumes. COMPARE_DIRECTION=backward for the other direction.
COMPARE_DIRECTION ?= forward
COMPARE_VARIANTS ?= ndr,transformer,absrel_gate,rel_gate,ndr_act,rel,geom_att,transformer_act,ndr_metric
compare: $(STAMP) ## the paper's variants on CTL, each with its own recipe (~5 hours; docs/results/compare_ctl_*)
	$(BIN)/python training/compare.py --preset ctl_cpu --direction $(COMPARE_DIRECTION) --variants $(COMPARE_VARIANTS) \
	    --results_dir docs/results --image hub_cards/images/ctl_$(COMPARE_DIRECTION)_comparison.png
# the budget a variant below 0.95 on iid_test needs (docs/results/ctl-comparison.md): its finished compare run continued
# past its recipe's steps, at its constant learning rate, in outputs/compare_ctl_cpu_<direction>/NAME.budget/, up to
# STEPS steps, until the first evaluation that fits, or for MINUTES (the whole call; default 60); the next call goes on
# where this one stopped. VARIANTS: comma-separated (default: every variant below 0.95); trains no recipe run.
compare-budget: $(STAMP) ## continue VARIANTS below 0.95 on iid_test past their recipe, to STEPS, for MINUTES
	@case "$(origin STEPS)" in "command line"|environment*) ;; *) \
	    echo "make compare-budget: give STEPS=N, the steps to measure up to (e.g. STEPS=150000)" >&2; exit 2;; esac
	$(BIN)/python training/compare.py --preset ctl_cpu --direction $(COMPARE_DIRECTION) --variants $(COMPARE_VARIANTS) \
	    --budget_steps $(STEPS) --budget_minutes $(MINUTES) $(if $(VARIANTS),--budget_variants $(VARIANTS)) \
	    --results_dir docs/results

# the variants on a token task (copy, reverse, addition, carry; TASK, default carry) with the same budget, TOKEN_ARGS
# going to every variant's train.py (default: the carry_cpu preset for carry, strings_cpu for the UT's string tasks,
# --task naming the task); for MINUTES (default 60: the running variant stops with a checkpoint, the next call
# resumes it); writes docs/results/compare_tokens_<TASK>.json/.png
TOKEN_VARIANTS ?= ndr,transformer_act,transformer,rel
TOKEN_TASK = $(if $(filter file undefined,$(origin TASK)),carry,$(TASK))
TOKEN_ARGS ?= --preset $(if $(filter carry,$(TOKEN_TASK)),carry_cpu,strings_cpu)
compare-tokens: $(STAMP) ## the variants on a token task (TASK=carry), the same budget (TOKEN_ARGS), for MINUTES
	OMP_NUM_THREADS=1 $(BIN)/python training/compare_tokens.py --task $(TOKEN_TASK) --variants $(TOKEN_VARIANTS) \
	    --results_dir docs/results $(if $(MINUTES),--minutes $(MINUTES)) -- $(TOKEN_ARGS)

# CTL++ runs on one budget (docs/results/ctlpp.md): CTLPP_MODELS x OVERLAPS (K or KxS: functions shared by the
# 2-stage variant's groups x symbols) x SEEDS on CTLPP_VARIANT, each `train.py --preset ctlpp_cpu` for CTLPP_STEPS;
# for MINUTES (the running run stops with a checkpoint, the next call resumes it); writes
# docs/results/compare_ctlpp_<variant>.json (and _sweep.png, the overlap grid, where a run has an overlap group);
# CTLPP_ARGS go to every run's train.py and CTLPP_LABEL names that setting (its runs beside the plain ones)
CTLPP_VARIANT ?= parallel_branch
CTLPP_MODELS ?= ndr
OVERLAPS ?= 0
SEEDS ?= 42
CTLPP_STEPS ?= 10000
compare-ctlpp: $(STAMP) ## CTL++: models x overlaps x seeds on one budget, the overlap sweep's plot, for MINUTES
	OMP_NUM_THREADS=1 $(BIN)/python training/compare_ctlpp.py --task_variant $(CTLPP_VARIANT) --models $(CTLPP_MODELS) \
	    --overlaps $(OVERLAPS) --seeds $(SEEDS) --max_steps $(CTLPP_STEPS) --results_dir docs/results \
	    $(if $(MINUTES),--minutes $(MINUTES)) $(if $(CTLPP_LABEL),--label $(CTLPP_LABEL)) \
	    $(if $(CTLPP_ARGS),-- $(CTLPP_ARGS))

# what CI runs (.ci/run): the linter, then the test suite, in TEST_WORKERS processes (pytest-xdist; a test file runs
# whole in one of them, its fixtures shared as when run alone); TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2
PYTEST_WORKERS = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: lint ## the linter, then the test suite (what CI runs), naming its 20 slowest tests
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) --durations=20

test-fast: lint ## the linter and the unit tier only (tests/unit: no training runs, a few minutes)
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) tests/unit

lint: $(STAMP) ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP) ## ruff format, then ruff check --fix (what lint checks, fixed where ruff can)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test-slow: $(STAMP) ## the opt-in long tests (-m slow)
	$(BIN)/python -m pytest -q -m slow

test-gpu: $(STAMP) ## the CUDA tests and the Triton kernels' (-m "gpu or triton"; the CUDA ones skip without a GPU)
	$(BIN)/python -m pytest -q -m "gpu or triton"

# The GPU image's library versions (docs/clusters.md#the-gpu-image), tried on this CPU: make test in a second
# virtualenv, .venv-image/, with the image's pins. Two differences, as this machine allows: torch 2.13.0's CPU build
# (PyPI has torch 2.11.0 only as the CUDA 13 build, with GBs of nvidia-* wheels) and this machine's Python 3.11, where
# numpy 2.5 does not install (it needs 3.12): numpy 2.4.6. As long as make test, plus a minute or two of installing.
IMAGE_VENV := .venv-image
IMAGE_PINS := torch==2.13.0 transformers==5.17.0 accelerate==1.15.0 huggingface_hub==1.33.0 safetensors==0.8.0 \
	tokenizers==0.23.2 triton==3.6.0 numpy==2.4.6 datasets==5.2.0 evaluate==0.4.6 dill==0.4.1 multiprocess==0.70.19
test-image-versions: ## make test's suite with the GPU image's library versions, in .venv-image/
	test -x $(IMAGE_VENV)/bin/python || $(PYTHON) -m venv $(IMAGE_VENV)
	$(IMAGE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(IMAGE_VENV)/bin/python -m pip install --quiet $(IMAGE_PINS) -e ".[test,train]"
	$(IMAGE_VENV)/bin/python tests/transformers_suite.py
	touch $(IMAGE_VENV)/.installed
	$(IMAGE_VENV)/bin/python -m pip freeze --exclude-editable > $(IMAGE_VENV)/versions.txt
	@# make test's suite, its own make calls on .venv-image too (VENV); not its lint (ruff is pinned: the same here)
	$(MAKE) -o lint test VENV=$(IMAGE_VENV)

bench: $(STAMP) ## the benchmarks (benchmarks/run_all.py)
	$(BIN)/python benchmarks/run_all.py

# a GPU's time box (docs/clusters.md): on a CUDA machine with no network, with its own python (no make setup), the
# wheels of .whl/ it lacks (../shared/gpu/fetch_wheels.sh), the CUDA and Triton tests, the GPU benchmarks and what
# make gpu-release runs (its script, no make) on a copy of the release furthest from its target kept under outputs/,
# each step time-boxed; OUT gets at most 8 files of at most 16 MiB.
# NO_CUDA=1: the dry run on the CPU (tiny sizes; a tiny preset through GPU_RELEASE_ARGS)
OUT ?= outputs/gpu_session_out
NO_CUDA ?=
GPU_SESSION_ARGS ?=
# MINUTES from the command line or the environment; else 9 (the release targets' default is theirs)
SESSION_MINUTES = $(if $(filter file,$(origin MINUTES)),9,$(MINUTES))
gpu-session: ## a GPU's MINUTES (default 9): the release furthest from its target first, then CUDA tests and benchmarks, into OUT
	$(PYTHON) hub_cards/gpu_session.py --out $(OUT) --minutes $(SESSION_MINUTES) --release_args '$(GPU_RELEASE_ARGS)' \
	    $(if $(NO_CUDA),--dry_run) $(GPU_SESSION_ARGS)

# the dataset repositories in hub_cards/datasets/ (parquet splits + cards); about 3 minutes (ListOps' 1M-row train)
datasets: $(STAMP) ## the dataset repositories in hub_cards/datasets/ (~3 min)
	$(BIN)/python hub_cards/make_dataset_repos.py

# the released models in hub_cards/models/ (trains the runs that are missing: make demo-forward-long,
# make demo-backward-long, the arithmetic_cpu and listops_cpu presets), and their upload with the modeling code (needs a
# network and a token)
release: $(STAMP) ## the released models in hub_cards/models/ (trains the runs that are missing)
	$(BIN)/python hub_cards/make_model_repos.py --train
# releases that keep training: resume the training line of hub_cards/models/ndr-<TASK> (its last-checkpoint/) for
# MINUTES, keep the new last-checkpoint/, and replace the release only when ood_valid improved (docs/training.md).
# release-continue trains on this CPU (2 gloo processes, configuration/<task>_cpu_continue.yaml); gpu-release on this
# machine's GPUs: the line's own recipe and global batch (the task's GPU preset, the paper's recipe, where the release
# has no line), so separate GPU windows add up to one run. release-cooldown: a branch of the line whose learning
# rate decays to 0, released if it is better; the line stays where it is; release-cooldown-resume goes on with a
# branch that its time box cut (the release's cooldown-checkpoint/).
TASK ?= listops
MINUTES ?= 60
RELEASE_ARGS ?=
GPU_RELEASE_ARGS ?=
release-continue: $(STAMP) ## keep training the release of TASK on this CPU for MINUTES (e.g. TASK=arithmetic MINUTES=150)
	$(BIN)/python hub_cards/make_model_repos.py --continue $(TASK) --minutes $(MINUTES) $(RELEASE_ARGS)
STEPS ?= 4000
release-cooldown: $(STAMP) ## a branch of TASK's line whose learning rate decays to 0 over STEPS; released if ood_valid improved
	$(BIN)/python hub_cards/make_model_repos.py --cooldown $(TASK) --steps $(STEPS) $(RELEASE_ARGS)
release-cooldown-resume: $(STAMP) ## train on TASK's cooldown branch that a time box cut (its cooldown-checkpoint/)
	$(BIN)/python hub_cards/make_model_repos.py --cooldown $(TASK) --resume_branch $(RELEASE_ARGS)
gpu-release: $(STAMP) ## keep training the paper-size model of TASK on this machine's GPU(s) for MINUTES
	$(BIN)/python hub_cards/make_model_repos.py --gpu $(TASK) --minutes $(MINUTES) $(GPU_RELEASE_ARGS)
ORG ?= ndr-org
push-release: $(STAMP) ## upload the released models to ORG (needs a network and a token)
	$(BIN)/python hub_cards/make_model_repos.py --push --org $(ORG)

# the documentation site (mkdocs.yml, docs/): make test builds it too (tests/e2e/test_docs.py)
docs: $(STAMP) ## build the documentation site strictly into site/
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP) ## serve the documentation site at http://127.0.0.1:8000, rebuilt on every change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# the routing explorer Space with the released folders of hub_cards/models/
SPACE_PORT ?= 7860
space: $(STAMP) ## the routing explorer (a Gradio Space) at http://127.0.0.1:7860
	GRADIO_ANALYTICS_ENABLED=False GRADIO_SERVER_PORT=$(SPACE_PORT) $(BIN)/python hub_cards/spaces/ndr-routing/app.py

# needs Debian's chromium (apt-get install chromium); not part of make test
screenshot: $(STAMP) ## a screenshot of the routing explorer for the docs (docs/images/routing_explorer.png)
	$(BIN)/python hub_cards/spaces/screenshot.py --out docs/images/routing_explorer.png

clean: ## remove .venv, outputs/ and runs/
	rm -rf $(VENV) outputs runs
