"""Shared fixtures: sample databases built from fixtures/, a staged sample bundle, real Spider data."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.prepare import bundle_data, pack
from harness.prepare.neighbours import attach, distil

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
BUNDLE_SRC = ROOT / "bundle"

# Ray starts its worker processes at nice 15: beside the suite's other worker, busy at nice 0, they
# got so little of the CPU that verl's Ray loop took 282 s in CI where it takes 25 s alone (1,057 s
# with two busy processes beside it). Every Ray instance the suite starts, here or in a subprocess,
# gives its workers the suite's own priority.
os.environ["RAY_worker_niceness"] = "0"


# Tests sharing a costly session fixture run on one xdist worker (`--dist loadgroup`, as `make
# test` runs them), so the fixture is built once, not once a worker: the prepared default Spider
# splits (about 4 minutes of prepare, neighbours and audit) and the trainers' libraries' setups.
SHARED_FIXTURE_GROUPS = {"prepared_spider": "prepared-spider"}
MODULE_GROUPS = {"test_integration_verl.py": "verl", "test_integration_trl.py": "trl"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue  # a group the module names itself (the Ray clusters' modules share one)
        group = MODULE_GROUPS.get(item.path.name) or next(
            (g for name, g in SHARED_FIXTURE_GROUPS.items() if name in getattr(item, "fixturenames", ())), None) \
            or _module_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _module_fixture_group(item: pytest.Item) -> str | None:
    """A group of its own for the tests of a module that share a module-scoped fixture of that module
    (the hostile suite's run, a module's neighbours): on one worker, in order, it is built once;
    spread over the workers, once a worker and again whenever a worker comes back to the module."""
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::", 1)[0]
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        if any(d.scope == "module" and d.baseid == module for d in defs):
            return f"module:{module}"
    return None


# A suite started in the background of a shell without job control (`make test &` in a script)
# inherits SIGINT ignored, and so would every process it starts: the tests that interrupt a run with
# Ctrl-C would see it ignored. Python's own handler, set here, is reset to the default in every
# program a test starts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    """Refuse ``--dist loadgroup`` on a pytest / pytest-xdist pair that silently drops the groups
    (pytest-dev/pytest-xdist#1386: pytest 9.2's node ids): every costly shared fixture would be built
    once a worker, minutes each, and the Ray clusters' modules would share the machine."""
    if config.getoption("dist", None) != "loadgroup":
        return
    from importlib.metadata import version
    pytest_version = tuple(int(p) for p in pytest.__version__.split(".")[:2] if p.isdigit())
    xdist_version = tuple(int(p) for p in version("pytest-xdist").split(".")[:3] if p.isdigit())
    if pytest_version >= (9, 2) and xdist_version <= (3, 8, 0):
        raise pytest.UsageError(
            f"--dist loadgroup does not group under pytest {pytest.__version__} with pytest-xdist "
            f"{version('pytest-xdist')} (pytest-dev/pytest-xdist#1386): install the test group's pins, "
            "`.venv/bin/pip install -e '.[test]'` (pytest<9.2)")


def sample_rows(split: str) -> list[dict]:
    page = json.loads((FIXTURES / "sample" / f"rows-{split}.json").read_text(encoding="utf-8"))
    return [r["row"] for r in page["rows"]]


@pytest.fixture(scope="session")
def fixture_dbs(tmp_path_factory) -> dict[str, Path]:
    """Every fixtures/databases/*.sql built into a .sqlite file: {db_id: path}."""
    out = tmp_path_factory.mktemp("fixture_dbs")
    return {sql.stem: bundle_data.build_sqlite(sql, out / sql.stem / f"{sql.stem}.sqlite")
            for sql in sorted((FIXTURES / "databases").glob("*.sql"))}


def stage_bundle(dest: Path, fixture_dbs: dict[str, Path], *, precompute: bool = True,
                 rows: list[bundle_data.IndexRow] | None = None, reward_shape=None) -> Path:
    """A bundle root like the unpacked zip: the bundle's modules plus data/ from the sample rows (``reward_shape``:
    a bundle.contract.shapes.Shape the reward pays by; default binary)."""
    dest.mkdir(parents=True, exist_ok=True)
    pack.stage_modules(dest, BUNDLE_SRC)
    if rows is None:
        rows = [bundle_data.IndexRow(f"{split}-{i:05d}", split, r["db_id"], r["query"])
                for split in ("train", "validation") for i, r in enumerate(sample_rows(split))]
    bundle_data.write_bundle_data(dest, rows, fixture_dbs, precompute=precompute, reward_shape=reward_shape)
    return dest


@pytest.fixture(scope="session")
def sample_bundle(tmp_path_factory, fixture_dbs) -> Path:
    """A staged bundle root over the whole sample, gold results precomputed. Treat as read-only."""
    return stage_bundle(tmp_path_factory.mktemp("bundle"), fixture_dbs)


@pytest.fixture(scope="session")
def neighbour_bundle(fixture_dbs, tmp_path_factory) -> Path:
    """The sample bundle with neighbour databases for every database its rows use. Treat as read-only."""
    root = tmp_path_factory.mktemp("neighbour_bundle")
    with default_scoring_env():
        return _neighbour_bundle(root, fixture_dbs, tmp_path_factory)


def _neighbour_bundle(root: Path, fixture_dbs: dict[str, Path], tmp_path_factory) -> Path:
    stage_bundle(root, fixture_dbs)
    index = json.loads((root / "data" / "index.json").read_text())
    golds: dict[str, list[str]] = {}
    for row in index["rows"]:
        golds.setdefault(row["db_id"], []).append(row["gold"])
    built = attach.build(golds, {d: root / "data" / "databases" / f"{d}.sqlite" for d in golds},
                         tmp_path_factory.mktemp("neighbour_work"))
    attach.attach(root / "data", index, built, distil.Settings(), ["train", "validation"])
    (root / "data" / "index.json").write_bytes(bundle_data.dumps_canonical(index))
    return root


@pytest.fixture
def bundle_env(sample_bundle, monkeypatch) -> Path:
    """TRAINER_BUNDLE_ROOT pointed at the sample bundle for one test."""
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(sample_bundle))
    return sample_bundle


def find_spider() -> Path | None:
    """$SPIDER_DATA when it holds Spider (dev.json and database/); `make test` and .ci/run pass it."""
    env = os.environ.get("SPIDER_DATA")
    if env and (Path(env) / "database").is_dir() and (Path(env) / "dev.json").is_file():
        return Path(env)
    return None


@pytest.fixture(scope="session")
def spider_dir() -> Path:
    found = find_spider()
    if found is None:
        _unavailable("real Spider data not found: set SPIDER_DATA to a Spider folder (dev.json, database/)")
    assert found is not None
    return found


def _unavailable(problem: str) -> None:
    """Skip, saying why; under CI (where .ci/run starts the engine and builds the base) fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{problem} (CI must provide it: .ci/run starts the engine and builds the offline base)")
    pytest.skip(problem)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Skip, saying why, when no Docker engine answers (tests that run containers ask for it)."""
    import docker
    from harness.containers.trainer import DEFAULT_BASE_IMAGE, engine_problem
    problem = engine_problem()
    if problem:
        _unavailable(problem)
    try:  # the harness builds on $BASE_IMAGE (`make test` and .ci/run pass the offline base)
        docker.from_env(timeout=30).images.get(DEFAULT_BASE_IMAGE)
    except docker.errors.ImageNotFound:
        _unavailable(f"base image {DEFAULT_BASE_IMAGE} is not present: `make docker-base` builds the offline "
                     "spider-scoring-base:bookworm (pass BASE_IMAGE=spider-scoring-base:bookworm), or docker pull it")


# -- a read-only output folder, as a user meets it --------------------------------------------------

def run_with_read_only(folder: Path, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``argv`` with ``folder`` read-only. A normal user: the folder's mode, 0555. Root, whom mode
    bits stop from nothing: a read-only tmpfs mounted over it in a private mount namespace
    (``unshare --mount``); skipped, saying why, where that is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    kwargs = {"capture_output": True, "text": True, "cwd": ROOT, "timeout": 300, **kwargs}
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(argv, **kwargs)
        finally:
            folder.chmod(0o755)
    if not shutil.which("unshare") or subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode:
        pytest.skip("running as root, whom a folder's mode does not stop, and no private mount namespace "
                    "(unshare --mount) to mount the folder read-only")
    mount = 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"'
    return subprocess.run(["unshare", "--mount", "sh", "-c", mount, str(folder), *argv], **kwargs)


# -- prepared outputs (harness prepare), shared by every test module that needs them --------------

@contextlib.contextmanager
def default_scoring_env() -> Iterator[None]:
    """The bundle's settings at their defaults for a shared build: a session fixture is built by
    whichever test asks first, and a module may have set SPIDER_SCORING_* for all its tests (the
    search cache's keys name the limits, so a sample prepared under ``DIFFERENCE=off`` kept other
    entries than a later draw at the defaults). The per-process limits are read again after it."""
    from bundle.scoring import entry as scoring_entry
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("SPIDER_SCORING_")]:
            patch.delenv(name)
        scoring_entry._limits.clear()
        try:
            yield
        finally:
            scoring_entry._limits.clear()


@pytest.fixture(autouse=True)
def _limits_read_afresh() -> Iterator[None]:
    """``scoring_entry.current_limits`` reads SPIDER_SCORING_* once a process: a test that sets one
    (monkeypatch) must not leave its limits to the tests after it on the same worker."""
    yield
    from bundle.scoring import entry as scoring_entry
    scoring_entry._limits.clear()


def run_prepare(out: Path, *args: str) -> dict:
    """Run `prepare` in-process into ``out``; the summary it wrote (pytest.fail on a non-zero exit)."""
    from harness.cli import main
    code = main(["prepare", *args, "--output", str(out)])
    if code != 0:
        pytest.fail(f"prepare {' '.join(args)} exited with {code}")
    return json.loads((out / "prepare-summary.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def prepared_sample(tmp_path_factory) -> Path:
    """`prepare --sample` once: OUT/data/{train,rl,eval}.jsonl, OUT/bundle/, OUT/prepare-summary.json.

    Treat as read-only (copy it to change it).
    """
    out = tmp_path_factory.mktemp("prepared_sample")
    with default_scoring_env():
        run_prepare(out, "--sample")
    return out


@pytest.fixture(scope="session")
def sample_zip(prepared_sample, tmp_path_factory) -> Path:
    """The sample bundle packed into a zip, exactly as `make pack` builds it. Treat as read-only."""
    from harness.prepare import pack
    out = tmp_path_factory.mktemp("sample_zip") / "spider-scoring.zip"
    pack.pack(prepared_sample / "bundle", out)
    return out


@pytest.fixture(scope="session")
def shaped_sample(tmp_path_factory):
    """``shaped_sample(name)``: the sample prepared with ``--reward-shape name`` (the same rows as
    prepared_sample) and packed, once per shape per session: (prepared folder, zip). Read-only."""
    from harness.prepare import pack
    made: dict[str, tuple[Path, Path]] = {}

    def make(name: str) -> tuple[Path, Path]:
        if name not in made:
            root = tmp_path_factory.mktemp(f"shaped-{name}")
            with default_scoring_env():
                run_prepare(root / "out", "--sample", "--reward-shape", name)
            pack.pack(root / "out" / "bundle", root / "spider-scoring.zip")
            made[name] = (root / "out", root / "spider-scoring.zip")
        return made[name]

    return make


# The arguments prepared_spider ran with, minus --api-url, --cache-dir and --out. Without the near
# misses (their measurement on these splits is some ten minutes of CPU: `make bench` and docs/audit.md
# give its figures; tests/test_near_misses.py tests it on the fixtures).
SPIDER_PREPARE_ARGS = ("--rows", "2000", "--rl-rows", "600", "--eval-rows", "300", "--request-interval", "0",
                       "--near-miss-families", "none")


@pytest.fixture(scope="session")
def prepared_spider(tmp_path_factory, spider_dir) -> Path:
    """`prepare` on the real Spider with the defaults 2000/600/300, once per session (minutes: neighbours, audit).

    Rows come from tests/api_server.py serving train_spider.json and dev.json on 127.0.0.1; the
    fetched pages stay in ``OUT/../cache``. Same layout as prepared_sample; treat as read-only.
    """
    from api_server import ApiServer
    root = tmp_path_factory.mktemp("prepared_spider")
    with ApiServer.from_spider(spider_dir) as api, default_scoring_env():
        run_prepare(root / "out", "--databases", str(spider_dir / "database"), "--api-url", api.url,
                    "--cache-dir", str(root / "cache"), *SPIDER_PREPARE_ARGS)
    return root / "out"


# -- the trainers' libraries (tests marked integration; `make setup-integration` installs them) ------

def require_modules(*names: str) -> None:
    """Skip, saying why, when one of the integration libraries is not installed (under CI: fail)."""
    import importlib.util
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        _unavailable(f"{', '.join(missing)} not installed: `make setup-integration` installs the [integration] "
                     "group (torch CPU, transformers, trl, verl, ray) into .venv")


@pytest.fixture(scope="session")
def exported_rl(prepared_sample, tmp_path_factory) -> dict[str, Path]:
    """The sample's rl split exported by `harness export` in both trainer formats: {format: jsonl}."""
    from harness.cli import main
    out = tmp_path_factory.mktemp("exported")
    paths = {}
    for fmt in ("trl", "verl"):
        paths[fmt] = out / f"{fmt}.jsonl"
        if main(["export", "--format", fmt, "--data", str(prepared_sample), "--output", str(paths[fmt])]) != 0:
            pytest.fail(f"export --format {fmt} failed")
    return paths


def golds(eval_path: Path) -> list[str]:
    return [json.loads(line)["messages"][-1]["content"] for line in eval_path.read_text().splitlines() if line]


@pytest.fixture
def data(tmp_path, prepared_sample, sample_zip) -> Path:
    """A prepared folder of the sample: its eval split and its zip where `grade` looks for them."""
    folder = tmp_path / "prepared"
    (folder / "data").mkdir(parents=True)
    shutil.copyfile(prepared_sample / "data" / "eval.jsonl", folder / "data" / "eval.jsonl")
    shutil.copyfile(sample_zip, folder / "spider-scoring.zip")
    return folder
