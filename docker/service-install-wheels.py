"""Install pure-Python wheels into a folder without pip and without network (standard library only).

    python3 service-install-wheels.py REQUIREMENTS WHEEL_DIR TARGET

Used while building docker/service.Dockerfile on a base image that has Python but no pip. A wheel
is a zip file; for a pure-Python one (``Root-Is-Purelib: true``, tag ``py3-none-any``) installing
means unpacking it onto ``sys.path``. Before anything is written, each wheel must:

* have a SHA-256 pinned in REQUIREMENTS (``name==version --hash=sha256:...``), and every pinned
  requirement must have its wheel;
* be pure Python, with safe member names (no absolute path, no ``..``);
* match its own RECORD: every file's hash and size.

Files under ``<name>.data/purelib`` or ``platlib`` go to the root; scripts, headers and data are
not needed by the service and are skipped.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import sys
import zipfile
from pathlib import Path, PurePosixPath

_PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s]+)\s+--hash=sha256:([0-9a-f]{64})\s*$")


def pinned(requirements: Path) -> dict[str, str]:
    """sha256 -> "name==version" for every pinned line of the requirements file."""
    pins = {}
    for number, line in enumerate(requirements.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        found = _PIN.match(line)
        if not found:
            raise SystemExit(f"{requirements}:{number}: expected 'name==version --hash=sha256:HEX', got {line!r}")
        pins[found.group(3)] = f"{found.group(1)}=={found.group(2)}"
    return pins


def _record_digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _target_name(name: str) -> str | None:
    """Where a member goes under the target (None: skipped); SystemExit on an unsafe name."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise SystemExit(f"unsafe member name {name!r}")
    first = path.parts[0]
    if first.endswith(".data"):
        if len(path.parts) > 2 and path.parts[1] in ("purelib", "platlib"):
            return str(PurePosixPath(*path.parts[2:]))
        return None
    return name


def check_wheel(archive: zipfile.ZipFile, wheel: Path) -> None:
    """SystemExit unless the wheel is pure Python and every file matches its RECORD."""
    names = archive.namelist()
    info = [n for n in names if n.endswith(".dist-info/WHEEL") and n.count("/") == 1]
    record = [n for n in names if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
    if len(info) != 1 or len(record) != 1:
        raise SystemExit(f"{wheel.name}: not a wheel (no single .dist-info/WHEEL and RECORD)")
    metadata = archive.read(info[0]).decode("utf-8")
    if "Root-Is-Purelib: true" not in metadata or not re.search(r"^Tag: py3-none-any$", metadata, re.M):
        raise SystemExit(f"{wheel.name}: not a pure-Python py3-none-any wheel; this installer cannot place it")
    rows = list(csv.reader(io.StringIO(archive.read(record[0]).decode("utf-8"))))
    listed = {row[0]: row for row in rows if row}
    for name in names:
        if name.endswith("/") or name == record[0]:
            continue
        row = listed.get(name)
        data = archive.read(name)
        if row is None or row[1] != _record_digest(data) or (row[2] and int(row[2]) != len(data)):
            raise SystemExit(f"{wheel.name}: {name} does not match the wheel's RECORD")


def plan(wheel: Path) -> list[tuple[str, str]]:
    """(member, destination) for every file to write from a checked wheel; SystemExit when unsafe."""
    with zipfile.ZipFile(wheel) as archive:
        check_wheel(archive, wheel)
        places = [(name, _target_name(name)) for name in archive.namelist() if not name.endswith("/")]
    return [(name, destination) for name, destination in places if destination is not None]


def install(wheel: Path, places: list[tuple[str, str]], target: Path) -> int:
    """Write the planned files of one wheel under ``target``; the number written."""
    with zipfile.ZipFile(wheel) as archive:
        for name, destination in places:
            path = target / destination
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(name))
    return len(places)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        raise SystemExit(__doc__)
    requirements, wheel_dir, target = Path(argv[0]), Path(argv[1]), Path(argv[2])
    pins = pinned(requirements)
    wheels = sorted(wheel_dir.glob("*.whl"))
    found = {}
    for wheel in wheels:
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest not in pins:
            raise SystemExit(f"{wheel.name} (sha256 {digest}) is not pinned in {requirements}: refusing it")
        found[digest] = wheel
    missing = [pins[d] for d in pins if d not in found]
    if missing:
        raise SystemExit(f"no wheel for {', '.join(missing)} in {wheel_dir}")
    # Every wheel is checked before the first file is written: a refused set installs nothing.
    plans = [(digest, wheel, plan(wheel)) for digest, wheel in sorted(found.items(), key=lambda i: i[1].name)]
    target.mkdir(parents=True, exist_ok=True)
    for digest, wheel, places in plans:
        print(f"installed {pins[digest]}: {install(wheel, places, target)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
