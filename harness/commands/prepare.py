"""`prepare`: Spider questions and databases to three chat-JSONL splits and the bundle's staged data.

    python3 -m harness prepare --databases ~/spider/database [--rows 2000 --rl-rows 600 --eval-rows 300]
    python3 -m harness prepare --databases ~/spider/database --questions ~/spider   # Spider's own files, offline
    python3 -m harness prepare --sample          # the embedded sample, offline

Writes the prepared folder ``--output DIR`` (default ``out``; harness.common.layout): the splits
under ``DIR/data/``, the staged bundle ``DIR/bundle/`` and ``DIR/prepare-summary.json``. The work is
harness.prepare.job's, with the audit of the staged bundle (harness.audit.entry.review) as its
review: a section of the summary, and with ``--drop-hackable`` the rl rows it finds hackable left
out. This module reads the flags, picks where the questions come from (``questions_source``) and
prints the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bundle.contract import shapes as reward_shapes
from harness.common.cores import usable_cores
from harness.common.errors import InputError
from harness.common.files import check_writable_folder, sha256_file
from harness.common.layout import DEFAULT_DATA, Prepared
from harness.prepare import corpus, database_folders, disputed, job, search_prebuild, spider_files, splits
from harness.prepare import summary as prepare_summary
from harness.prepare.fetch_rows import DEFAULT_API_URL, RowSource
from harness.prepare.neighbours import distil, separate


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: give 0 or more")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative: give 0 or more seconds")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the reference example's prepare_dataset.py, plus where things are."""
    add = parser.add_argument
    parser.epilog = ("Question files (--questions-file, --eval-file) in Spider's shape (question, query, db_id: Spider, "
                     "Spider-DK, Spider-Syn with --question-field SpiderSynQuestion) or BIRD's (question, SQL, db_id, "
                     "evidence); databases from folders of <db_id>/<db_id>.sqlite or of <db_id>.sql DDL files "
                     "(docs/preparing.md, \"Other corpora\")")
    add("--databases", type=Path, metavar="DIR", action="append",
        help="a folder of databases: <db_id>/<db_id>.sqlite as Spider's database/, or <db_id>.sql DDL files (built "
             "into empty SQLite databases); give it again for more folders (Spider's and Spider-DK's)")
    add("--sample", action="store_true", help="use the embedded sample (fixtures/): no network, no --databases")
    add("--rows", type=_count, metavar="N",
        help=f"SFT rows (default {job.DEFAULT_SIZES.train}; {job.SAMPLE_SIZES.train} with --sample)")
    add("--rl-rows", type=_count, metavar="N",
        help=f"RL rows after the SFT ones (default {job.DEFAULT_SIZES.rl}; {job.SAMPLE_SIZES.rl} with --sample)")
    add("--eval-rows", type=_count, metavar="N",
        help=f"eval rows on unseen databases (default {job.DEFAULT_SIZES.eval}; {job.SAMPLE_SIZES.eval} with --sample)")
    add("--max-schema", type=_count, metavar="CHARS", default=job.DEFAULT_MAX_SCHEMA,
        help="skip databases whose schema is longer, in characters (default %(default)s)")
    add("--questions", type=Path, metavar="DIR",
        help="read the questions from Spider's own train_spider.json and dev.json in DIR, offline (default: those "
             "beside --databases when both are there, else the datasets-server API)")
    add("--questions-file", type=Path, metavar="FILE",
        help="read the questions from FILE, a JSON list in Spider's or BIRD's shape (--shape); the eval split is on "
             "its last databases, held out of training, unless --eval-file is given")
    add("--eval-file", type=Path, metavar="FILE",
        help="the eval split's questions, in the same shape as --questions-file (whose questions are then train and "
             "rl): the split the corpus names, e.g. Spider-Syn's dev.json")
    add("--shape", choices=tuple(corpus.SHAPES), metavar="NAME",
        help="the question files' shape: spider (question, query, db_id) or bird (question, SQL, db_id, evidence, "
             "the evidence put after the question as BIRD's baselines do); default: found from the first entry")
    for role, option in corpus.FIELD_OPTIONS.items():
        add(option, metavar="NAME", dest=f"{role}_field",
            help=f"the field holding the {role.replace('_', ' ')} in the question files (default: the shape's"
                 + (", e.g. SpiderSynQuestion for Spider-Syn)" if role == "question" else ")"))
    add("--api-url", metavar="URL",
        help=f"read the questions from this datasets-server (default {DEFAULT_API_URL}, when Spider's files are not "
             "beside --databases); given, it is used even when they are")
    add("--cache-dir", type=Path, metavar="DIR", default=job.DEFAULT_CACHE,
        help="where fetched pages are kept (default %(default)s)")
    add("--build-cache", type=Path, metavar="DIR", default=job.DEFAULT_BUILD_CACHE,
        help="where each database's neighbours and its review's parts are kept for the next build and reused when "
             "what they depend on and this code are the same (default %(default)s; docs/preparing.md)")
    add("--no-build-cache", action="store_true",
        help="build every database's neighbours and review afresh; store none")
    add("--workers", type=_count, metavar="N", default=None,
        help="processes building the neighbours, one database each (default: one a core); the same bytes out "
             "with any number")
    add("--request-interval", type=_seconds, metavar="SECONDS", default=job.FetchPolicy.interval_s,
        help="least seconds between two API requests (default %(default)s)")
    add("--output", type=Path, metavar="DIR", default=DEFAULT_DATA,
        help="the prepared folder to write: DIR/data/*.jsonl, DIR/bundle/, DIR/prepare-summary.json (default %(default)s)")
    add("--keep-empty-gold", action="store_true",
        help="keep rows whose gold returns no rows in rl.jsonl (left out by default)")
    add("--keep-shared-golds", action="store_true",
        help="keep rows whose gold text is selected under another database too")
    add("--disputed-golds", type=Path, metavar="FILE", default=disputed.DEFAULT_PATH,
        help="the list of disputed golds: their rows are judged against the gold and its accepted answers and kept out of "
             "rl.jsonl (default: the project's fixtures/disputed-golds.json; docs/disputed-golds.md)")
    add("--keep-disputed", action="store_true",
        help="keep rows whose gold is disputed in rl.jsonl (left out by default; still judged against their accepted answers)")
    add("--neighbours", type=_splits, metavar="SPLITS", default=job.NeighbourPlan().splits,
        help="splits whose databases get neighbour databases, comma-separated, or none "
             f"(default {','.join(job.NeighbourPlan().splits)})")
    add("--neighbour-seed", type=_count, metavar="N", default=distil.Settings.seed,
        help="seed of the neighbour databases (default %(default)s)")
    add("--neighbour-candidates", type=_count, metavar="N", default=distil.Settings.candidates,
        help="fuzzed candidates built per database and round before the few kept are chosen (default %(default)s)")
    add("--max-neighbour-candidates", type=_count, metavar="N", default=distil.Settings.max_candidates,
        help="candidates built per database at most: more rounds where the kept ones separate under "
             f"{round(distil.Settings.enough * 100)}%% of the look-alike queries (default %(default)s)")
    add("--max-neighbours", type=_count, metavar="N", default=distil.Settings.max_keep,
        help="neighbour databases kept per database at most (default %(default)s)")
    add("--no-separation", action="store_true",
        help="leave the audit's holes open: add no neighbour database that tells a paid degenerate answer from "
             f"its gold (by default up to {separate.Settings.max_added} per database; docs/audit.md)")
    add("--no-audit", action="store_true",
        help="skip the audit of degenerate answers (by default its figures are a section of the summary)")
    add("--near-miss-families", choices=("all", "tuning", "none"), default="all", metavar="WHICH",
        help="near misses of the golds the separation closes: all (default), tuning (the families held out then "
             "measure how far it generalizes) or none; the summary measures every family either way, with other "
             "seeds (docs/audit.md, \"Near misses\")")
    add("--no-search-prebuild", action="store_true",
        help="draw no search database now: by default the grader's search databases of the eval golds are drawn "
             "into DATA/cache/search, where `grade` reads them (docs/grading.md)")
    add("--drop-hackable", action="store_true",
        help="leave out of rl.jsonl the rows the audit finds hackable (named in the summary)")
    add("--multi-turn", choices=("tools", "tags"), default=None, metavar="FORM",
        help="write the rl split's prompts for the multi-turn environment (docs/multi-turn.md): `tools` (the model "
             "calls query and submit: TRL, the Open Reward Standard, NeMo Gym's tool calls) or `tags` (it writes "
             "<query> and <answer>: OpenRLHF, SkyRL, NeMo Gym's Gymnasium text); default: one-shot prompts")
    add("--reward-shape", choices=tuple(reward_shapes.PRESETS), default=reward_shapes.DEFAULT, metavar="NAME",
        help="what the reward pays per outcome, a published shape: " + ", ".join(reward_shapes.PRESETS)
             + " (default %(default)s; the grader stays binary; docs/reward-shapes.md)")
    add("--reward-values", type=Path, metavar="FILE",
        help='a custom reward shape instead: a JSON file {"name": ..., "values": {outcome: number, ...}} '
             "with a number for every scored outcome (docs/reward-shapes.md)")


def _splits(text: str) -> tuple[str, ...]:
    if text.strip().lower() == "none":
        return ()
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [s for s in chosen if s not in splits.SPLITS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: give split names among {', '.join(splits.SPLITS)} "
                                         "separated by commas, or none")
    return chosen


def _plan(args: argparse.Namespace) -> job.NeighbourPlan:
    settings = dataclasses.replace(distil.Settings(), seed=args.neighbour_seed, candidates=args.neighbour_candidates,
                                   max_candidates=max(args.max_neighbour_candidates, args.neighbour_candidates),
                                   max_keep=args.max_neighbours)
    return job.NeighbourPlan(args.neighbours, settings, None if args.no_separation else separate.Settings(
        seed=args.neighbour_seed), workers=args.workers or usable_cores(), cache=None if args.no_build_cache else args.build_cache)


def _sizes(args: argparse.Namespace) -> splits.Sizes:
    base = job.SAMPLE_SIZES if args.sample else job.DEFAULT_SIZES
    return splits.Sizes(train=base.train if args.rows is None else args.rows,
                        rl=base.rl if args.rl_rows is None else args.rl_rows,
                        eval=base.eval if args.eval_rows is None else args.eval_rows)


def reward_shape_of(args: argparse.Namespace) -> reward_shapes.Shape:
    """The preset ``--reward-shape`` names, or the custom table of ``--reward-values``; InputError when
    both are given or the file cannot be used."""
    if args.reward_values is None:
        return reward_shapes.preset(args.reward_shape)
    if args.reward_shape != reward_shapes.DEFAULT:
        raise InputError("give --reward-shape (a preset) or --reward-values (a custom table), not both")
    try:
        data = json.loads(Path(args.reward_values).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the reward values {args.reward_values}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict):
        raise InputError(f"{args.reward_values}: expected a JSON object {{\"name\": ..., \"values\": "
                         "{outcome: number, ...}}")
    name = data.get("name", "custom")
    if name in reward_shapes.PRESETS:
        raise InputError(f"{args.reward_values}: {name!r} is a preset's name: give the custom shape another name, "
                         f"or use --reward-shape {name}")
    try:
        return reward_shapes.custom(name, data["values"])
    except reward_shapes.ShapeError as exc:
        raise InputError(f"{args.reward_values}: {exc}") from None


def progress() -> Callable[[str], None]:
    """Print each step's line to stderr as it ends, with the seconds since prepare began (stdout keeps
    the summary alone)."""
    started = time.monotonic()
    return lambda line: print(f"[{time.monotonic() - started:6.1f} s] {line}", file=sys.stderr, flush=True)


def _review(args: argparse.Namespace, say: Callable[[str], None]) -> job.Reviewer | None:
    """The audit of the staged bundle (harness.audit.entry.review), None with --no-audit.

    The audit edits golds with sqlparse, which a bare interpreter lacks: prepare itself needs only the
    standard library, so there the summary says the audit did not run, and why.
    """
    if args.no_audit:
        return None
    try:
        from harness.audit import entry  # sqlparse: imported only when the audit runs
    except ImportError as exc:
        if args.drop_hackable:
            raise InputError(f"--drop-hackable needs the audit, which needs {exc.name} (not importable here): run "
                             "prepare in the project's environment (`make bundle`, .venv)") from None
        reason = f"{exc.name} is not importable here: run `python3 -m harness audit` in the project's environment"
        return lambda staged, purpose, work: job.Review({"not_run": reason})
    families = None if args.near_miss_families == "none" else args.near_miss_families
    memo = _plan(args).memo()
    return lambda staged, purpose, work: entry.review(staged, drop_hackable=args.drop_hackable, purpose=purpose,
                                                      work=work, near_miss_families=families, memo=memo, say=say)


def renamed_fields(args: argparse.Namespace) -> dict[str, str]:
    """The fields the options name (--question-field and the others), by role."""
    return {role: getattr(args, f"{role}_field") for role in corpus.FIELD_OPTIONS
            if getattr(args, f"{role}_field") is not None}


def questions_source(args: argparse.Namespace, catalog: splits.Catalog) -> tuple[RowSource, str]:
    """Where the questions come from, and how the summary names it: ``--questions-file`` (and
    ``--eval-file``); ``--questions DIR``; else Spider's files beside ``--databases`` (the unzipped
    spider.zip) unless ``--api-url`` is given; else the API. ``catalog``: the databases, which say
    which can hold eval rows when one question file holds them all."""
    if args.questions_file is not None:
        def usable(db_id: str) -> bool:
            database = catalog.get(db_id)
            return database is not None and database.schema_chars <= catalog.max_schema
        question_files = corpus.QuestionFiles(args.questions_file, args.eval_file, eval_rows=_sizes(args).eval,
                                              usable=usable, shape=args.shape, renamed=renamed_fields(args))
        return question_files, question_files.describe()
    if args.questions is not None:
        if args.api_url is not None:
            raise InputError("--questions reads Spider's files and --api-url the datasets-server: give one of them")
        files = spider_files.SpiderFiles(spider_files.check_folder(args.questions))
        return files, files.describe()
    found = spider_files.beside(args.databases[0]) if args.api_url is None else None
    if found is not None:
        files = spider_files.SpiderFiles(found)
        return files, files.describe()
    url = args.api_url or DEFAULT_API_URL
    return job.api_source(url, args.cache_dir, args.request_interval), url


def check_question_flags(args: argparse.Namespace) -> None:
    """The question files' flags go together, and with no other source of questions."""
    if args.questions_file is None:
        given = [flag for flag, value in (("--eval-file", args.eval_file), ("--shape", args.shape),
                                          *((option, getattr(args, f"{role}_field"))
                                            for role, option in corpus.FIELD_OPTIONS.items()))
                 if value is not None]
        if given:
            raise InputError(f"{', '.join(given)} describe(s) question files: give --questions-file FILE too")
        return
    if args.sample:
        raise InputError("--sample uses the embedded questions: drop --questions-file (or drop --sample)")
    if args.questions is not None or args.api_url is not None:
        raise InputError("--questions-file reads a question file; --questions and --api-url read Spider's: give one")


def run(args: argparse.Namespace) -> int:
    """Check the flags, pick the row source, prepare, print the summary."""
    if args.sample and args.databases is not None:
        raise InputError("--sample uses the embedded databases: drop --databases (or drop --sample)")
    if args.sample and (args.questions is not None or args.api_url is not None):
        raise InputError("--sample uses the embedded questions: drop --questions / --api-url (or drop --sample)")
    check_question_flags(args)
    if args.no_audit and args.drop_hackable:
        raise InputError("--drop-hackable needs the audit: drop --no-audit (or drop --drop-hackable)")
    if not args.sample and args.databases is None:
        raise InputError("give --databases (Spider's database folder, e.g. spider/database) "
                         "or --sample for the embedded sample")
    shape = reward_shape_of(args)
    say = progress()
    check_writable_folder(args.output, "the prepared folder")  # before minutes of work, not after
    source: RowSource
    with tempfile.TemporaryDirectory(prefix="spider-sample-") as tmp:
        if args.sample:
            catalog = splits.Catalog(job.build_sample_databases(Path(tmp)), args.max_schema)
            source, origin = job.sample_source(), "embedded sample"
        else:
            catalog = splits.Catalog(database_folders.find(args.databases, Path(tmp)), args.max_schema)
            source, origin = questions_source(args, catalog)
        rules = splits.Rules(catalog, splits.GoldChecker(), args.keep_empty_gold, args.keep_shared_golds,
                             disputed.load(args.disputed_golds), args.keep_disputed)
        base = Prepared(args.output).search_cache()
        # One folder of search databases for the whole of prepare: the review's two grades of the eval
        # golds and the draw share every set (harness.prepare.search_prebuild.working).
        with search_prebuild.working(base, keep=not args.no_search_prebuild) as folder:
            summary = job.prepare(source, rules, _sizes(args), args.output, origin=origin, neighbours=_plan(args),
                                  review=_review(args, say), reward_shape=shape, say=say,
                                  multi_turn=args.multi_turn)
            if not args.no_search_prebuild:
                say(search_prebuild.describe(_prebuild(args.output, args.workers or None, say, folder)))
    print(prepare_summary.render(summary))
    return 0


def _prebuild(output: Path, workers: int | None, say: Callable[[str], None], folder: Path | None = None) -> dict:
    """The eval golds' search sets drawn into ``folder`` (prepare's working folder, default: none
    kept yet), which then takes the name `grade` reads for this bundle; those of bundles staged here
    before removed."""
    staged = output / "bundle"
    base = Prepared(output).search_cache()
    done = search_prebuild.prebuild(staged, folder or base / search_prebuild.WORKING, say, workers)
    final = search_prebuild.settle(base, sha256_file(staged / "data" / "index.json"))
    return {**done, "folder": str(final)} if "folder" in done else done
