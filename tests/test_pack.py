"""pack: an explicit file list, byte-identical rebuilds, and every refusal the trainer would make."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.common import bundle_zip
from harness.common.errors import PackError
from harness.prepare import pack

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def staged(tmp_path, prepared_sample) -> Path:
    """A private copy of the prepared sample's staged bundle (tests may damage it)."""
    return Path(shutil.copytree(prepared_sample / "bundle", tmp_path / "staged"))


def _index(staged: Path) -> dict:
    return json.loads((staged / "data" / "index.json").read_text(encoding="utf-8"))


def test_module_list_is_exactly_the_bundle_folder():
    """BUNDLE_MODULES is written by hand; this keeps it equal to bundle/**/*.py (subpackages too)."""
    assert sorted(pack.BUNDLE_MODULES) == pack.python_files(ROOT / "bundle")
    assert "sql/verdict.py" in pack.BUNDLE_MODULES and "verify.py" in pack.BUNDLE_MODULES


def test_zip_holds_modules_index_and_indexed_databases_only(staged, tmp_path):
    (staged / "__pycache__").mkdir()
    (staged / "__pycache__" / "reward.cpython-311.pyc").write_bytes(b"x")
    (staged / ".DS_Store").write_bytes(b"x")
    (staged / "notes.txt").write_text("not for the trainer")
    (staged / "data" / "databases" / "stray.sqlite").write_bytes(b"not indexed")
    summary, left_out = pack.pack(staged, tmp_path / "b.zip")
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        names = archive.namelist()
        infos = archive.infolist()
    databases = _index(staged)["databases"].values()
    expected = sorted([*pack.BUNDLE_MODULES, "data/index.json", *(f"data/{e['file']}" for e in databases),
                       *(f"data/{n['file']}" for e in databases for n in e.get("neighbours", []))])
    assert any(name.startswith("data/neighbours/") for name in expected)  # the sample has neighbours
    assert names == expected  # sorted, nothing else
    assert {"__pycache__/reward.cpython-311.pyc", ".DS_Store", "notes.txt",
            "data/databases/stray.sqlite"} <= set(left_out)
    assert all(i.date_time == pack.ZIP_DATE for i in infos)
    assert all(i.external_attr >> 16 == 0o100644 for i in infos)
    assert summary.entries == len(expected) and summary.modules == len(pack.BUNDLE_MODULES)
    assert summary.databases == len(_index(staged)["databases"])


def test_rebuild_gives_the_same_bytes_whatever_the_file_times(staged, tmp_path):
    first, _ = pack.pack(staged, tmp_path / "one.zip")
    copy = Path(shutil.copytree(staged, tmp_path / "copy"))
    for path in copy.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
        if path.is_file():
            os.chmod(path, 0o600)
    second, _ = pack.pack(copy, tmp_path / "two.zip")
    assert (tmp_path / "one.zip").read_bytes() == (tmp_path / "two.zip").read_bytes()
    assert first.sha256 == second.sha256 and len(first.sha256) == 64


def test_output_is_readable_by_others_for_the_container_user(staged, tmp_path):
    pack.pack(staged, tmp_path / "b.zip")
    assert stat.S_IMODE((tmp_path / "b.zip").stat().st_mode) == 0o644


def _damage(kind: str, staged: Path) -> str:
    """Break the staged folder one way; returns a phrase the PackError must contain."""
    if kind == "missing module":
        (staged / "grader.py").unlink()
        return "grader.py"
    if kind == "unlisted module":
        (staged / "helpers.py").write_text("X = 1\n")
        return "helpers.py"
    if kind == "symlinked module":
        target = staged.parent / "elsewhere.py"
        shutil.move(staged / "reward.py", target)
        (staged / "reward.py").symlink_to(target)
        return "symlink"
    if kind == "database changed":
        db = next((staged / "data" / "databases").glob("*.sqlite"))
        db.write_bytes(db.read_bytes() + b"\0")
        return "SHA-256"
    if kind == "index missing":
        (staged / "data" / "index.json").unlink()
        return "make bundle"
    if kind == "unsafe database path":
        index = _index(staged)
        next(iter(index["databases"].values()))["file"] = "../../etc/passwd"
        (staged / "data" / "index.json").write_text(json.dumps(index))
        return "not under databases/"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing module", "unlisted module", "symlinked module", "database changed",
                                  "index missing", "unsafe database path"])
def test_refuses_a_broken_staged_folder_and_keeps_the_old_zip(kind, staged, tmp_path):
    output = tmp_path / "b.zip"
    output.write_bytes(b"the previous good zip")
    phrase = _damage(kind, staged)
    with pytest.raises(PackError) as caught:
        pack.pack(staged, output)
    assert phrase in str(caught.value)
    assert output.read_bytes() == b"the previous good zip"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.zip")]  # no temp file left


def test_over_a_cap_is_refused_and_nothing_replaced(staged, tmp_path):
    output = tmp_path / "b.zip"
    output.write_bytes(b"old")
    with pytest.raises(PackError, match="over the cap"):
        pack.pack(staged, output, pack.Caps(archive_bytes=1000))
    assert output.read_bytes() == b"old"


def _info(name: str, mode: int = 0o100644, size: int = 10) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    info.file_size = size
    return info


@pytest.mark.parametrize("name, phrase", [
    ("../evil.py", "parent-folder"),
    ("/etc/evil.py", "absolute"),
    ("C:/evil.py", "absolute"),
    ("data\\index.json", "backslash"),
    ("data//index.json", "empty"),
    ("./reward.py", "'.' component"),
    (".hidden.py", "hidden"),
    ("data/.git/config", "hidden"),
    ("__pycache__/reward.cpython-311.pyc", "compiled"),
    ("json.py", "shadows the standard library"),
], ids=lambda v: v if isinstance(v, str) and "/" not in v else None)
def test_entry_names_the_trainer_refuses(name, phrase):
    problems = pack.check_entries([_info("reward.py"), _info(name)])
    assert any(phrase in p for p in problems), problems


def test_symlink_entry_no_python_and_caps_are_refused():
    assert any("symlink" in p for p in pack.check_entries([_info("reward.py", mode=0o120777)]))
    assert any("no Python module" in p for p in pack.check_entries([_info("data/index.json")]))
    caps = pack.Caps(entries=2, unpacked_bytes=25, entry_bytes=15)
    problems = pack.check_entries([_info("a.py"), _info("b.py", size=16), _info("c.py")], caps)
    assert any("3 entries" in p for p in problems)
    assert any("'b.py' is 16 bytes" in p for p in problems)
    assert any("unpacked size 36" in p for p in problems)
    assert pack.check_entries([_info("reward.py"), _info("data/index.json")]) == []


def test_summarize_refuses_a_zip_built_elsewhere_with_a_symlink(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("reward.py", "X = 1\n")
        link = zipfile.ZipInfo("data/index.json")
        link.external_attr = 0o120777 << 16
        archive.writestr(link, "/etc/passwd")
    (tmp_path / "z.zip").write_bytes(buffer.getvalue())
    with pytest.raises(PackError, match="symlink"):
        bundle_zip.summarize(tmp_path / "z.zip")
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(PackError, match="cannot read"):
        bundle_zip.summarize(tmp_path / "bad.zip")


def test_command_prints_hash_and_sizes_and_fails_with_the_pack_exit_code(staged, tmp_path):
    shutil.copytree(staged, tmp_path / "prepared" / "bundle")
    ok = subprocess.run([sys.executable, "-m", "harness", "pack", "--data", str(tmp_path / "prepared"),
                         "--output", str(tmp_path / "b.zip")], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    digest = __import__("hashlib").sha256((tmp_path / "b.zip").read_bytes()).hexdigest()
    assert f"sha256     {digest}" in ok.stdout
    assert "unpacked" in ok.stdout and "entries" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "harness", "pack", "--data", str(tmp_path / "nowhere"),
                          "--output", str(tmp_path / "c.zip")], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == PackError.exit_code
    assert "make bundle" in bad.stderr and not (tmp_path / "c.zip").exists()


def test_the_zip_goes_into_the_prepared_folder_by_default(staged, tmp_path):
    shutil.copytree(staged, tmp_path / "prepared" / "bundle")
    done = subprocess.run([sys.executable, "-m", "harness", "pack", "--data", str(tmp_path / "prepared")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "prepared" / "spider-scoring.zip").is_file()
    missing = subprocess.run([sys.executable, "-m", "harness", "pack", "--data", str(tmp_path / "empty")],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == PackError.exit_code and "make sample-bundle" in missing.stderr
