"""prepare's build cache and its workers: each database's neighbours kept for the next build, built in
parallel, the same bytes out whichever way they came (harness/prepare/neighbours/build_cache.py)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from pathlib import Path

from harness.cli import main
from harness.prepare.neighbours import attach, build_cache, distil

LEAN = ("--sample", "--no-audit")  # the neighbours are the point here; the audit does not use the cache


def prepare(out: Path, *args: str) -> str:
    """`prepare` in-process into ``out``; what it printed to stderr (its progress lines)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["prepare", *LEAN, *args, "--output", str(out)]) == 0
    return err.getvalue()


def staged_bytes(out: Path) -> dict[str, str]:
    """Every file of the staged bundle's data, by SHA-256."""
    data = out / "bundle" / "data"
    return {str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(data.rglob("*")) if p.is_file()}


def test_cold_warm_and_uncached_builds_give_the_same_bytes_with_any_number_of_workers(tmp_path):
    cache = tmp_path / "cache"
    cold = prepare(tmp_path / "cold", "--build-cache", str(cache), "--workers", "2")
    warm = prepare(tmp_path / "warm", "--build-cache", str(cache), "--workers", "2")
    plain = prepare(tmp_path / "plain", "--no-build-cache", "--workers", "1")
    assert "taken from the build cache" not in cold + plain
    assert warm.count("taken from the build cache") == 4  # the sample's four databases of rl and eval
    assert "kept of" not in warm
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 4 and all((p / build_cache.ENTRY).is_file() for p in entries)
    reference = staged_bytes(tmp_path / "plain")
    assert any(name.startswith("neighbours/") for name in reference)
    assert staged_bytes(tmp_path / "cold") == reference
    assert staged_bytes(tmp_path / "warm") == reference


def test_a_database_whose_golds_change_is_built_again_the_others_come_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    prepare(tmp_path / "first", "--build-cache", str(cache), "--workers", "1")
    second = prepare(tmp_path / "second", "--build-cache", str(cache), "--workers", "1", "--rl-rows", "12")
    taken = {line.split("neighbours ", 1)[1].split(":")[0] for line in second.splitlines() if "from the build cache" in line}
    built = {line.split("neighbours ", 1)[1].split(":")[0] for line in second.splitlines() if "kept of" in line}
    assert taken and built and not taken & built  # fewer rl rows: some databases ask other golds
    index = json.loads((tmp_path / "second" / "bundle" / "data" / "index.json").read_text())
    again = prepare(tmp_path / "again", "--no-build-cache", "--workers", "1", "--rl-rows", "12")
    assert "from the build cache" not in again
    assert staged_bytes(tmp_path / "second") == staged_bytes(tmp_path / "again")
    assert set(index["neighbour_results"]) == taken | built


def test_the_key_names_everything_the_result_depends_on(tmp_path):
    original = tmp_path / "a.sqlite"
    original.write_bytes(b"one")
    base = build_cache.key("a", original, ["SELECT 1", "SELECT 2"], distil.Settings(), attach.DEFAULT_RELAXATION)
    assert base == build_cache.key("a", original, ["SELECT 2", "SELECT 1", "SELECT 1"], distil.Settings(),
                                   attach.DEFAULT_RELAXATION)  # a set of golds
    others = [build_cache.key("b", original, ["SELECT 1", "SELECT 2"], distil.Settings(), attach.DEFAULT_RELAXATION),
              build_cache.key("a", original, ["SELECT 1"], distil.Settings(), attach.DEFAULT_RELAXATION),
              build_cache.key("a", original, ["SELECT 1", "SELECT 2"], distil.Settings(seed=1), attach.DEFAULT_RELAXATION),
              build_cache.key("a", original, ["SELECT 1", "SELECT 2"], distil.Settings(), None)]
    original.write_bytes(b"two")
    others.append(build_cache.key("a", original, ["SELECT 1", "SELECT 2"], distil.Settings(), attach.DEFAULT_RELAXATION))
    assert len({base, *others}) == 6


def test_a_damaged_entry_is_built_again_and_an_unwritable_cache_is_no_error(tmp_path):
    cache = tmp_path / "cache"
    prepare(tmp_path / "first", "--build-cache", str(cache), "--workers", "1")
    entry = next(p for p in sorted(cache.iterdir()) if not p.name.startswith("."))
    damaged = next(entry.glob("*.sqlite"))
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\x01")
    second = prepare(tmp_path / "second", "--build-cache", str(cache), "--workers", "1")
    assert second.count("taken from the build cache") == 3 and second.count("kept of") == 1
    assert staged_bytes(tmp_path / "second") == staged_bytes(tmp_path / "first")
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")  # no folder can be made under a file, not even by root
    third = prepare(tmp_path / "third", "--build-cache", str(blocked / "cache"), "--workers", "1")
    assert third.count("kept of") == 4 and staged_bytes(tmp_path / "third") == staged_bytes(tmp_path / "first")
