"""A fresh-interpreter probe of an unpacked bundle, run as ``python3 -I -S emulate_probe.py MODE ROOT``.

``-I -S``: no site-packages, no PYTHON* variables, not even this file's folder on the path, so the
bundle sees the standard library and nothing else. Prints one JSON object on stdout.

* ``imports ROOT``: import the bundle as a package and every module in it (its subpackages'
  too); report every top-level
  module then loaded that is not in the standard library.
* ``score ROOT GOLD``: call ``reward.compute_score(solution_str=GOLD, ground_truth=GOLD)`` with
  TRAINER_BUNDLE_ROOT as the caller set it; report the value returned or the exception raised (its type and the stable ``code`` the bundle's
  errors carry).

Standard library only, and imports nothing from the harness (it must not be on the path).
"""

import importlib
import importlib.machinery
import importlib.util
import json
import os
import pkgutil
import sys

PACKAGE = "probed_bundle"


def import_bundle(root):
    init = os.path.join(root, "__init__.py")
    if os.path.isfile(init):
        spec = importlib.util.spec_from_file_location(PACKAGE, init, submodule_search_locations=[root])
    else:
        spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
        spec.submodule_search_locations = [root]
    if spec is None:
        raise ImportError(f"cannot import {root} as a package")
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    if spec.loader is not None:
        spec.loader.exec_module(module)
    return module


def probe_imports(root):
    package = import_bundle(root)
    names = sorted(info.name[len(PACKAGE) + 1:] for info in pkgutil.walk_packages(package.__path__, PACKAGE + "."))
    for name in names:
        importlib.import_module(PACKAGE + "." + name)
    allowed = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {PACKAGE, "__main__"}
    top = sorted({n.split(".")[0] for n in sys.modules})
    return {"modules": names, "outside_stdlib": [n for n in top if n not in allowed],
            "python": sys.version.split()[0]}


def probe_score(root, gold):
    import_bundle(root)
    reward = importlib.import_module(PACKAGE + ".reward")
    try:
        value = reward.compute_score(solution_str=gold, ground_truth=gold)
    except Exception as exc:  # the point of the probe: which error comes back
        return {"raised": type(exc).__name__, "code": getattr(exc, "code", None),
                "mro": [k.__name__ for k in type(exc).__mro__],
                "message": str(exc)}
    return {"returned": value}


def main(argv):
    mode, root = argv[1], argv[2]
    try:
        result = probe_imports(root) if mode == "imports" else probe_score(root, argv[3])
    except Exception as exc:  # reported, not hidden: the caller turns it into a failed check
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
