"""The grader service's container: its run configuration (a pure function), its image inputs, the
stdlib wheel installer, and (with a Docker engine) the real container on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.common.rows import read_split
from harness.containers.service import NETWORK, NETWORK_OPTIONS, PORT, image_tag, service_config, service_limits, service_sources
from harness.containers.trainer import MOUNT
from harness.loadtest.workload import RUNAWAY_SQL
from harness.prepare import pack
from harness.service.settings import MiB, ServiceSettings

ROOT = Path(__file__).resolve().parent.parent
INSTALLER = ROOT / "docker" / "service-install-wheels.py"


# --- the run configuration ----------------------------------------------------------------------

def test_the_container_keeps_the_trainers_lockdown_and_opens_one_loopback_port(tmp_path):
    settings = ServiceSettings(workers=3)
    cfg = service_config("grader:1", tmp_path, name="g1", settings=settings, host_port=8123)
    assert cfg["read_only"] is True and cfg["cap_drop"] == ["ALL"] and cfg["security_opt"] == ["no-new-privileges"]
    assert cfg["user"] == "65534:65534" and cfg["ipc_mode"] == "none"
    assert cfg["volumes"] == {str(tmp_path.resolve()): {"bind": MOUNT, "mode": "ro"}}
    assert set(cfg["tmpfs"]) == {"/tmp"} and "noexec" in cfg["tmpfs"]["/tmp"]
    assert cfg["mem_limit"] == cfg["memswap_limit"] == service_limits(settings).mem_bytes  # no swap
    assert cfg["pids_limit"] == service_limits(settings).pids
    assert "network_mode" not in cfg and cfg["network"] == NETWORK
    assert cfg["ports"] == {f"{PORT}/tcp": ("127.0.0.1", 8123)}  # loopback only
    assert cfg["command"][:2] == ["--zip", f"{MOUNT}/bundle.zip"] and "--workers" in cfg["command"]
    assert cfg["command"][cfg["command"].index("--token-file") + 1] == "/run/secrets/spider-grader/token"
    assert cfg["environment"]["PYTHONPATH"] == "/opt/grader/site-packages:/opt/grader/app"
    any_port = service_config("grader:1", tmp_path, name="g2", settings=settings)
    assert any_port["ports"] == {f"{PORT}/tcp": ("127.0.0.1", None)}


def test_container_limits_grow_with_the_workers_and_the_bundle():
    small, large = ServiceSettings(workers=2), ServiceSettings(workers=8)
    assert service_limits(large).mem_bytes - service_limits(small).mem_bytes == 6 * small.worker_max_rss_bytes
    assert service_limits(large).pids > service_limits(small).pids
    assert service_limits(small, unpacked_bytes=900 * MiB).tmpfs_bytes >= 900 * MiB


def test_the_network_routes_nothing_out_and_binds_published_ports_to_loopback():
    assert NETWORK_OPTIONS["com.docker.network.bridge.enable_ip_masquerade"] == "false"
    assert NETWORK_OPTIONS["com.docker.network.bridge.enable_icc"] == "false"
    assert NETWORK_OPTIONS["com.docker.network.bridge.host_binding_ipv4"] == "127.0.0.1"


def test_the_image_tag_changes_with_any_input():
    files = {"service.Dockerfile": b"FROM x", "wheels/a.whl": b"1", "harness/service_app.py": b"app"}
    tag = image_tag(files, "sha256:base")
    assert tag.startswith("spider-scoring-grader:") and tag == image_tag(dict(files), "sha256:base")
    for name in files:
        assert image_tag({**files, name: files[name] + b"!"}, "sha256:base") != tag, name
    assert image_tag(files, "sha256:other") != tag


def test_the_image_copies_the_service_packages_whole():
    copied = {p.relative_to(ROOT).as_posix() for p in service_sources()}
    assert "harness/service/server.py" in copied and "harness/common/bundle_loader.py" in copied
    assert not [name for name in copied if name.startswith(("harness/emulator/", "harness/prepare/", "harness/commands/"))]


# --- the wheel installer ------------------------------------------------------------------------

def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(path: Path, files: dict[str, bytes], *, tag: str = "py3-none-any", purelib: str = "true",
               tamper: str | None = None) -> Path:
    """A minimal wheel: ``files`` plus dist-info WHEEL and RECORD (``tamper``: a file changed after RECORD)."""
    info = "demo-1.0.dist-info"
    wheel_meta = f"Wheel-Version: 1.0\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n".encode()
    entries = {**files, f"{info}/WHEEL": wheel_meta}
    record = "\n".join(_record_line(n, d) for n, d in entries.items()) + f"\n{info}/RECORD,,\n"
    if tamper:
        entries[tamper] = entries[tamper] + b"# changed"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        archive.writestr(f"{info}/RECORD", record)
    return path


def run_installer(tmp_path: Path, wheels: list[Path], pins: list[Path] | None = None) -> subprocess.CompletedProcess:
    requirements = tmp_path / "requirements.txt"
    lines = [f"demo=={i}.0 --hash=sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}"
             for i, p in enumerate(wheels if pins is None else pins)]
    requirements.write_text("# pinned\n" + "\n".join(lines) + "\n")
    folder = tmp_path / "wheels"
    folder.mkdir(exist_ok=True)
    for wheel in wheels:
        (folder / wheel.name).write_bytes(wheel.read_bytes())
    return subprocess.run([sys.executable, str(INSTALLER), str(requirements), str(folder), str(tmp_path / "site")],
                          capture_output=True, text=True)


def test_the_installer_unpacks_a_pinned_pure_wheel_that_matches_its_record(tmp_path):
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl",
                       {"demo/__init__.py": b"VALUE = 42\n", "demo-1.0.data/purelib/extra.py": b"X = 1\n",
                        "demo-1.0.data/scripts/tool": b"#!/bin/sh\n"})
    done = run_installer(tmp_path, [wheel])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "demo" / "__init__.py").read_bytes() == b"VALUE = 42\n"
    assert (tmp_path / "site" / "extra.py").is_file() and not (tmp_path / "site" / "tool").exists()


@pytest.mark.parametrize("kind, expected", [
    ("unpinned", "is not pinned"),
    ("missing", "no wheel for"),
    ("tampered", "does not match the wheel's RECORD"),
    ("binary", "not a pure-Python"),
    ("unsafe", "unsafe member name"),
], ids=["a wheel nobody pinned", "a pinned wheel absent", "a file changed after RECORD",
        "a compiled wheel", "a path leaving the target"])
def test_the_installer_refuses_what_it_cannot_trust(tmp_path, kind, expected):
    good = make_wheel(tmp_path / "good-1.0-py3-none-any.whl", {"demo/__init__.py": b"A = 1\n"})
    if kind == "unpinned":
        done = run_installer(tmp_path, [good], pins=[])
    elif kind == "missing":
        other = make_wheel(tmp_path / "other.whl", {"other/__init__.py": b""})
        done = run_installer(tmp_path, [good], pins=[good, other])
    else:
        wheel = make_wheel(tmp_path / f"{kind}.whl",
                           {"demo/__init__.py": b"A = 1\n", **({"../evil.py": b"x"} if kind == "unsafe" else {})},
                           tag="cp311-cp311-linux_x86_64" if kind == "binary" else "py3-none-any",
                           purelib="false" if kind == "binary" else "true",
                           tamper="demo/__init__.py" if kind == "tampered" else None)
        done = run_installer(tmp_path, [wheel])
    assert done.returncode != 0 and expected in done.stderr, done.stderr
    assert not (tmp_path / "site" / "demo").exists()  # nothing installed from a refused set
    assert not (tmp_path / "evil.py").exists()


def test_the_pinned_requirements_are_the_versions_the_package_declares():
    spec = importlib.util.spec_from_file_location("installer", INSTALLER)
    installer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(installer)
    pins = installer.pinned(ROOT / "docker" / "service-requirements.txt")
    names = {p.split("==")[0] for p in pins.values()}
    assert names == {"gunicorn", "prometheus-client"}
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"gunicorn>=' in pyproject and '"prometheus-client>=' in pyproject


# --- the real container -------------------------------------------------------------------------

@pytest.mark.docker
@pytest.mark.slow
def test_the_container_serves_the_bundle_locked_down_and_stops_gracefully(docker_engine, prepared_sample, tmp_path,
                                                                         monkeypatch):
    from harness.containers.service import ServiceContainer
    from harness.loadtest.local_server import request
    zip_path = tmp_path / "spider-scoring.zip"
    pack.pack(prepared_sample / "bundle", zip_path)
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]
    body = {"input": row.prompt, "output": row.gold, "expected": row.gold}
    settings = ServiceSettings(workers=2, envelope_timeout_s=1.0)
    environment = {"SPIDER_SCORING_BUDGET_FLOOR_STEPS": str(10**13), "SPIDER_SCORING_WALL_GUARD_S": "600"}
    server = ServiceContainer(zip_path, settings, environment=environment, say=lambda m: None)
    try:
        server.start()
        health = request(server.host, server.port, "GET", "/health").json
        assert health["bundle"]["sha256"] == hashlib.sha256(zip_path.read_bytes()).hexdigest()
        assert health["bundle"]["sqlite_version_runtime"] and health["bundle"]["sqlite_version_built"]
        auth = {"Authorization": f"Bearer {server.token}"}
        assert request(server.host, server.port, "POST", "/grade", body).status == 401  # the token, in the container too
        assert request(server.host, server.port, "POST", "/grade", body, headers=auth).json["outcome"] == "match"
        # The outer limit works in the container too: the worker is killed and replaced.
        runaway = request(server.host, server.port, "POST", "/grade", {**body, "output": RUNAWAY_SQL}, headers=auth, timeout=60)
        assert runaway.status == 504 and "score" not in runaway.json
        assert request(server.host, server.port, "POST", "/grade", body, headers=auth).json["score"] == 1.0
        server.container.reload()
        attrs = server.container.attrs
        host = attrs["HostConfig"]
        assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
        assert attrs["Config"]["User"] == "65534:65534" and host["Memory"] == host["MemorySwap"] > 0
        assert all(b["HostIp"] == "127.0.0.1" for b in attrs["NetworkSettings"]["Ports"][f"{PORT}/tcp"])
        assert [m["RW"] for m in attrs["Mounts"]] == [False, False]  # the bundle and the token's folder
        assert server.token not in json.dumps(attrs)  # neither an argument nor an environment variable
        uid = server.container.exec_run(["id", "-u"]).output.decode().strip()
        write = server.container.exec_run(["sh", "-c", "echo x > /opt/spider/x || echo x > /x"])
        assert uid == "65534" and write.exit_code != 0
        network = server.client.networks.get(NETWORK).attrs["Options"]
        assert network["com.docker.network.bridge.enable_ip_masquerade"] == "false"
        lines = [line for line in server.logs().splitlines() if line.strip()]
        assert lines and all(json.loads(line)["level"] for line in lines)  # JSON logs only
    finally:
        code = server.stop()
    assert code == 0  # SIGTERM: gunicorn drained and exited cleanly
    import docker
    with pytest.raises(docker.errors.NotFound):
        server.client.containers.get(server.name)  # always removed


@pytest.mark.docker
@pytest.mark.slow
def test_make_serve_s_command_follows_the_container_and_removes_it_on_sigterm(docker_engine, prepared_sample, tmp_path):
    import os
    import re
    import signal

    import docker
    from harness.loadtest.local_server import request
    zip_path = tmp_path / "spider-scoring.zip"
    pack.pack(prepared_sample / "bundle", zip_path)
    command = [sys.executable, "-m", "harness", "serve", "--zip", str(zip_path), "--port", "0", "--workers", "2"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        found = None
        for line in process.stdout:  # "building ..." may come first when the image is not built yet
            found = re.search(r"ready at http://127\.0\.0\.1:(\d+)/grade \(container (\S+)\)", line)
            if found:
                break
        assert found, "serve never said it was ready"
        port, name = int(found.group(1)), found.group(2)
        assert request("127.0.0.1", port, "GET", "/readyz").json["ready"] is True
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        rest = process.stdout.read()
        assert "stopped" in rest
        with pytest.raises(docker.errors.NotFound):
            docker.from_env().containers.get(name)
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
