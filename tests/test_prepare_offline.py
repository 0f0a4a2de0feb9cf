"""`prepare` from Spider's own files (train_spider.json, dev.json), offline: the same splits, rows and
order as through the datasets-server API when the two sources agree.

On the embedded sample, the questions the API fixture serves (fixtures/sample/rows-*.json, through
tests/api_server.py on 127.0.0.1) are written out in Spider's file format beside a copy of the
sample's databases, as spider.zip unzips; the two routes must give byte-identical splits, index and
databases. On real Spider ($SPIDER_DATA, marker real_data) the API route is the prepared_spider
fixture, its loopback server built from the same JSON files the offline route reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from api_server import ApiServer
from conftest import FIXTURES, SPIDER_PREPARE_ARGS, run_prepare
from harness.cli import main
from harness.common.errors import InputError
from harness.prepare import spider_files
from test_prepare import output_files

SAMPLE_SIZES = ("--rows", "28", "--rl-rows", "17", "--eval-rows", "20")
API_SPLIT_FILES = {"train": "rows-train.json", "validation": "rows-validation.json"}


def spider_entry(row: dict) -> dict:
    """One question as Spider's files write it (the token lists roughly; prepare reads three fields)."""
    return {"db_id": row["db_id"], "query": row["query"], "query_toks": row["query"].split(),
            "query_toks_no_value": row["query"].split(), "question": row["question"],
            "question_toks": row["question"].split()}


def write_spider_release(folder: Path, fixture_dbs: dict[str, Path]) -> Path:
    """The sample as the unzipped spider.zip: database/<db_id>/<db_id>.sqlite, train_spider.json and
    dev.json, the questions taken from the pages the API fixture serves, in their order."""
    shutil.copytree(next(iter(fixture_dbs.values())).parent.parent, folder / "database")
    for split, name in spider_files.FILES.items():
        page = json.loads((FIXTURES / "sample" / API_SPLIT_FILES[split]).read_text(encoding="utf-8"))
        entries = [spider_entry(r["row"]) for r in page["rows"]]
        (folder / name).write_text(json.dumps(entries, indent=4, ensure_ascii=False), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def sample_release(fixture_dbs, tmp_path_factory) -> Path:
    return write_spider_release(tmp_path_factory.mktemp("release") / "spider", fixture_dbs)


@pytest.fixture(scope="module")
def through_the_api(sample_release, tmp_path_factory) -> tuple[Path, int]:
    """The API route on the sample (with Spider's files beside the databases: --api-url wins); the
    prepared folder and how many pages were asked for."""
    out = tmp_path_factory.mktemp("api")
    pages = {split: FIXTURES / "sample" / name for split, name in API_SPLIT_FILES.items()}
    with ApiServer.from_pages(pages) as api:
        run_prepare(out / "out", "--databases", str(sample_release / "database"), "--api-url", api.url,
                    "--cache-dir", str(out / "cache"), "--request-interval", "0", *SAMPLE_SIZES)
        asked = len(api.requests)
    return out / "out", asked


def comparable(summary: dict) -> dict:
    """A summary without what says how the rows were read (``source``, ``fetch``)."""
    return {k: v for k, v in summary.items() if k not in ("source", "fetch")}


def test_spider_s_files_give_the_api_route_s_splits_byte_for_byte(sample_release, through_the_api, tmp_path):
    api_out, asked = through_the_api
    summary = run_prepare(tmp_path / "out", "--databases", str(sample_release / "database"), "--questions",
                          str(sample_release), *SAMPLE_SIZES)
    assert asked == 2  # the API route did read the API (one page per split)
    assert output_files(tmp_path / "out") == output_files(api_out)
    assert comparable(summary) == comparable(json.loads((api_out / "prepare-summary.json").read_text()))
    assert summary["fetch"]["files_read"] == 2 and summary["fetch"]["pages_fetched"] == 0
    assert summary["source"].startswith("Spider's files") and "dev.json" in summary["source"]


def test_spider_s_files_beside_the_databases_are_found_without_a_flag(sample_release, through_the_api, tmp_path):
    """spider.zip unzipped: database/ with train_spider.json and dev.json beside it. No --questions, no
    --api-url: the files are read and the network is not (the cache folder is never made)."""
    summary = run_prepare(tmp_path / "out", "--databases", str(sample_release / "database"), "--cache-dir",
                          str(tmp_path / "cache"), *SAMPLE_SIZES)
    assert output_files(tmp_path / "out") == output_files(through_the_api[0])
    assert str(sample_release / "dev.json") in summary["source"] and not (tmp_path / "cache").exists()


def test_the_order_of_the_files_is_the_order_of_the_splits(sample_release, through_the_api, tmp_path):
    """The check above can fail: the same questions in another order are other splits."""
    release = tmp_path / "spider"
    shutil.copytree(sample_release, release)
    entries = json.loads((release / "train_spider.json").read_text(encoding="utf-8"))
    (release / "train_spider.json").write_text(json.dumps(entries[::-1]), encoding="utf-8")
    run_prepare(tmp_path / "out", "--databases", str(release / "database"), *SAMPLE_SIZES)
    assert output_files(tmp_path / "out")["data/train.jsonl"] != output_files(through_the_api[0])["data/train.jsonl"]


def _release_with(tmp_path: Path, sample_release: Path, name: str, text: str | None) -> Path:
    release = tmp_path / "spider"
    shutil.copytree(sample_release, release)
    if text is None:
        (release / name).unlink()
    else:
        (release / name).write_text(text, encoding="utf-8")
    return release


@pytest.mark.parametrize("name, text, flags, message", [
    ("dev.json", None, ["--questions", "{release}"], "lacks dev.json"),
    ("dev.json", '{"rows": []}', ["--questions", "{release}"], "holds JSON dict, not a list of questions"),
    ("dev.json", '[{"db_id": "bakery", "question": "How many?"}]', ["--questions", "{release}"],
     "dev.json: entry 0 lacks a non-empty text field 'query'"),
    ("train_spider.json", '[{"db_id": "pets_club", "question": "?", "query": "SELECT 1"}', ["--questions", "{release}"],
     "train_spider.json is not UTF-8 JSON"),
    ("dev.json", None, ["--questions", "{release}/nowhere"], "is not a folder"),
    ("dev.json", None, ["--questions", "{release}", "--api-url", "http://127.0.0.1:9"], "give one of them"),
], ids=["a file missing", "not a list", "an entry without its query", "truncated JSON", "no such folder",
        "two sources"])
def test_bad_spider_files_are_clear_errors(sample_release, tmp_path, capsys, name, text, flags, message):
    release = _release_with(tmp_path, sample_release, name, text)
    argv = ["prepare", "--databases", str(release / "database"), *[f.format(release=release) for f in flags],
            "--output", str(tmp_path / "out"), *SAMPLE_SIZES]
    assert main(argv) == InputError.exit_code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "data").exists()


def test_one_file_beside_the_databases_is_not_taken_for_the_release(sample_release, tmp_path):
    """Only both files make a release: with dev.json alone the questions come from the API."""
    release = _release_with(tmp_path, sample_release, "train_spider.json", None)
    assert spider_files.beside(release / "database") is None
    assert spider_files.beside(sample_release / "database") == sample_release.resolve()


def test_the_sample_takes_neither_questions_nor_an_api(tmp_path, capsys):
    assert main(["prepare", "--sample", "--questions", str(tmp_path), "--output", str(tmp_path / "o")]) == 3
    assert "--sample uses the embedded questions" in capsys.readouterr().err


@pytest.mark.real_data
@pytest.mark.slow
def test_real_spider_s_files_give_the_api_route_s_splits_byte_for_byte(spider_dir, tmp_path):
    """The default sizes (2,000 / 600 / 300) from $SPIDER_DATA's train_spider.json and dev.json, against
    the API route served on loopback from the same two files. Both without neighbours or audit: which
    rows are chosen and written does not depend on them (the full build is prepared_spider's)."""
    if not (spider_dir / "train_spider.json").is_file():
        pytest.skip(f"{spider_dir} has no train_spider.json: the offline route needs Spider's two question files")
    lean = (*SPIDER_PREPARE_ARGS, "--neighbours", "none", "--no-audit")
    with ApiServer.from_spider(spider_dir) as api:
        through_api = run_prepare(tmp_path / "api", "--databases", str(spider_dir / "database"), "--api-url", api.url,
                                  "--cache-dir", str(tmp_path / "cache"), *lean)
    summary = run_prepare(tmp_path / "out", "--databases", str(spider_dir / "database"), "--questions", str(spider_dir),
                          *lean)
    assert summary["fetch"]["files_read"] == 2 and through_api["fetch"]["pages_fetched"] > 0
    assert output_files(tmp_path / "out") == output_files(tmp_path / "api")
    assert comparable(summary) == comparable(through_api)
