"""The emulated trainer's loader: a bundle zip unpacked read-only and imported as a package.

What the trainer documents (trainer-contract.md), done the same way here:

* the zip is unpacked into a folder (entries checked first: no unsafe path, no symlink, sizes
  within ``harness.common.bundle_zip.CAPS``), which is then made read-only;
* the folder is imported as a package, under a unique name, so that the modules' relative imports
  (``from . import verify``) work and two bundles never share module objects;
* ``TRAINER_BUNDLE_ROOT`` names the folder while the bundle runs;
* a scoring function is named ``MODULE[:FUNCTION]``, FUNCTION defaulting to ``compute_score``.

Standard library only (with harness.common.errors, harness.prepare.pack): this module also runs inside the
trainer container, where nothing else is installed.

>>> parse_function_spec("reward")
('reward', 'compute_score')
>>> parse_function_spec("grader:grade")
('grader', 'grade')
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.machinery
import importlib.util
import itertools
import json
import os
import shutil
import stat
import sys
import tempfile
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.common.bundle_zip import CAPS, DAMAGED, Caps, check_entries, damaged
from harness.common.errors import InputError, PackError

_counter = itertools.count()


def parse_function_spec(spec: str) -> tuple[str, str]:
    """``MODULE[:FUNCTION]`` -> (module, function); InputError on a malformed spec."""
    module, _, function = spec.partition(":")
    function = function or "compute_score"
    if not module.isidentifier() or not function.isidentifier():
        raise InputError(f"function spec {spec!r} is not MODULE[:FUNCTION] (e.g. reward or grader:grade)")
    return module, function


def extract_zip(zip_path: str | os.PathLike, dest: str | os.PathLike, caps: Caps = CAPS) -> list[str]:
    """Unpack a bundle zip into ``dest`` after checking every entry; returns the entry names.

    Sizes are enforced on the bytes actually written, not only on what the zip declares, so a
    forged header cannot fill the disk.
    """
    dest = Path(dest)
    try:
        archive = zipfile.ZipFile(zip_path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise PackError(f"cannot open {zip_path} as a zip ({exc}): rebuild it with `make pack`") from None
    with archive:
        infos = archive.infolist()
        problems = check_entries(infos, caps)
        if problems:
            raise PackError(f"{zip_path} would be refused by the trainer: " + "; ".join(problems))
        written = 0
        for info in infos:
            target = dest.joinpath(*info.filename.rstrip("/").split("/"))
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                written += _unpack_entry(archive, info, target, caps.entry_bytes, caps.unpacked_bytes - written)
            except DAMAGED as exc:
                raise damaged(zip_path, info.filename, exc) from None
            except _OverCaps:
                raise PackError(f"{zip_path}: entry {info.filename!r} unpacks to more than it "
                                "declares or over the size caps; the zip is corrupt or hostile") from None
    return [i.filename for i in infos]


class _OverCaps(Exception):
    """An entry unpacks to more than the caps allow (whatever its header declares)."""


def _unpack_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, most: int, room: int) -> int:
    """Write one entry to ``target``; its size. _OverCaps past ``most`` bytes or the ``room`` left."""
    size = 0
    with archive.open(info) as source, open(target, "wb") as sink:
        for block in iter(lambda: source.read(1 << 20), b""):
            size += len(block)
            if size > most or size > room:
                raise _OverCaps(info.filename)
            sink.write(block)
    return size


def _set_read_only(root: Path) -> None:
    """Files 0444, folders 0555: the bundle cannot write next to itself (the trainer's folder is read-only)."""
    for folder, _dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        os.chmod(folder, 0o555)


def remove_unpacked(root: str | Path) -> None:
    """Remove a folder that holds unpacked bundles, which the loader made read-only."""
    for folder, dirs, _files in os.walk(str(root)):
        os.chmod(folder, 0o755)
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
    shutil.rmtree(root, ignore_errors=True)


@dataclasses.dataclass
class LoadedBundle:
    """A bundle unpacked and imported. Use as a context manager, or call ``close()``."""

    zip_path: str
    sha256: str
    root: Path  # the read-only folder holding the modules and data/
    package: str  # the unique package name it is imported under
    entries: list[str]
    workdir: Path | None  # the temporary folder owned by this object (removed by close)

    def module(self, name: str) -> types.ModuleType:
        """A module of the bundle (``reward``, ``verify``...); InputError when it is not there."""
        try:
            return importlib.import_module(f"{self.package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{self.package}.{name}":
                raise InputError(f"the bundle {self.zip_path} has no module {name!r}") from None
            raise InputError(f"the bundle's module {name!r} imports {exc.name!r}, which is not there: "
                             "the trainer has the standard library only") from None
        except Exception as exc:  # a bundle that cannot even be imported: say which module and why
            raise InputError(f"the bundle's module {name!r} fails to import: {type(exc).__name__}: {exc}") from None

    def function(self, spec: str) -> Callable[..., Any]:
        """The callable a trainer spec ``MODULE[:FUNCTION]`` names."""
        module_name, function_name = parse_function_spec(spec)
        found = getattr(self.module(module_name), function_name, None)
        if not callable(found):
            raise InputError(f"the bundle's module {module_name!r} has no function {function_name!r}")
        return found

    def index(self) -> dict:
        """The bundle's data/index.json (InputError when absent or unreadable)."""
        path = self.root / "data" / "index.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"the bundle {self.zip_path} has no readable data/index.json ({exc}): "
                             "stage it with `make bundle` and pack it again") from None

    def database_files(self) -> dict[str, Path]:
        """db_id -> unpacked file, as the index lists them."""
        return {db_id: self.root / "data" / entry["file"]
                for db_id, entry in sorted(self.index().get("databases", {}).items())}

    def close(self) -> None:
        """Forget the package's modules and remove the unpacked copy (when this object made it)."""
        for name in [n for n in sys.modules if n == self.package or n.startswith(self.package + ".")]:
            del sys.modules[name]
        if os.environ.get("TRAINER_BUNDLE_ROOT") == str(self.root):
            del os.environ["TRAINER_BUNDLE_ROOT"]
        if self.workdir is not None and self.workdir.exists():
            remove_unpacked(self.workdir)

    def __enter__(self) -> LoadedBundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def import_package(root: Path, package: str) -> types.ModuleType:
    """Import the folder ``root`` as package ``package`` (with or without an ``__init__.py``)."""
    init = root / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(package, init, submodule_search_locations=[str(root)])
    else:
        spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
        spec.submodule_search_locations = [str(root)]
    if spec is None:
        raise InputError(f"cannot import {root} as a package")
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    try:
        if spec.loader is not None:
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[package]
        raise
    return module


def load_bundle(zip_path: str | os.PathLike, workdir: str | os.PathLike | None = None,
                caps: Caps = CAPS) -> LoadedBundle:
    """Unpack, protect and import a bundle zip the way the trainer does.

    ``workdir``: where to unpack (a new temporary folder inside it); default the system's temp
    folder. Sets TRAINER_BUNDLE_ROOT for this process (the trainer sets it while the bundle runs).
    """
    zip_path = Path(zip_path)
    try:
        digest = hashlib.sha256(zip_path.read_bytes()).hexdigest()
    except OSError as exc:
        raise InputError(f"cannot read the bundle zip {zip_path} ({exc}): build it with `make pack`") from None
    owned = Path(tempfile.mkdtemp(prefix="trainer-bundle-", dir=workdir))
    root = owned / "bundle"
    root.mkdir()
    try:
        entries = extract_zip(zip_path, root, caps)
        _set_read_only(root)
        package = f"trainer_bundle_{digest[:12]}_{next(_counter)}"
        loaded = LoadedBundle(str(zip_path), digest, root, package, entries, owned)
        os.environ["TRAINER_BUNDLE_ROOT"] = str(root)
        sys.dont_write_bytecode = True  # a read-only folder; the trainer would not write .pyc either
        import_package(root, package)
    except BaseException:
        remove_unpacked(owned)
        raise
    return loaded


def attach_unpacked(zip_path: str, sha256: str, root: str | os.PathLike, package: str,
                    entries: list[str]) -> LoadedBundle:
    """A bundle another process of this run unpacked at ``root`` (read-only), imported in this one under
    the same package name: a grading worker's copy. Closing it forgets the modules and leaves the folder."""
    loaded = LoadedBundle(zip_path, sha256, Path(root), package, list(entries), None)
    os.environ["TRAINER_BUNDLE_ROOT"] = str(loaded.root)
    sys.dont_write_bytecode = True
    import_package(loaded.root, package)
    return loaded


def directory_listing(places: list[Path]) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``places``: path -> (size, mode). For "no file created" checks."""
    listing: dict[str, tuple[int, int]] = {}
    for place in places:
        for folder, dirs, files in os.walk(place):
            for name in dirs + files:
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                except OSError:  # vanished between listing and stat: it still counts as a change
                    continue
                listing[path] = (0 if stat.S_ISDIR(st.st_mode) else st.st_size, st.st_mode)
    return listing
