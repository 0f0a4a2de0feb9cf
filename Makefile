# Entry points. Every target is documented in README.md ("Make targets"); a test checks that.
# `make demo` and `make test` set everything up themselves (a virtual environment in .venv).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HARNESS := $(PY) -m harness
BASE_IMAGE ?= spider-scoring-base:bookworm

# Real data (make bundle): the Spider databases folder and the split sizes.
SPIDER_DATABASES ?= ../shared/spider/database
ROWS ?= 2000
RL_ROWS ?= 600
EVAL_ROWS ?= 300
OUT ?= out

.PHONY: help setup demo test docs test-fast bench clean docker-engine docker-base pipeline submit grade report bundle sample-bundle pack image verify hooks test-grader service-image serve loadtest

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed ## create .venv and install the harness with its test tools

test: setup ## run the whole test suite (docker tests skip, with the reason, where no engine is reachable)
	$(PY) -m pytest -n auto -q

test-fast: setup ## the suite without slow, docker and real-data tests
	$(PY) -m pytest -n auto -q -m "not slow and not docker and not real_data"

# The main job on the embedded sample (fixtures/): no network, no trainer, no Docker.
DEMO ?= out/demo
demo: setup ## the main job on the embedded sample, offline: prepare, pack, verify, emulate reward and grader, grade, report
	$(HARNESS) prepare --sample --out $(DEMO)
	$(HARNESS) pack --out $(DEMO) --output $(DEMO)/spider-scoring.zip
	$(HARNESS) verify --in-process --zip $(DEMO)/spider-scoring.zip --out $(DEMO) --report $(DEMO)/verify.json
	$(HARNESS) emulate reward --in-process --zip $(DEMO)/spider-scoring.zip --out $(DEMO)
	$(HARNESS) emulate grader --in-process --zip $(DEMO)/spider-scoring.zip --out $(DEMO) \
		--completions fixtures/sample/completions-eval.jsonl --results $(DEMO)/results-tuned.jsonl
	$(HARNESS) grade --bundle $(DEMO)/spider-scoring.zip --eval $(DEMO)/data/eval.jsonl \
		--completions fixtures/sample/completions-eval-base.jsonl --out $(DEMO)/results-base.jsonl
	$(HARNESS) report base=$(DEMO)/results-base.jsonl tuned=$(DEMO)/results-tuned.jsonl --baseline base \
		--markdown $(DEMO)/report.md --html $(DEMO)/report.html
	@echo "demo done: $(DEMO)/ holds the splits, the bundle zip, per-row results and report.{md,html}"

bench: setup ## print the scorer's benchmark figures on real Spider dev pairs
	$(PY) -m harness bench

# Data preparation (README "Real use: preparing Spider"). PREPARE_ARGS passes extra options
# (e.g. PREPARE_ARGS="--max-schema 700 --keep-empty-gold"); the API's pages are cached in .cache/.
bundle: setup ## prepare $(OUT)/data/{train,rl,eval}.jsonl and the staged $(OUT)/bundle from Spider (ROWS, RL_ROWS, EVAL_ROWS, SPIDER_DATABASES)
	$(HARNESS) prepare --databases $(SPIDER_DATABASES) --rows $(ROWS) --rl-rows $(RL_ROWS) --eval-rows $(EVAL_ROWS) --out $(OUT) $(PREPARE_ARGS)

sample-bundle: setup ## the same from the embedded sample (fixtures/), offline: $(OUT)/data and $(OUT)/bundle
	$(HARNESS) prepare --sample --out $(OUT) $(PREPARE_ARGS)

# Packing, the emulated trainer and pre-push verification (README "Packing", "Emulated trainer",
# "Pre-push verification", "Docker"). VERIFY_ARGS passes extra options (e.g. "--in-process").
ZIP ?= dist/spider-scoring.zip
GRADER_COMPLETIONS ?= fixtures/sample/completions-eval.jsonl
pack: setup ## zip the staged $(OUT)/bundle into $(ZIP) reproducibly; print its SHA-256 and sizes
	$(HARNESS) pack --out $(OUT) --output $(ZIP)

image: setup ## build the trainer container image on BASE_IMAGE (tagged by a hash of its inputs, built once per change)
	$(HARNESS) image --base-image $(BASE_IMAGE)

verify: pack image ## pre-push verification of $(ZIP) with $(OUT)/data by the emulated trainer in a locked-down container
	$(HARNESS) verify --zip $(ZIP) --out $(OUT) --base-image $(BASE_IMAGE) $(VERIFY_ARGS)

hooks: setup ## install the git pre-push hook that runs `make verify`
	$(HARNESS) hooks

test-grader: pack image ## the grader job over $(OUT)/data/eval.jsonl in the container with GRADER_COMPLETIONS (the sample's)
	$(HARNESS) emulate grader --zip $(ZIP) --out $(OUT) --completions $(GRADER_COMPLETIONS) --base-image $(BASE_IMAGE)

# Pipeline and submission (README "Pipeline and submission"). PIPELINE_ARGS / SUBMIT_ARGS pass
# extra options (e.g. PIPELINE_ARGS="--rl-max-steps 80"); DRY_RUN=1 prints the commands only.
pipeline: setup ## write $(OUT)/pipeline.json (base -> SFT -> GRPO, each scored) and validate it against $(OUT)/data
	$(HARNESS) pipeline --out $(OUT) $(PIPELINE_ARGS)

submit: setup ## verify the bundle, register data + bundle, start $(OUT)/pipeline.json on the trainer and wait (DRY_RUN=1: print only)
	$(HARNESS) submit --out $(OUT) $(if $(DRY_RUN),--dry-run) $(if $(NEW_PIPELINE),--new-pipeline) $(SUBMIT_ARGS)

# Grading and reports (README "Grading and reports"). `make grade STAGE=sft` grades
# $(OUT)/completions-sft.jsonl (or COMPLETIONS=...) into $(OUT)/results-sft.jsonl;
# `make report RESULTS="base=out/results-base.jsonl sft=out/results-sft.jsonl" BASELINE=sft`.
GRADE_BUNDLE ?= $(OUT)/bundle
COMPLETIONS ?= $(OUT)/completions-$(STAGE).jsonl
grade: setup ## grade COMPLETIONS (default $(OUT)/completions-$(STAGE).jsonl) on $(OUT)/data/eval.jsonl into $(OUT)/results-$(STAGE).jsonl
	@test -n "$(STAGE)" || { echo "make grade: give STAGE=<name> (e.g. STAGE=sft)"; exit 2; }
	$(HARNESS) grade --bundle $(GRADE_BUNDLE) --eval $(OUT)/data/eval.jsonl --completions $(COMPLETIONS) --out $(OUT)/results-$(STAGE).jsonl

report: setup ## compare RESULTS="label=path ..." against BASELINE; print the table, write $(OUT)/report.md and $(OUT)/report.html
	$(HARNESS) report $(RESULTS) $(if $(BASELINE),--baseline $(BASELINE)) --markdown $(OUT)/report.md --html $(OUT)/report.html $(REPORT_ARGS)

# Grader service (README "Grader service (http: graders)"). SERVE_ARGS / LOADTEST_ARGS pass extra
# options (e.g. SERVE_ARGS="--workers 4 --local", LOADTEST_ARGS="--requests 1000 --docker").
SERVE_PORT ?= 8000
service-image: setup ## build the grader service's container image on BASE_IMAGE (offline, from pinned wheels; tagged by a hash of its inputs)
	$(HARNESS) service-image --base-image $(BASE_IMAGE)

serve: pack ## serve $(ZIP)'s grader over HTTP in its locked-down container on 127.0.0.1:$(SERVE_PORT) (Ctrl-C stops it)
	$(HARNESS) serve --zip $(ZIP) --port $(SERVE_PORT) --base-image $(BASE_IMAGE) $(SERVE_ARGS)

loadtest: pack ## load-test the grader service on $(ZIP) over loopback (5,000 requests at concurrency 32, then with a runaway query every 100th)
	$(HARNESS) loadtest --zip $(ZIP) --out $(OUT) --base-image $(BASE_IMAGE) $(LOADTEST_ARGS)

docker-engine: ## install (if needed) and start a local Docker engine (root)
	bash docker/start-engine.sh

docker-base: ## build the offline Debian base images (bookworm: Python 3.11; bullseye: 3.9) with debootstrap (root)
	bash docker/build-base.sh $(BASE_IMAGE) bookworm
	bash docker/build-base.sh spider-scoring-base:bullseye bullseye

docs: setup ## regenerate README's command-line reference from the commands' own options
	$(PY) -m harness.commands.docs --write

clean: ## remove build outputs (out/, dist/) but not the download cache
	rm -rf $(OUT) dist build
