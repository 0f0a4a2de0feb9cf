"""`prepare` draws the grader's search databases of the eval golds (harness/prepare/search_prebuild.py)
into DATA/cache/search/<index>, where `grade` reads them: the first stage graded adds only the sets
of what its answers add, and writes what a grade with nothing kept writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import FIXTURES
from harness.cli import main
from harness.commands import prepare as prepare_command
from harness.common import search_cache
from harness.prepare import pack, search_prebuild

COMPLETIONS = FIXTURES / "sample" / "completions-eval.jsonl"


def _entries(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*.json")} if folder.is_dir() else set()


def test_prepare_draws_the_eval_golds_sets_and_grade_reads_them(prepared_sample, tmp_path, capsys):
    out = tmp_path / "prepared"
    shutil.copytree(prepared_sample, out)
    base = out / "cache" / "search"
    folders = [p for p in base.iterdir()]
    assert len(folders) == 1 and folders[0].name == search_cache.zip_index_sha256(_packed(out))[:16]
    by_prepare = {p.relative_to(folders[0]) for p in _entries(folders[0])}  # and what other tests' grades added
    shutil.rmtree(base)
    prepare_command._prebuild(out, None, lambda line: None)  # prepare's draw again, alone in the folder
    drawn = _entries(folders[0])
    golds = search_prebuild.eval_golds(out / "bundle")
    assert golds and len(drawn) == 24 * sum(len(g) for g in golds.values())  # every attempt of every gold's set
    assert {p.relative_to(folders[0]) for p in drawn} <= by_prepare  # the very entries prepare drew
    assert main(["grade", "--data", str(out), "--stage", "first", "--completions", str(COMPLETIONS)]) == 0
    said = capsys.readouterr().out
    after = _entries(folders[0])
    assert drawn < after and f"{len(after) - len(drawn):,} added by this one" in said
    records = [json.loads(p.read_text()) for p in after - drawn]
    assert all(r["kind"] in ("kept", "none", "over_budget") for r in records)
    assert main(["grade", "--data", str(out), "--stage", "off", "--completions", str(COMPLETIONS),
                 "--search-cache", "off"]) == 0
    assert (out / "results" / "first.jsonl").read_bytes() == (out / "results" / "off.jsonl").read_bytes()


def _packed(out: Path) -> Path:
    zip_path = out / "spider-scoring.zip"
    if not zip_path.exists():
        pack.pack(out / "bundle", zip_path)
    return zip_path


def test_prepare_without_prebuild_draws_none_and_a_new_bundle_sweeps_the_old_sets(tmp_path):
    out = tmp_path / "prepared"
    assert main(["prepare", "--sample", "--output", str(out), "--no-search-prebuild"]) == 0
    assert not (out / "cache" / "search").exists()
    stale = out / "cache" / "search" / ("0" * 16)
    stale.mkdir(parents=True)
    other = out / "cache" / "search" / "notes"  # not named as a bundle's: left alone
    other.mkdir()
    done = prepare_command._prebuild(out, None, lambda line: None)  # what prepare runs once it has staged
    assert done["golds"] > 0 and done["databases"] == 24 * done["golds"]
    left = sorted(p.name for p in (out / "cache" / "search").iterdir())
    assert "0" * 16 not in left and "notes" in left and len(left) == 2


def test_a_staged_bundle_of_other_modules_is_not_prebuilt(prepared_sample, tmp_path):
    staged = tmp_path / "bundle"
    shutil.copytree(prepared_sample / "bundle", staged)
    with (staged / "verify.py").open("a") as handle:
        handle.write("\n# changed\n")
    done = search_prebuild.prebuild(staged, tmp_path / "kept")
    assert "not this harness's" in done["skipped"] and not (tmp_path / "kept").exists()


def test_the_review_and_the_draw_share_one_folder_and_a_new_prepare_takes_it_over(tmp_path):
    out = tmp_path / "prepared"
    args = ["prepare", "--sample", "--output", str(out), "--no-build-cache"]  # the review graded afresh each time
    assert main(args) == 0
    [folder] = search_cache.bundle_folders(out / "cache" / "search")
    first = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in _entries(folder)}
    golds = search_prebuild.eval_golds(out / "bundle")
    # The review's grades of the eval golds' near misses kept their additions beside the gold's own sets.
    assert len(first) > 24 * sum(len(g) for g in golds.values())
    assert main(args) == 0
    assert search_cache.bundle_folders(out / "cache" / "search") == [folder]
    assert not (out / "cache" / "search" / search_prebuild.WORKING).exists()
    # Every set the second review and draw asked for was read where the first left it: none drawn again.
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in _entries(folder)} == first
