"""prepare's review kept per database for the next build (harness/common/memo.py, harness/audit/review_memo.py):
the same summary and bundle whichever way the parts came, and nothing done again that was kept.

The search aimed at the difference rejects the sample's holes at scoring time, so the builds here turn it
off (``SPIDER_SCORING_DIFFERENCE=off``): every kind of part then has work to keep."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import pickle
from pathlib import Path

import pytest

from harness.cli import main
from harness.common.memo import ENTRY, Memo, plain

KINDS = ("calls", "candidates", "near-misses", "oracle", "separation", "witnesses")


def prepare(out: Path, *args: str) -> str:
    """`prepare --sample` (with its audit and separation) in-process into ``out``; its progress lines."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["prepare", "--sample", "--workers", "2", "--no-search-prebuild", *args, "--output", str(out)]) == 0
    return err.getvalue()


def produced(out: Path) -> dict[str, str]:
    """The summary and every file of the staged bundle, by SHA-256."""
    files = [out / "prepare-summary.json", *sorted(p for p in (out / "bundle").rglob("*") if p.is_file())]
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def entries(folder: Path) -> dict[str, set[str]]:
    """kind -> the keys kept under the memo folder."""
    return {kind: {p.parent.name for p in (folder / kind).rglob(ENTRY)} for kind in KINDS}


@pytest.fixture(scope="module", autouse=True)
def no_difference():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPIDER_SCORING_DIFFERENCE", "off")
        yield


@pytest.fixture(scope="module")
def cold(tmp_path_factory) -> tuple[Path, Path, str]:
    base = tmp_path_factory.mktemp("review-memo")
    cache = base / "cache"
    return base / "cold", cache, prepare(base / "cold", "--build-cache", str(cache))


def test_a_warm_build_does_no_review_work_and_writes_the_same_bytes_as_an_uncached_one(cold, tmp_path):
    out, cache, _log = cold
    kept = entries(cache / "review")
    assert all(kept[kind] for kind in KINDS), kept  # the sample has holes, witnesses and near misses of each kind
    warm = prepare(tmp_path / "warm", "--build-cache", str(cache))
    assert entries(cache / "review") == kept  # every part read, none made again
    assert "separation: 16 of 16 holes closed" in warm
    plain_run = prepare(tmp_path / "plain", "--no-build-cache", "--workers", "1")  # one process separates too
    reference = produced(tmp_path / "plain")
    assert produced(out) == reference
    assert produced(tmp_path / "warm") == reference
    assert not (tmp_path / "plain" / "review").exists() and "separation" in plain_run


def test_the_second_review_reuses_what_the_separation_did_not_change(cold):
    _out, cache, _log = cold
    kept = entries(cache / "review")
    # Candidates and near misses depend on the original and its golds alone: made once a database,
    # though both reviews asked for them; the calls are made again where neighbours were added.
    assert len(kept["candidates"]) == len(kept["near-misses"]) == 4
    assert len(kept["calls"]) > 3 * 4


def test_a_damaged_part_is_made_again_and_an_unwritable_folder_is_no_error(cold, tmp_path):
    out, cache, _log = cold
    copy = tmp_path / "cache"
    copy.mkdir()
    for path in cache.rglob("*"):
        target = copy / path.relative_to(cache)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.write_bytes(path.read_bytes())
    oracle_file = next(p for p in sorted((copy / "review" / "oracle").rglob("0.file")))
    oracle_file.write_bytes(oracle_file.read_bytes()[:-1] + b"\x01")  # a witness database no longer as kept
    calls = next(p for p in sorted((copy / "review" / "calls").rglob(ENTRY)))
    calls.write_bytes(b"not a pickle")
    prepare(tmp_path / "mended", "--build-cache", str(copy))
    assert produced(tmp_path / "mended") == produced(out)
    assert calls.read_bytes() != b"not a pickle"  # mended: made again and kept whole
    assert Memo(copy / "review").get("calls", calls.parent.name) is not None
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")  # no folder can be made under a file, not even by root
    prepare(tmp_path / "blocked", "--build-cache", str(blocked / "cache"))
    assert produced(tmp_path / "blocked") == produced(out)


def test_memo_keeps_values_and_files_and_passes_over_what_it_cannot_use(tmp_path):
    memo = Memo(tmp_path / "memo")
    source = tmp_path / "witness.sqlite"
    source.write_bytes(b"a database")
    key = memo.key("oracle", {"b": {2, 1}, "a": [Path("x")]})
    assert memo.get("oracle", key) is None
    memo.put("oracle", key, {"verdict": 1}, [source])
    source.write_bytes(b"changed after")
    kept = memo.get("oracle", key)
    assert kept is not None and kept.value == {"verdict": 1} and kept.files[0].read_bytes() == b"a database"
    kept.files[0].write_bytes(b"tampered")
    assert memo.get("oracle", key) is None and (memo.hits, memo.misses) == (1, 2)
    assert Memo(None).get("oracle", key) is None and not Memo(None)
    Memo(None).put("oracle", key, 1)  # nothing kept, no error
    with open(tmp_path / "memo" / "oracle" / key[:2] / key / ENTRY, "rb") as f:
        assert pickle.load(f)[0] == {"verdict": 1}


def test_a_key_names_every_part_and_not_the_order_of_a_set():
    memo = Memo(None)
    assert memo.key("calls", {"x", "y", "z"}) == memo.key("calls", {"z", "y", "x"})
    assert len({memo.key("calls", 1), memo.key("oracle", 1), memo.key("calls", 2), memo.key("calls", [1])}) == 4
    assert json.dumps(plain({frozenset({"b", "a"}): Path("p")})) == json.dumps([[["a", "b"], "PosixPath('p')"]])
