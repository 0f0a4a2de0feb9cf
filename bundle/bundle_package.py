"""Load the bundle's folder as a private package, for an entry file loaded with no parent package.

verl loads a reward by file path (``custom_reward_function.path=<bundle>/reward.py``): the module
then has no package, and ``from . import scoring_entry`` fails. ``reward.py`` and ``grader.py``
then load this file by path and ask it for their sibling: the folder becomes a package under a
private name (``_spider_scoring_`` and a hash of the folder's path), imported once per process, so
that no generic top-level name (``verify``, ``reward``...) is put in ``sys.modules`` and two
bundles in one process stay apart.

>>> import os
>>> package_name("/opt/bundle") == package_name("/opt/bundle/"), package_name("/opt/bundle").startswith("_spider_scoring_")
(True, True)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import threading

_lock = threading.Lock()


def package_name(folder: str) -> str:
    """The private package name of a bundle folder."""
    real = os.path.realpath(folder.rstrip(os.sep) or os.sep)
    return "_spider_scoring_" + hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def sibling(entry_file: str, module: str):
    """The module ``module`` of the bundle that holds ``entry_file``, imported as part of its package."""
    folder = os.path.dirname(os.path.realpath(entry_file))
    name = package_name(folder)
    with _lock:
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, os.path.join(folder, "__init__.py"),
                                                          submodule_search_locations=[folder])
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load the bundle folder {folder} as a package")
            package = importlib.util.module_from_spec(spec)
            sys.modules[name] = package
            try:
                spec.loader.exec_module(package)
            except BaseException:
                del sys.modules[name]
                raise
    return importlib.import_module(f"{name}.{module}")
