"""`prepare` end to end on the embedded sample: outputs, index, staged bundle, flags, errors, determinism."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from api_server import ApiServer, Fault
from bundle import verify as bundle_verify
from bundle.scoring.index import normalize_gold
from conftest import BUNDLE_SRC, FIXTURES, ROOT, run_prepare, run_with_read_only
from harness.cli import main
from harness.common.errors import INTERRUPTED, FetchError, OutputError, PackError
from harness.prepare import job, pack, splits
from harness.prepare.api_cache import PageCache
from harness.prepare.bundle_data import build_sqlite
from harness.prepare.fetch_rows import FetchPolicy, RowFetcher

SPLITS = ("train", "rl", "eval")
INSTRUCTION_LINES = ["You answer questions about a database with one SQLite query.",
                     "Reply with the query and nothing else."]
SHARED_GOLD = "SELECT count(*) FROM Customers"  # music_shop (train) and bakery (validation)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def load(out: Path) -> tuple[dict[str, list[dict]], dict, dict]:
    """(rows per split, index, summary) of a prepare output folder."""
    rows = {name: read_jsonl(out / "data" / f"{name}.jsonl") for name in SPLITS}
    index = json.loads((out / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    summary = json.loads((out / "prepare-summary.json").read_text(encoding="utf-8"))
    return rows, index, summary


def output_files(out: Path) -> dict[str, bytes]:
    """Every file prepare writes that must be deterministic, by relative path."""
    paths = [out / "data" / f"{name}.jsonl" for name in SPLITS]
    paths += [out / "bundle" / "data" / "index.json", *sorted((out / "bundle" / "data" / "databases").iterdir())]
    return {str(p.relative_to(out)): p.read_bytes() for p in paths}


def test_row_counts_agree_everywhere(prepared_sample):
    rows, index, summary = load(prepared_sample)
    assert {name: len(rows[name]) for name in SPLITS} == summary["rows"] == {"train": 28, "rl": 17, "eval": 20}
    assert len(index["rows"]) == sum(summary["rows"].values())
    read = summary["rows_read"]
    skipped = {source: sum(counts.values()) for source, counts in summary["skips"].items()}
    assert read["train"] == summary["rows"]["train"] + summary["rows"]["rl"] + skipped.get("train", 0)
    assert read["validation"] == summary["rows"]["eval"] + skipped.get("validation", 0)


def test_rows_are_chat_rows_stating_the_schema_verbatim(prepared_sample):
    rows, index, _ = load(prepared_sample)
    schema = {db_id: entry["schema"] for db_id, entry in index["databases"].items()}
    for entry, row in zip(index["rows"], [r for name in SPLITS for r in rows[name]]):
        system, user, assistant = row["messages"]
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
        lines = system["content"].split("\n")
        assert lines[:2] == INSTRUCTION_LINES
        assert lines[2:] == schema[entry["db_id"]], entry["id"]
        assert assistant["content"] == entry["gold"] and user["content"].strip()


def test_schema_lines_come_from_the_database_file(prepared_sample):
    """The index's schema (what prompts state) is read from the staged file, table by table."""
    _, index, _ = load(prepared_sample)
    pets = index["databases"]["pets_club"]["schema"]
    assert pets == ["Owner(owner_id, name, city, age)",
                    "Pet(pet_id, owner_id, name, species, weight, birth_year)"]


def test_index_ids_follow_split_and_line(prepared_sample):
    _, index, _ = load(prepared_sample)
    expected = [f"{name}-{i:05d}" for name in SPLITS for i in range(len(read_jsonl(
        prepared_sample / "data" / f"{name}.jsonl")))]
    assert [r["id"] for r in index["rows"]] == expected
    assert {r["split"] for r in index["rows"]} == set(SPLITS)


def test_only_the_used_databases_are_staged(prepared_sample):
    _, index, summary = load(prepared_sample)
    used = {r["db_id"] for r in index["rows"]}
    staged = {p.stem for p in (prepared_sample / "bundle" / "data" / "databases").iterdir()}
    assert staged == used == set(index["databases"])
    for entry in index["databases"].values():
        data = (prepared_sample / "bundle" / "data" / entry["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["bytes"]
    assert summary["databases"]["count"] == len(used)
    assert summary["databases"]["bytes"] == sum(e["bytes"] for e in index["databases"].values())


def test_the_bundle_modules_are_staged_unchanged(prepared_sample):
    staged = prepared_sample / "bundle"
    assert pack.python_files(staged) == pack.python_files(BUNDLE_SRC) and len(pack.python_files(staged)) > 30
    assert all((staged / name).read_bytes() == (BUNDLE_SRC / name).read_bytes() for name in pack.python_files(staged))


def test_eval_databases_are_unseen_in_training(prepared_sample):
    rows, index, summary = load(prepared_sample)
    by_split: dict[str, set[str]] = {}
    for row in index["rows"]:
        by_split.setdefault(row["split"], set()).add(row["db_id"])
    assert by_split["eval"] and not by_split["eval"] & (by_split["train"] | by_split["rl"])
    assert summary["databases"]["eval"] == ["school_sports", "bakery"]  # the validation order


def test_a_gold_shared_across_databases_is_left_out_everywhere(prepared_sample):
    _, index, summary = load(prepared_sample)
    assert SHARED_GOLD not in {normalize_gold(r["gold"]) for r in index["rows"]}
    assert summary["shared_golds"] == [SHARED_GOLD]
    assert summary["skips"]["train"]["gold shared with another database"] == 1
    assert summary["skips"]["validation"]["gold shared with another database"] == 2
    homes: dict[str, set[str]] = {}
    for row in index["rows"]:
        homes.setdefault(normalize_gold(row["gold"]), set()).add(row["db_id"])
    assert all(len(dbs) == 1 for dbs in homes.values())


def gold_is_empty(out: Path, db_id: str, gold: str) -> bool:
    shape = bundle_verify.gold_shape(gold, str(out / "bundle" / "data" / "databases" / f"{db_id}.sqlite"))
    return not shape.rows


def test_empty_golds_are_kept_out_of_rl_only(prepared_sample):
    _, index, summary = load(prepared_sample)
    empty = {split: [r["id"] for r in index["rows"] if r["split"] == split
                     and gold_is_empty(prepared_sample, r["db_id"], r["gold"])] for split in SPLITS}
    assert empty["rl"] == []
    assert empty["train"] and empty["eval"], "train and eval keep rows whose gold returns nothing"
    assert summary["skips"]["train"]["gold returns no rows (kept out of rl)"] == 2


def score_staged_rows(out: Path, cwd: Path) -> dict:
    """Score every index row's gold against itself with the staged bundle, imported as the trainer
    does: from its own folder in a fresh interpreter, no repository on the path, given only the
    completion and the gold (no db_id, no prompt). Returns {"rows": n, "bad": [ids not scoring 1]}.
    No bytecode is written: the folder is a shared fixture other tests may pack.
    """
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(out)!r})\n"
        "import bundle\n"
        "from bundle import reward\n"
        f"assert bundle.__file__.startswith({str(out)!r}), bundle.__file__\n"
        f"rows = json.load(open({str(out / 'bundle' / 'data' / 'index.json')!r}))['rows']\n"
        "bad = [r['id'] for r in rows if reward.compute_score(solution_str=r['gold'], ground_truth=r['gold']) != 1]\n"
        "print(json.dumps({'rows': len(rows), 'bad': bad[:20]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_every_row_scores_1_from_the_staged_bundle_alone(prepared_sample, tmp_path):
    assert score_staged_rows(prepared_sample, tmp_path) == {"rows": 65, "bad": []}


def test_two_runs_are_byte_identical(prepared_sample, tmp_path):
    run_prepare(tmp_path, "--sample")
    assert output_files(tmp_path) == output_files(prepared_sample)


def test_the_api_path_gives_the_same_bytes_as_the_sample_files(prepared_sample, fixture_dbs, tmp_path):
    """The sample served over HTTP (paged, cached) and read from --databases: same splits and index."""
    pages = {split: FIXTURES / "sample" / f"rows-{split}.json" for split in ("train", "validation")}
    with ApiServer.from_pages(pages) as api:
        run_prepare(tmp_path / "out", "--databases", str(next(iter(fixture_dbs.values())).parent.parent),
                    "--api-url", api.url, "--cache-dir", str(tmp_path / "cache"), "--request-interval", "0",
                    "--rows", "28", "--rl-rows", "17", "--eval-rows", "20")
        assert len(api.requests) == 2
    assert output_files(tmp_path / "out") == output_files(prepared_sample)


def test_neighbour_databases_for_the_chosen_splits_only(prepared_sample, tmp_path):
    index = json.loads((prepared_sample / "bundle" / "data" / "index.json").read_text())
    with_neighbours = {d for d, e in index["databases"].items() if e.get("neighbours")}
    chosen = {r["db_id"] for r in index["rows"] if r["split"] in ("eval", "rl")}
    assert with_neighbours and with_neighbours <= chosen  # eval and rl by default, never train-only ones
    for db_id in with_neighbours:
        for entry in index["databases"][db_id]["neighbours"]:
            assert (prepared_sample / "bundle" / "data" / entry["file"]).is_file()
    summary = json.loads((prepared_sample / "prepare-summary.json").read_text())["neighbours"]
    assert summary["splits"] == ["eval", "rl"] and summary["total"]["kept"] == sum(
        len(index["databases"][d]["neighbours"]) for d in with_neighbours)


def test_no_neighbours_and_none_left_from_a_previous_run(tmp_path):
    run_prepare(tmp_path, "--sample")
    assert any((tmp_path / "bundle" / "data" / "neighbours").iterdir())
    summary = run_prepare(tmp_path, "--sample", "--neighbours", "none")
    index = json.loads((tmp_path / "bundle" / "data" / "index.json").read_text())
    assert not any(e.get("neighbours") for e in index["databases"].values()) and not index["neighbour_results"]
    assert not list((tmp_path / "bundle" / "data" / "neighbours").glob("*"))
    assert summary["neighbours"]["total"]["kept"] == 0


@pytest.mark.parametrize("value", ["bogus", "eval,,nope", ","])
def test_an_unknown_neighbour_split_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["prepare", "--sample", "--neighbours", value])
    assert exited.value.code == 2 and "give split names among train, rl, eval" in capsys.readouterr().err


def test_keep_shared_golds(tmp_path):
    summary = run_prepare(tmp_path, "--sample", "--keep-shared-golds", "--rl-rows", "18", "--eval-rows", "22")
    _, index, _ = load(tmp_path)
    homes = {r["db_id"] for r in index["rows"] if normalize_gold(r["gold"]) == SHARED_GOLD}
    assert homes == {"music_shop", "bakery"}
    assert summary["shared_golds"] == [SHARED_GOLD] and summary["rows"]["eval"] == 22
    assert "gold shared with another database" not in summary["skips_total"]


def test_keep_empty_gold_lets_them_into_rl(tmp_path):
    summary = run_prepare(tmp_path, "--sample", "--keep-empty-gold", "--rl-rows", "19")
    _, index, _ = load(tmp_path)
    rl = [r for r in index["rows"] if r["split"] == "rl"]
    assert len(rl) == 19 and sum(gold_is_empty(tmp_path, r["db_id"], r["gold"]) for r in rl) == 2
    assert "gold returns no rows (kept out of rl)" not in summary["skips_total"]


def test_a_schema_limit_skips_whole_databases(tmp_path):
    # Schemas of the sample: pets_club 89 and weather 86 characters, the others 119 to 158.
    # Train rows come pets_club (13), library (13), weather (10), music_shop (12).
    summary = run_prepare(tmp_path, "--sample", "--max-schema", "100", "--rows", "20", "--rl-rows", "0",
                          "--eval-rows", "0")
    _, index, _ = load(tmp_path)
    assert summary["databases"]["skipped"]["schema too long"] == ["library"]
    assert summary["skips_total"] == {"schema too long": 13}
    assert set(index["databases"]) == {"pets_club", "weather"}
    assert all(len("\n".join(e["schema"])) <= 100 for e in index["databases"].values())


def test_a_short_source_is_a_warning(tmp_path):
    summary = run_prepare(tmp_path, "--sample", "--rows", "40", "--rl-rows", "50", "--eval-rows", "30")
    assert summary["rows"]["rl"] < 50 and summary["rows"]["eval"] == 20
    assert any(w.startswith("rl: ") and "of 50 asked" in w for w in summary["warnings"])
    assert any(w.startswith("eval: 20 rows of 30 asked") for w in summary["warnings"])


def test_prepare_runs_in_a_bare_interpreter_from_elsewhere(tmp_path):
    # -I -S: no site-packages, no PYTHON* variables, not even the current folder on the path. prepare
    # needs the standard library, bundle/ and the harness's own packages (tests/test_contexts.py).
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from harness.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, "prepare", "--sample", "--rows", "3", "--rl-rows",
                           "2", "--eval-rows", "2", "--output", str(tmp_path / "o")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "rows written: train 3, rl 2, eval 2" in done.stdout
    assert len(read_jsonl(tmp_path / "o" / "data" / "eval.jsonl")) == 2


@pytest.mark.parametrize("argv, message", [
    ([], "give --databases"),
    (["--sample", "--databases", "x"], "drop --databases"),
    (["--databases", "/nonexistent/spider/database"], "is not a folder"),
], ids=["no source", "two sources", "missing folder"])
def test_bad_flags_are_clear_errors(argv, message, tmp_path, capsys):
    assert main(["prepare", *argv, "--output", str(tmp_path)]) == 3
    assert message in capsys.readouterr().err


def test_an_output_folder_that_is_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("not a folder")
    assert main(["prepare", "--sample", "--output", str(tmp_path / "taken")]) == OutputError.exit_code
    assert f"{tmp_path / 'taken'} is a file, not a folder" in capsys.readouterr().err


def test_negative_sizes_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["prepare", "--sample", "--rows", "-1"])
    assert exited.value.code == 2 and "-1 is negative" in capsys.readouterr().err


def serve_sample() -> ApiServer:
    return ApiServer.from_pages({split: FIXTURES / "sample" / f"rows-{split}.json"
                                 for split in ("train", "validation")})


def api_args(api: ApiServer, tmp_path: Path, databases: Path) -> list[str]:
    return ["--databases", str(databases), "--api-url", api.url, "--cache-dir", str(tmp_path / "cache"),
            "--request-interval", "0", "--output", str(tmp_path / "out")]


def test_an_empty_databases_folder(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["prepare", "--databases", str(tmp_path / "empty"), "--output", str(tmp_path / "o")]) == 3
    assert "holds no databases" in capsys.readouterr().err


def test_a_corrupt_database_is_named(fixture_dbs, tmp_path, capsys):
    folder = tmp_path / "dbs"
    shutil.copytree(next(iter(fixture_dbs.values())).parent.parent, folder)
    (folder / "library" / "library.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x07" * 500)
    with serve_sample() as api:
        assert main(["prepare", *api_args(api, tmp_path, folder)]) == 3
    err = capsys.readouterr().err
    assert "database 'library'" in err and "not a readable SQLite file" in err


def test_databases_of_another_dataset_leave_nothing_usable(tmp_path, capsys):
    folder = tmp_path / "dbs" / "other"
    folder.mkdir(parents=True)
    build_sqlite(FIXTURES / "databases" / "weather.sql", folder / "other.sqlite")
    with serve_sample() as api:
        assert main(["prepare", *api_args(api, tmp_path, tmp_path / "dbs")]) == 3
    err = capsys.readouterr().err
    assert "no usable row for the train split" in err and "database missing 48" in err


def test_an_eval_row_on_a_training_database_is_an_error(fixture_dbs, tmp_path, capsys):
    train = json.loads((FIXTURES / "sample" / "rows-train.json").read_text())["rows"]
    rows = [r["row"] for r in train]
    with ApiServer({"train": rows[:20], "validation": rows[:3]}) as api:
        code = main(["prepare", *api_args(api, tmp_path, next(iter(fixture_dbs.values())).parent.parent),
                             "--rows", "5", "--rl-rows", "0", "--eval-rows", "2"])
    assert code == 3
    assert "validation row 0" in capsys.readouterr().err


def test_stale_outputs_are_replaced(prepared_sample, tmp_path):
    """A second run into a used folder: a database no longer used and a stray module disappear."""
    out = tmp_path / "out"
    shutil.copytree(prepared_sample, out)
    (out / "bundle" / "old_module.py").write_text("x = 1\n")
    run_prepare(out, "--sample", "--rows", "5", "--rl-rows", "0", "--eval-rows", "2")
    _, index, _ = load(out)
    assert {p.stem for p in (out / "bundle" / "data" / "databases").iterdir()} == set(index["databases"])
    assert not (out / "bundle" / "old_module.py").exists()


def test_an_api_failure_writes_nothing_and_the_rerun_resumes(fixture_dbs, tmp_path):
    train = [r["row"] for r in json.loads((FIXTURES / "sample" / "rows-train.json").read_text())["rows"]] * 3
    validation = [r["row"] for r in json.loads((FIXTURES / "sample" / "rows-validation.json").read_text())["rows"]]
    databases = next(iter(fixture_dbs.values())).parent.parent
    rules = splits.Rules(splits.Catalog.from_folder(databases, 1000), splits.GoldChecker())
    sizes = splits.Sizes(100, 20, 5)  # needs the second page of train (rows 100-143)
    with ApiServer({"train": train, "validation": validation}) as api:
        def source() -> RowFetcher:
            return RowFetcher(api.url, PageCache(tmp_path / "cache", "xlangai/spider", "spider"),
                              policy=FetchPolicy(interval_s=0, attempts=3), sleep=lambda s: None)
        # Train page 0 answers; train page 100 then fails all 3 attempts.
        api.faults = [Fault("ok"), Fault("500"), Fault("500"), Fault("500")]
        with pytest.raises(FetchError, match="offset=100.*failed 3 times"):
            job.prepare(source(), rules, sizes, tmp_path / "out")
        assert not (tmp_path / "out").exists(), "nothing is written before every row is known"
        api.requests.clear()
        summary = job.prepare(source(), rules, sizes, tmp_path / "out")
        assert [(r["split"], r["offset"]) for r in api.requests] == [("train", "100"), ("validation", "0")]
    assert summary["rows"] == {"train": 100, "rl": 20, "eval": 5}
    assert summary["fetch"]["pages_cached"] == 1 and summary["fetch"]["pages_fetched"] == 2


def test_an_api_refusal_exits_with_the_fetch_code(tmp_path, fixture_dbs, capsys):
    with ApiServer({"train": []}, dataset="someone/else") as api:
        code = main(["prepare", *api_args(api, tmp_path, next(iter(fixture_dbs.values())).parent.parent)])
    assert code == 4
    assert "answered HTTP 404" in capsys.readouterr().err


# -- the staged bundle is built whole or not at all (harness.prepare.staging) -----------------------

def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _interrupted_prepare(out: Path, tmp_path: Path) -> None:
    """prepare --sample (fewer rows) into ``out``, stopped by Ctrl-C once the first neighbour databases
    are distilled: the staged bundle's modules, databases and index are written by then."""
    def ctrl_c(line: str) -> None:
        if line.startswith("neighbours "):
            raise KeyboardInterrupt
    catalog = splits.Catalog(job.build_sample_databases(tmp_path / "dbs"), 1000)
    rules = splits.Rules(catalog, splits.GoldChecker())
    with pytest.raises(KeyboardInterrupt):
        job.prepare(job.sample_source(), rules, splits.Sizes(5, 3, 2), out, say=ctrl_c)


def test_an_interrupted_prepare_leaves_the_previous_staged_bundle_as_it_was(prepared_sample, tmp_path):
    out = Path(shutil.copytree(prepared_sample, tmp_path / "out"))
    before = _listing(out / "bundle")
    _interrupted_prepare(out, tmp_path)
    assert _listing(out / "bundle") == before
    # nothing left over (cache/ is the copied prepare's: the search databases it drew for grade)
    assert sorted(p.name for p in out.iterdir()) == ["bundle", "cache", "data", "prepare-summary.json"]
    assert main(["pack", "--data", str(out)]) == 0


def test_an_interrupted_first_prepare_leaves_no_staged_bundle_to_pack(tmp_path, capsys):
    out = tmp_path / "out"
    _interrupted_prepare(out, tmp_path)
    assert list(out.iterdir()) == []
    assert main(["pack", "--data", str(out)]) == PackError.exit_code
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    pytest.param(lambda staged: (staged / ".staged.json").unlink(), "is incomplete: it has no .staged.json",
                 id="no mark: a half-built stage of an older harness, or one staged by hand"),
    pytest.param(lambda staged: (staged / "data" / "index.json").write_text("{}"), "changed after prepare finished",
                 id="an index changed after prepare finished"),
])
def test_pack_refuses_a_staged_bundle_prepare_did_not_finish(prepared_sample, tmp_path, capsys, damage, message):
    out = Path(shutil.copytree(prepared_sample, tmp_path / "out"))
    damage(out / "bundle")
    assert main(["pack", "--data", str(out)]) == PackError.exit_code
    err = capsys.readouterr().err
    assert message in err and "make sample-bundle" in err
    assert not (out / "spider-scoring.zip").exists()


def test_the_mark_is_not_packed_nor_reported_left_out(prepared_sample, tmp_path, capsys):
    assert main(["pack", "--data", str(prepared_sample), "--output", str(tmp_path / "b.zip")]) == 0
    assert "left out" not in capsys.readouterr().out
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        assert not [n for n in archive.namelist() if "staged" in n]


def test_a_read_only_output_folder_fails_before_the_work(tmp_path):
    out = tmp_path / "out"
    done = run_with_read_only(out, [sys.executable, "-m", "harness", "prepare", "--sample", "--output", str(out)])
    assert done.returncode == OutputError.exit_code, done.stderr
    assert f"cannot write the prepared folder into {out}" in done.stderr and "Traceback" not in done.stderr
    assert "rows" not in done.stdout  # no summary: nothing was selected


def test_sigterm_during_prepare_says_it_stopped_and_keeps_nothing_half_built(tmp_path):
    """As Ctrl-C does: the staging folder is removed and the command says it stopped (exit 130)."""
    import signal
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-u", "-m", "harness", "prepare", "--sample", "--output", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert process.stderr is not None
    for line in process.stderr:  # prepare's progress lines
        if "bundle staged" in line:  # the stage is being built: the databases are in it
            process.send_signal(signal.SIGTERM)
            break
    _out, err = process.communicate(timeout=600)
    assert process.returncode == INTERRUPTED, err[-2000:]
    assert "stopped: SIGTERM" in err and "Traceback" not in err  # as Ctrl-C: "interrupted"
    assert not (out / "bundle").exists() and [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_a_full_disk_is_told_as_a_full_disk(tmp_path, monkeypatch):
    import errno

    from harness.common import files

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files, "_write_and_rename", full)
    with pytest.raises(OutputError, match="the disk is full: No space left on device .ENOSPC.; free space on it"):
        files.atomic_write_bytes(tmp_path / "x.json", b"{}")
    monkeypatch.undo()
    monkeypatch.setattr(job, "stage_bundle", lambda *a, **k: full(None, None))
    catalog = splits.Catalog(job.build_sample_databases(tmp_path / "dbs"), 1000)
    with pytest.raises(OutputError, match="the disk is full"):
        job.prepare(job.sample_source(), splits.Rules(catalog, splits.GoldChecker()), splits.Sizes(5, 3, 2), tmp_path / "o")
