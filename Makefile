# Entry points. Every target is documented in README.md ("Make targets"); a test checks that.
# `make demo` and `make test` set everything up themselves (a virtual environment in .venv).
#
# The files are real targets with their dependencies: the prepared folder $(OUT) (splits and staged
# bundle) <- what it was prepared from and bundle/**/*.py; the zip <- the staged bundle; pipeline.json
# <- the splits and its parameters. `make verify`, `make submit` and the rest build what is missing
# or stale and nothing else.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HARNESS := $(PY) -m harness
# A public Python image by default; CI and the tests pass the offline one (`make docker-base`).
BASE_IMAGE ?= python:3.11-slim

# Real data (make bundle): Spider's database folder (no default: download Spider, see README), the folder of
# its question files (default: train_spider.json and dev.json beside the database folder when both are there,
# else the datasets-server API) and the sizes.
SPIDER_DATABASES ?=
SPIDER_QUESTIONS ?=
# Another corpus (docs/preparing.md, "Other corpora"): a question file in Spider's or BIRD's shape, and the file of
# its eval split when it names one (else eval is on the question file's last databases, held out of training).
# Its shape and field names, more database folders: PREPARE_ARGS="--question-field ... --databases DIR".
QUESTIONS_FILE ?=
EVAL_FILE ?=
ROWS ?= 2000
RL_ROWS ?= 600
EVAL_ROWS ?= 300
OUT ?= out
ZIP ?= $(OUT)/spider-scoring.zip
# `make test`: extra pytest arguments (e.g. PYTEST_ARGS="-k grade -x"); real-data tests read SPIDER_DATA.
PYTEST_ARGS ?=
SPIDER_DATA ?=
# `make test`: pytest-xdist workers, two more than the cores (many tests wait on a container, a
# subprocess or a quarter of a CPU). On the 2-core machine, 2026-12-06 (3,407 tests, checkout): 945 s
# with 3 workers, 843 s with 4, the CPUs 7% idle (docs/development.md).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 2 )))

# The main job on the embedded sample writes here (make demo).
DEMO ?= out/demo

# make splits its variables at spaces, so a path with one would make stray folders (OUT="my out"
# makes ./my and ./out), targets that are not the files meant and split arguments: refuse it before
# anything runs. (The harness itself takes any path: python3 -m harness COMMAND --data "my out".)
space := $(subst ,, )
$(foreach v,OUT ZIP DEMO SPIDER_DATABASES SPIDER_QUESTIONS QUESTIONS_FILE EVAL_FILE SPIDER_DATA COMPLETIONS GRADER_COMPLETIONS EVALUATOR,$(if $(word 2,$($(v))),$(error \
	$(v)="$($(v))": make cannot use a path with a space. Give one without, e.g. $(v)=$(subst $(space),-,$(strip \
	$($(v)))) (for an input you cannot rename, a link: ln -s "$(strip $($(v)))" NEW-PATH); or run the harness \
	itself, which takes any path: python3 -m harness COMMAND --help)))
$(foreach v,OUT ZIP DEMO,$(if $(strip $($(v))),,$(error $(v) is empty: leave it unset for its default)))

PREPARED := $(OUT)/prepare-summary.json
PREPARED_FROM := $(OUT)/prepared-from
PIPELINE := $(OUT)/pipeline.json
BUNDLE_SOURCES := $(wildcard bundle/*.py bundle/*/*.py)
PREPARE_SOURCES := $(wildcard harness/prepare/*.py harness/prepare/neighbours/*.py harness/common/*.py harness/audit/*.py harness/audit/nearmiss/*.py) fixtures/disputed-golds.json
NO_SPIDER := Spider's databases are not given: download Spider (https://yale-lily.github.io/spider, spider.zip), unzip it and pass its database folder, e.g. make bundle SPIDER_DATABASES=~/spider/database; or use the embedded sample: make sample-bundle

.PHONY: FORCE help setup setup-integration setup-ray setup-verifiers setup-nemo-gym setup-openrlhf setup-skyrl bench-ray demo test test-fast bench clean docker-engine docker-base pipeline submit grade report bundle sample-bundle pack audit image verify hooks check-cpu test-grader service-image proxy-image serve loadtest docs lint

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' \
		| sed -e 's|[$$](OUT)|$(OUT)|g' -e 's|[$$](ZIP)|$(ZIP)|g' | sort

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed ## create .venv and install the harness with its test tools

# The trainers' libraries for the integration tests (about 2 GB, torch's CPU build; docs/integrations.md),
# and Ray alone for `grade --ray`.
$(VENV)/.integration: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,integration]'
	touch $@

$(VENV)/.ray: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,ray]'
	touch $@

setup-integration: $(VENV)/.integration ## install the [integration] group into .venv: torch 2.13 CPU, transformers, TRL, verl, Ray (the integration tests need it)

setup-ray: $(VENV)/.ray ## install Ray into .venv (the [ray] extra), for `grade --ray`

# verifiers (prime-rl's environments) in a venv of its own: it pins mcp, whose sse-starlette the
# [integration] group's openreward cannot share (harness/verifiers_env.py; about 850 MB).
VERIFIERS_VENV := .venv-verifiers
$(VERIFIERS_VENV)/.installed:
	$(PYTHON) -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(VERIFIERS_VENV)/bin/python -m pip install -q 'verifiers==0.4.0'
	touch $@

# NeMo Gym 0.7 declares Python 3.13.14 or later, which this project's machines lack; its /verify path
# runs on 3.11, so it is installed from PyPI past that check, then its own requirements (about 1.5 GB).
NEMO_GYM_VENV := .venv-nemo-gym
$(NEMO_GYM_VENV)/.installed:
	$(PYTHON) -m venv $(NEMO_GYM_VENV)
	$(NEMO_GYM_VENV)/bin/python -m pip install -q --upgrade pip
	$(NEMO_GYM_VENV)/bin/python -m pip install -q --no-deps --ignore-requires-python 'nemo-gym==0.7.0'
	$(NEMO_GYM_VENV)/bin/python -c "import importlib.metadata as m; print('\n'.join(r for r in m.requires('nemo-gym') if 'extra ==' not in r))" > $(NEMO_GYM_VENV)/requirements.txt
	$(NEMO_GYM_VENV)/bin/python -m pip install -q -r $(NEMO_GYM_VENV)/requirements.txt
	touch $@

# OpenRLHF's agent classes (openrlhf/utils/agent.py) for the multi-turn agent's test: the package with
# no dependencies into a folder of its own, put on the path of .venv's interpreter, which has torch and
# transformers (OpenRLHF itself pulls deepspeed and vLLM, which a CPU machine has no use for).
OPENRLHF_DIR := .venv-openrlhf
$(OPENRLHF_DIR)/.installed: $(VENV)/.integration
	$(PY) -m pip install -q --no-deps --target $(OPENRLHF_DIR) 'openrlhf==0.11.2' 'pylatexenc==2.10'
	touch $@

# skyrl-gym (SkyRL's environments; pandas, numpy, omegaconf: about 200 MB) in a venv of its own, for the
# multi-turn environment's SkyRL test.
SKYRL_VENV := .venv-skyrl
$(SKYRL_VENV)/.installed:
	$(PYTHON) -m venv $(SKYRL_VENV)
	$(SKYRL_VENV)/bin/python -m pip install -q --upgrade pip
	$(SKYRL_VENV)/bin/python -m pip install -q 'skyrl-gym==0.4.0'
	touch $@

setup-skyrl: $(SKYRL_VENV)/.installed ## make .venv-skyrl with skyrl-gym 0.4.0, for the SkyRL environment's test

setup-openrlhf: $(OPENRLHF_DIR)/.installed ## OpenRLHF 0.11.2's code (no dependencies) in .venv-openrlhf, for its agent's test

setup-nemo-gym: $(NEMO_GYM_VENV)/.installed ## make .venv-nemo-gym with NeMo Gym 0.7.0, for its client's test

setup-verifiers: $(VERIFIERS_VENV)/.installed ## make .venv-verifiers with verifiers 0.4.0, for the verifiers environment's test

test: setup ## run the whole test suite, type check, lint and docs build (docker tests skip, with the reason, where no engine is reachable)
	$(PY) -m mypy
	$(PY) -m ruff check
	$(PY) -m mkdocs build --strict --site-dir $(VENV)/site
	BASE_IMAGE=$(BASE_IMAGE) SPIDER_DATA=$(SPIDER_DATA) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -q --durations=30 $(PYTEST_ARGS)

test-fast: setup ## the suite without slow, docker, real-data and integration tests
	$(PY) -m pytest -n auto --dist loadgroup -q -m "not slow and not docker and not real_data and not integration" $(PYTEST_ARGS)

lint: setup ## type check (mypy) and lint (ruff) bundle/, harness/ and tests/
	$(PY) -m mypy
	$(PY) -m ruff check

# The main job on the embedded sample (fixtures/): no network, no trainer, no Docker.
demo: setup ## the main job on the embedded sample, offline: prepare, pack, verify, emulate reward and grader, grade, report
	$(HARNESS) prepare --sample --output $(DEMO)
	$(HARNESS) pack --data $(DEMO)
	$(HARNESS) verify --in-process --data $(DEMO) --json $(DEMO)/verify.json
	$(HARNESS) emulate reward --in-process --data $(DEMO)
	$(HARNESS) emulate grader --in-process --data $(DEMO) --completions fixtures/sample/completions-eval.jsonl --stage tuned
	$(HARNESS) grade --data $(DEMO) --stage base --completions fixtures/sample/completions-eval-base.jsonl
	$(HARNESS) report --data $(DEMO) base tuned --baseline base --markdown $(DEMO)/report.md --html $(DEMO)/report.html \
		--reward-log tuned=fixtures/sample/reward-log.jsonl
	@echo "demo done: $(DEMO)/ holds the splits, the bundle zip, per-row results (results/) and report.{md,html}"

# `make bench`: ONLY=NAME[,NAME] runs those families (ONLY=prepare times make bundle's prepare); EVALUATOR=DIR (a
# checkout of taoyds/test-suite-sql-eval, outside this repository) times the official evaluator beside the grader;
# PUBLISHED="FILE..." (published systems' dev predictions, one file a system) adds the published family;
# BENCH_ARGS passes other options (e.g. "--quick").
ONLY ?=
EVALUATOR ?=
PUBLISHED ?=
BENCH_ARGS ?=
bench: setup ## print the scorer's benchmark figures on real Spider dev pairs, each family as soon as it is measured: the grader beside the official evaluator (EVALUATOR=DIR), the neighbours' precision and recall on the labelled set... (SPIDER_DATA=DIR; ONLY=labels for some families)
	$(HARNESS) bench $(if $(SPIDER_DATA),--spider $(SPIDER_DATA)) $(if $(ONLY),--only $(ONLY)) $(if $(EVALUATOR),--evaluator $(EVALUATOR)) $(if $(PUBLISHED),--published $(PUBLISHED)) $(BENCH_ARGS)

bench-ray: setup-ray ## print grading throughput on real Spider dev pairs: local backend, Ray with 1 and 2 workers, Ray's start-up cost (SPIDER_DATA=DIR)
	$(HARNESS) bench-ray $(if $(SPIDER_DATA),--spider $(SPIDER_DATA))

# --- the prepared folder: splits and staged bundle -------------------------------------------------
# $(PREPARED_FROM) holds the prepare flags the folder was made from; it is rewritten only when they
# change, so an unchanged `make bundle` does nothing and a changed size prepares again. The sub-make
# that then builds $(PREPARED) is told the flags asked for (WANT_PREPARED_FROM): under `make -n` the file
# is not rewritten, so there the flags differ from it, and the dry run shows the prepare step with them
# instead of "up to date". (The sub-make's line names $(MAKE) itself: only such a line runs under -n.)
define set-prepared-from
	@mkdir -p $(OUT) && printf '%s\n' '$(strip $(1))' > $(PREPARED_FROM).new
	@if cmp -s $(PREPARED_FROM).new $(PREPARED_FROM); then rm $(PREPARED_FROM).new; else mv $(PREPARED_FROM).new $(PREPARED_FROM); fi
endef

BUNDLE_FLAGS = --databases $(SPIDER_DATABASES) $(if $(SPIDER_QUESTIONS),--questions $(SPIDER_QUESTIONS)) \
	$(if $(QUESTIONS_FILE),--questions-file $(QUESTIONS_FILE)) $(if $(EVAL_FILE),--eval-file $(EVAL_FILE)) --rows $(ROWS) \
	--rl-rows $(RL_ROWS) --eval-rows $(EVAL_ROWS) $(PREPARE_ARGS)

bundle: setup ## prepare $(OUT)/data/{train,rl,eval}.jsonl and the staged $(OUT)/bundle from Spider (SPIDER_DATABASES, SPIDER_QUESTIONS, ROWS, RL_ROWS, EVAL_ROWS) or another corpus (QUESTIONS_FILE, EVAL_FILE)
	@test -n "$(SPIDER_DATABASES)" || { echo "make bundle: $(NO_SPIDER)" >&2; exit 2; }
	@test -d "$(SPIDER_DATABASES)" || { echo "make bundle: SPIDER_DATABASES=$(SPIDER_DATABASES) is not a folder. $(NO_SPIDER)" >&2; exit 2; }
	$(call set-prepared-from,$(BUNDLE_FLAGS))
	@$(MAKE) --no-print-directory $(PREPARED) WANT_PREPARED_FROM='$(strip $(BUNDLE_FLAGS))'

sample-bundle: setup ## the same from the embedded sample (fixtures/), offline: $(OUT)/data and $(OUT)/bundle
	$(call set-prepared-from,--sample $(PREPARE_ARGS))
	@$(MAKE) --no-print-directory $(PREPARED) WANT_PREPARED_FROM='$(strip --sample $(PREPARE_ARGS))'

# Chosen when the Makefile is read, not in the recipe: a recipe line naming $(MAKE) runs even under
# `make -n`, so one that may also fail would make a dry run fail. In the sub-make of `bundle` the caller
# has just written $(PREPARED_FROM) (not under `make -n`: then reading it here, which writes nothing, tells
# the flags changed).
ifdef WANT_PREPARED_FROM
ifneq ($(strip $(WANT_PREPARED_FROM)),$(strip $(shell cat $(PREPARED_FROM) 2>/dev/null)))
$(PREPARED): FORCE
endif
$(PREPARED_FROM): ;
else ifneq ($(strip $(SPIDER_DATABASES)),)
$(PREPARED_FROM):
	@$(MAKE) --no-print-directory bundle
else
$(PREPARED_FROM):
	@echo "nothing is prepared in $(OUT) yet. $(NO_SPIDER)" >&2; exit 2
endif

$(PREPARED): $(PREPARED_FROM) $(BUNDLE_SOURCES) $(PREPARE_SOURCES) $(wildcard $(QUESTIONS_FILE) $(EVAL_FILE)) | setup
	$(HARNESS) prepare $(or $(strip $(WANT_PREPARED_FROM)),$$(cat $(PREPARED_FROM))) --output $(OUT)

# --- the zip, the images, verification --------------------------------------------------------------
$(ZIP): $(PREPARED) harness/prepare/pack.py harness/common/bundle_zip.py | setup
	$(HARNESS) pack --data $(OUT) --output $(ZIP)

pack: $(ZIP) ## zip the staged $(OUT)/bundle into $(ZIP) reproducibly, when missing or stale; print its SHA-256
	@$(PY) -c 'import hashlib, sys; print("zip", sys.argv[1], "sha256", hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' $(ZIP)

audit: $(ZIP) ## audit $(ZIP): per policy the share of rl and eval rows a degenerate answer is paid on, the union, the rows (AUDIT_ARGS)
	$(HARNESS) audit --data $(OUT) --zip $(ZIP) $(AUDIT_ARGS)

image: setup ## build the trainer container image on BASE_IMAGE (tagged by a hash of its inputs, built once per change)
	$(HARNESS) image --base-image $(BASE_IMAGE)

verify: $(ZIP) image ## pre-push verification of $(ZIP) with the splits in $(OUT) by the emulated trainer in a locked-down container
	$(HARNESS) verify --data $(OUT) --zip $(ZIP) --base-image $(BASE_IMAGE) $(VERIFY_ARGS)

hooks: setup ## install the git pre-push hook that runs `make verify`
	$(HARNESS) hooks

# The eval rows' answers for test-grader and check-cpu: a completions file, one per eval row; unset, each row's
# own gold (every verdict must be 1.0: the grader path proved on any bundle). The sample's mixed answers:
# GRADER_COMPLETIONS=fixtures/sample/completions-eval.jsonl on a bundle made by `make sample-bundle`.
GRADER_COMPLETIONS ?=
GRADER_ANSWERS = $(if $(GRADER_COMPLETIONS),--completions $(GRADER_COMPLETIONS),--gold-completions)
CPUS ?= 0.25
check-cpu: $(ZIP) image ## the hostile suite, a reward and a grader pass in the container at its usual CPUs and at CPUS (0.25): exit 1 unless every verdict is the same
	$(HARNESS) emulate verdicts --data $(OUT) --zip $(ZIP) $(GRADER_ANSWERS) --cpus $(CPUS) --base-image $(BASE_IMAGE)

test-grader: $(ZIP) image ## the grader job over $(OUT)/data/eval.jsonl in the container with GRADER_COMPLETIONS (default: each row's gold)
	$(HARNESS) emulate grader --data $(OUT) --zip $(ZIP) $(GRADER_ANSWERS) --base-image $(BASE_IMAGE)

# --- pipeline and submission ------------------------------------------------------------------------
# $(OUT)/pipeline-args holds PIPELINE_ARGS, rewritten only when they change: then pipeline.json is
# stale. A recipe (always run, FORCE), not a $(shell ...) when the Makefile is read: `make -n` writes nothing.
$(OUT)/pipeline-args: FORCE
	@mkdir -p $(OUT) && printf '%s\n' '$(strip $(PIPELINE_ARGS))' > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

FORCE:

$(PIPELINE): $(PREPARED) $(OUT)/pipeline-args harness/submit/pipeline.py | setup
	$(HARNESS) pipeline --data $(OUT) --output $(PIPELINE) $(PIPELINE_ARGS)

pipeline: $(PIPELINE) ## write $(OUT)/pipeline.json (base -> SFT -> GRPO, each scored) and validate it against $(OUT)/data (PIPELINE_ARGS)

submit: $(ZIP) $(PIPELINE) ## verify the bundle, register data + bundle, start $(OUT)/pipeline.json on the trainer and wait (DRY_RUN=1: print only)
	$(HARNESS) submit --data $(OUT) --zip $(ZIP) $(if $(DRY_RUN),--dry-run) $(if $(NEW_PIPELINE),--new-pipeline) $(SUBMIT_ARGS)

# --- grading and reports ----------------------------------------------------------------------------
# `make grade STAGE=sft` grades $(OUT)/completions/sft.jsonl (or COMPLETIONS=FILE) into $(OUT)/results/sft.jsonl;
# `make report STAGES="base sft rl" BASELINE=sft` compares them; REPORT_ARGS="--reward-log rl=FILE" adds a run's reward curve.
# Grading uses every core this process may use; WORKERS=N sets the worker processes (WORKERS=1: one process).
WORKERS ?=
grade: $(ZIP) ## grade STAGE's completions ($(OUT)/completions/STAGE.jsonl, or COMPLETIONS=FILE) on $(OUT)/data/eval.jsonl into $(OUT)/results/STAGE.jsonl, on every core (WORKERS=N); the search's databases kept in $(OUT)/cache/search for the next stage (SEARCH_CACHE=DIR|off)
	@test -n "$(STAGE)" || { echo "make grade: give STAGE=<name> (e.g. STAGE=sft)" >&2; exit 2; }
	$(HARNESS) grade --data $(OUT) --zip $(ZIP) --stage $(STAGE) $(if $(COMPLETIONS),--completions $(COMPLETIONS)) $(if $(WORKERS),--workers $(WORKERS)) $(if $(SEARCH_CACHE),--search-cache $(SEARCH_CACHE))

report: setup ## compare STAGES="base sft rl" (their results in $(OUT)/results/) against BASELINE; print the table, write $(OUT)/report.md and $(OUT)/report.html
	@test -n "$(STAGES)" || { echo "make report: give STAGES=\"base sft ...\" (graded with make grade STAGE=...)" >&2; exit 2; }
	$(HARNESS) report --data $(OUT) $(STAGES) $(if $(BASELINE),--baseline $(BASELINE)) --markdown $(OUT)/report.md --html $(OUT)/report.html $(REPORT_ARGS)

# --- grader service ---------------------------------------------------------------------------------
# `make serve`: on 127.0.0.1:8000; `make serve PUBLIC=1`: behind its TLS proxy, published on 127.0.0.1:8443
# (SERVE_ARGS="--listen 0.0.0.0 --server-name HOST --cert FILE --key FILE --token-file FILE" on a public machine).
SERVE_PORT ?=
PUBLIC ?=
service-image: setup ## build the grader service's container image on BASE_IMAGE (offline, from pinned wheels; tagged by a hash of its inputs)
	$(HARNESS) service-image --base-image $(BASE_IMAGE)

proxy-image: setup ## build the grader service's proxy image on BASE_IMAGE (nginx from Debian's packages, offline; tagged by a hash of its inputs)
	$(HARNESS) proxy-image --base-image $(BASE_IMAGE)

serve: $(ZIP) ## serve $(ZIP)'s grader over HTTP in its locked-down container on 127.0.0.1:8000; PUBLIC=1: behind its TLS proxy (Ctrl-C stops it)
	$(HARNESS) serve --zip $(ZIP) $(if $(SERVE_PORT),--port $(SERVE_PORT)) $(if $(PUBLIC),--public) --base-image $(BASE_IMAGE) $(SERVE_ARGS)

loadtest: $(ZIP) ## load-test the grader service on $(ZIP) over loopback (5,000 requests on 32 threads, then with a runaway query every 100th)
	$(HARNESS) loadtest --data $(OUT) --zip $(ZIP) --base-image $(BASE_IMAGE) $(LOADTEST_ARGS)

# --- machine set-up (root) and housekeeping ---------------------------------------------------------
docker-engine: ## install (if needed) and start a local Docker engine (root)
	bash docker/start-engine.sh

docker-base: ## build the offline Debian base images (bookworm: Python 3.11; bullseye: 3.9) with debootstrap (root)
	bash docker/build-base.sh spider-scoring-base:bookworm bookworm
	bash docker/build-base.sh spider-scoring-base:bullseye bullseye

docs: setup ## regenerate the command-line reference (docs/reference/cli.md) and build the docs site strictly into .venv/site
	$(PY) -m harness.commands.docs --write
	$(PY) -m mkdocs build --strict --site-dir $(VENV)/site

clean: ## remove build outputs ($(OUT)/) but not the download cache
	rm -rf $(OUT) build

