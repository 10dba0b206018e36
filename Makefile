# Two commands do all set-up on a fresh machine (they create .venv with the CPU build of torch):
#   make demo   train NDR on CTL on this CPU (2 processes), print ood_test accuracy, export a hub-ready model
#   make test   run the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_CPU := torch==2.13.0
DEMO_DIRECTION ?= forward
DEMO_DIR ?= outputs/ctl_$(DEMO_DIRECTION)_cpu
NPROC ?= 2
DEMO_ARGS ?=

.PHONY: compare release push-release setup demo demo-backward demo-backward-long demo-forward-long demo-backward-first test test-slow lint bench datasets clean

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_CPU)
	$(BIN)/python -m pip install --quiet -e ".[test,train]"
	touch $(STAMP)

DEMO_PRESET ?= ctl_cpu

# gloo data parallelism on the CPU: ACCELERATE_USE_CPU and --use_cpu are both needed (see HF_NOTES)
demo: $(STAMP)
	ACCELERATE_USE_CPU=true OMP_NUM_THREADS=1 $(BIN)/accelerate launch --multi_gpu --num_processes $(NPROC) \
	    --num_machines 1 --mixed_precision no --dynamo_backend no \
	    training/train.py --preset $(DEMO_PRESET) --direction $(DEMO_DIRECTION) --use_cpu --ddp_find_unused_parameters false \
	    --output_dir $(DEMO_DIR) $(DEMO_ARGS)

demo-backward: $(STAMP)
	$(MAKE) demo DEMO_DIRECTION=backward

# opt-in: about 30 minutes; the recipe under which backward does learn on this CPU
demo-backward-long: $(STAMP)
	$(MAKE) demo DEMO_DIRECTION=backward DEMO_PRESET=ctl_backward_cpu_long DEMO_DIR=outputs/ctl_backward_cpu_long

# opt-in: about 33 minutes; the same recipe on forward (ood_test 0.995; make demo: 0.87-0.98): ndr-ctl-forward
demo-forward-long: $(STAMP)
	$(MAKE) demo DEMO_DIRECTION=forward DEMO_PRESET=ctl_backward_cpu_long DEMO_DIR=outputs/ctl_forward_cpu_long

# backward in the demo budget (about 11 minutes): the classifier reads [BOS], next to the last-applied function
demo-backward-first: $(STAMP)
	$(MAKE) demo DEMO_DIRECTION=backward DEMO_PRESET=ctl_backward_first_cpu DEMO_DIR=outputs/ctl_backward_first_cpu

# the README's worked example (about 10 min after make demo): fine-tune the demo model on a new task (CTL with three
# new functions, as jsonl) against the same size trained from scratch, then with the plain Trainer snippet
EXAMPLE_DIR ?= outputs/example_finetune
DEMO_MODEL ?= $(DEMO_DIR)/export
example-finetune: $(STAMP)
	test -f $(DEMO_MODEL)/config.json || $(MAKE) demo
	OMP_NUM_THREADS=1 $(BIN)/python training/examples/finetune_example.py --demo_model $(DEMO_MODEL) \
	    --output_dir $(EXAMPLE_DIR)

# the paper's variants on CTL with the CPU preset's budget (about 75 minutes per direction); COMPARE_DIRECTION=backward
COMPARE_DIRECTION ?= forward
compare: $(STAMP)
	$(BIN)/python training/compare.py --preset ctl_cpu --direction $(COMPARE_DIRECTION)

# what CI runs (.ci/run): the linter, then the test suite
test: lint
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

# the dataset repositories in hub_cards/datasets/ (parquet splits + cards); about 3 minutes (ListOps' 1M-row train)
datasets: $(STAMP)
	$(BIN)/python hub_cards/make_dataset_repos.py

# the released models in hub_cards/models/ (trains the runs that are missing: make demo-forward-long,
# make demo-backward-long, the arithmetic_cpu and listops_cpu presets), and their upload with the modeling code (needs a
# network and a token)
release: $(STAMP)
	$(BIN)/python hub_cards/make_model_repos.py --train
ORG ?= ndr-org
push-release: $(STAMP)
	$(BIN)/python hub_cards/make_model_repos.py --push --org $(ORG)

clean:
	rm -rf $(VENV) outputs runs
