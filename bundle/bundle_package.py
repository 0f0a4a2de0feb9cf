"""Load the bundle's folder as a private package, and make its entry points survive pickling.

verl loads a reward by file path (``custom_reward_function.path=<bundle>/reward.py``): the module
then has no package, and ``from . import scoring_entry`` fails. ``reward.py`` and ``grader.py``
then load this file by path and ask it for their sibling: the folder becomes a package under a
private name (``_spider_scoring_`` and a hash of the folder's path), imported once per process, so
that no generic top-level name (``verify``, ``reward``...) is put in ``sys.modules`` and two
bundles in one process stay apart.

The entry points (``reward.compute_score``, ``reward.trl_reward``, ``grader.compute_score``,
``grader.grade``) are ``EntryPoint`` objects. A process that receives one by ``pickle`` or
``cloudpickle`` (verl's ``remote`` reward manager, TRL's ``AsyncGRPOTrainer``, a process pool)
cannot import the private package nor a module loaded by path, so an entry point pickles as a
recipe made of standard-library calls only: run this file by path (``runpy.run_path``), call its
``load_entry`` with the bundle's folder. The receiving process needs the unpacked bundle at the
same path, and nothing on ``sys.path``.

>>> package_name("/opt/bundle") == package_name("/opt/bundle/"), package_name("/opt/bundle").startswith("_spider_scoring_")
(True, True)
>>> import pickle
>>> def double(x):
...     "Twice x."
...     return 2 * x
>>> entry = EntryPoint(double, "/opt/bundle/reward.py")
>>> entry(21), entry.__name__, entry.__doc__
(42, 'double', 'Twice x.')
>>> pickle.loads(pickle.dumps(entry))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
FileNotFoundError: ...bundle_package.py...
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import operator
import os
import runpy
import sys


def package_name(folder: str) -> str:
    """The private package name of a bundle folder."""
    real = os.path.realpath(folder.rstrip(os.sep) or os.sep)
    return "_spider_scoring_" + hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def sibling(entry_file: str, module: str):
    """The module ``module`` of the bundle that holds ``entry_file``, imported as part of its package."""
    folder = os.path.dirname(os.path.realpath(entry_file))
    name = package_name(folder)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load the bundle folder {folder} as a package")
        package = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(package)  # __init__.py imports nothing: safe before it is registered
        sys.modules.setdefault(name, package)  # two threads racing here keep one package
    return importlib.import_module(f"{name}.{module}")


def load_entry(folder: str, module: str, name: str, loaded_as: str = ""):
    """The entry point ``name`` of the bundle module ``module`` in ``folder``: what unpickling gives.

    In a process that already holds the module it was pickled from (``loaded_as``, from this same
    folder), that module's own entry point, so a fork child or a round trip shares its caches.
    """
    held = sys.modules.get(loaded_as) if loaded_as else None
    held_file = getattr(held, "__file__", None)
    if held_file and os.path.dirname(os.path.realpath(held_file)) == os.path.realpath(folder):
        return getattr(held, name)
    return getattr(sibling(os.path.join(folder, f"{module}.py"), module), name)


class _Call:
    """Pickles as ``function(*args)``: unpickling makes that call (standard-library functions only).

    Calling it calls what that call returns (pickle wants the first item of a reduce callable).
    """

    def __init__(self, function, *args) -> None:
        self.function, self.args = function, args

    def __call__(self, *args):
        return self.function(*self.args)(*args)

    def __reduce__(self):
        return self.function, self.args


class EntryPoint:
    """A bundle function that pickles as "load it from the unpacked bundle at this folder".

    Calls go straight to the function; ``__name__``, ``__doc__`` and the signature are the
    function's (TRL names a reward after ``__name__``).
    """

    __name__: str

    def __init__(self, function, entry_file: str) -> None:
        functools.update_wrapper(self, function)
        self._function = function
        self._folder = os.path.dirname(os.path.realpath(entry_file))
        self._module = os.path.splitext(os.path.basename(entry_file))[0]

    def __call__(self, *args, **kwargs):
        return self._function(*args, **kwargs)

    def __reduce__(self):
        bootstrap = _Call(runpy.run_path, os.path.join(self._folder, "bundle_package.py"))
        loader = _Call(operator.getitem, bootstrap, "load_entry")
        return loader, (self._folder, self._module, self.__name__, self.__module__)

    def __repr__(self) -> str:
        return f"<bundle entry point {self._module}.{self.__name__} of {self._folder}>"


class AsyncEntryPoint(EntryPoint):
    """An ``EntryPoint`` of an ``async def`` function: calling it gives the coroutine to await.

    Its ``__call__`` is itself a coroutine function, which is how TRL tells an async reward
    (``trl.trainer.utils.is_async_callable``); on Python 3.12+ the instance is also marked, so that
    ``inspect.iscoroutinefunction`` says the same. It pickles as ``EntryPoint`` does.
    """

    def __init__(self, function, entry_file: str) -> None:
        super().__init__(function, entry_file)
        mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
        if mark is not None:
            mark(self)

    async def __call__(self, *args, **kwargs):
        return await self._function(*args, **kwargs)


def entry_point(entry_file: str):
    """Decorator: the function as an ``EntryPoint`` of the bundle file ``entry_file`` (an
    ``AsyncEntryPoint`` for an ``async def`` function)."""
    return lambda function: (AsyncEntryPoint if inspect.iscoroutinefunction(function) else EntryPoint)(function, entry_file)
