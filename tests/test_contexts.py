"""Each runtime context's packages import in that context's interpreter, and load nothing it lacks.

| context | interpreter | may load |
|---|---|---|
| common, emulator | a fresh ``python -I -S`` (the trainer container has the standard library only) | the standard library |
| proxy | a fresh ``python -I -S`` (the proxy image's entry point runs on the base image's Python) | the standard library |
| prepare | a fresh ``python -I -S`` | the standard library and ``bundle/`` |
| service | a fresh ``python -I -S`` with the pinned wheels' folder | the standard library and the wheels of docker/service-requirements.txt |
| host (commands, containers, report, submit, loadtest) | this one | anything declared in pyproject |

Every module of the context's packages is imported; every module then loaded must be one the
context allows, and every harness module one of the context's own packages (docs/architecture.md).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
sys.path[:0] = json.loads(sys.argv[1])
before = set(sys.modules)
for name in json.loads(sys.argv[2]):
    package = importlib.import_module(name)
    for info in pkgutil.walk_packages(package.__path__, name + "."):
        importlib.import_module(info.name)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def pinned_service_wheels() -> tuple[set[str], list[str]]:
    """Top-level import names and install folders of the service image's pinned distributions."""
    names = re.findall(r"^([A-Za-z0-9_.-]+)==", (ROOT / "docker" / "service-requirements.txt").read_text(), re.M)
    tops: set[str] = set()
    folders: set[str] = set()
    for name in names:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or []:
            if file.suffix == ".py" and "dist-info" not in file.parts[0]:
                tops.add(file.parts[0].removesuffix(".py"))
        folders.add(str(dist.locate_file("")))
    return tops, sorted(folders)


SERVICE_TOPS, SERVICE_PATHS = pinned_service_wheels()
# context -> (isolated interpreter?, extra sys.path entries, packages imported, top-level names allowed, harness packages)
CONTEXTS = {
    "common": (True, [], ["harness.common"], set(), {"harness.common"}),
    "emulator": (True, [], ["harness.emulator"], set(), {"harness.common", "harness.emulator"}),
    "proxy": (True, [], ["harness.proxy"], set(), {"harness.common", "harness.proxy"}),
    "prepare": (True, [], ["harness.prepare"], {"bundle"}, {"harness.common", "harness.prepare"}),
    "service": (True, SERVICE_PATHS, ["harness.service"], SERVICE_TOPS, {"harness.common", "harness.service"}),
    "host": (False, [], ["harness.commands", "harness.bench", "harness.audit", "harness.containers", "harness.report", "harness.submit",
                       "harness.loadtest", "harness.raygrade"],
             None, None),
}


def loaded_by(isolated: bool, paths: list[str], packages: list[str]) -> list[str]:
    flags = ["-I", "-S"] if isolated else []
    done = subprocess.run([sys.executable, *flags, "-c", IMPORT_ALL, json.dumps([str(ROOT), *paths]),
                           json.dumps(packages)], capture_output=True, text=True, cwd="/", timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# The main module, and multiprocessing's name for it (prepare's process pools import multiprocessing).
MAIN_ALIASES = ("__main__", "__mp_main__")


def outside(modules: list[str], tops: set[str] | None, own: set[str] | None) -> list[str]:
    """The loaded modules a context does not allow (``None``: no limit)."""
    bad = []
    for name in modules:
        top = name.split(".")[0]
        if top == "harness":
            if own is not None and name != "harness" and not any(name == p or name.startswith(p + ".") for p in own):
                bad.append(name)
        elif tops is not None and top not in sys.stdlib_module_names and top not in tops and top not in MAIN_ALIASES:
            bad.append(name)
    return bad


@pytest.mark.parametrize("context", list(CONTEXTS))
def test_each_context_imports_only_what_its_interpreter_has(context):
    isolated, paths, packages, tops, own = CONTEXTS[context]
    modules = loaded_by(isolated, paths, packages)
    assert any(m.startswith(packages[0] + ".") for m in modules), modules  # the package's modules were imported
    assert outside(modules, tops, own) == []


def test_the_check_can_fail():
    # the service context loading the emulator, or prepare a third-party module: both caught
    assert outside(["harness.emulator.checks", "harness.service.app"], SERVICE_TOPS, CONTEXTS["service"][4]) == \
        ["harness.emulator.checks"]
    assert outside(["bundle.verify", "docker.errors", "json"], {"bundle"}, set()) == ["docker.errors"]


def test_the_service_wheels_are_known():
    assert {"gunicorn", "prometheus_client"} <= SERVICE_TOPS


def test_the_probe_runs_with_nothing_of_the_harness_on_the_path(tmp_path):
    # emulator/probe.py is run as a file by `python3 -I -S`: it must import nothing of ours
    probe = ROOT / "harness" / "emulator" / "probe.py"
    text = probe.read_text()
    assert not re.search(r"^\s*(from|import) (harness|bundle)\b", text, re.M)
    done = subprocess.run([sys.executable, "-I", "-S", str(probe), "imports", str(tmp_path)], capture_output=True,
                          text=True, cwd="/", timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["outside_stdlib"] == []
