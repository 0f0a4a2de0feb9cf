"""Tables of settings as command-line flags: one flag per field of a frozen dataclass of numbers.

A table is a tuple of ``(name, unit, meaning)``; the dataclass holds the defaults and validates.
The grader service's settings (``harness.service.settings``) and the proxy's
(``harness.proxy.nginx_conf``) both use it, so their flags are built, named and documented alike.

>>> flag_name("envelope_timeout_s"), flag_name("max_body_bytes")
('--envelope-timeout', '--max-body-bytes')
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from harness.common.errors import InputError

Table = tuple[tuple[str, str, str], ...]


def flag_name(name: str) -> str:
    """A setting's flag: seconds are implied by the help, so ``_s`` is dropped."""
    return "--" + (name[:-2] if name.endswith("_s") else name).replace("_", "-")


def check_positive(settings: Any, what: str) -> None:
    """InputError naming the first field of ``settings`` that is not a positive number."""
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise InputError(f"{what} setting {field.name} must be a positive number, got {value!r}")


def add_flags(parser: argparse._ActionsContainer, cls: type, table: Table) -> None:
    """One flag per setting of ``table``, defaulting to ``cls``'s default."""
    defaults = cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, unit, meaning in table:
        kind = float if fields[name].type in ("float", float) else int
        # A default computed from the machine (workers) is described in the meaning, not printed:
        # help text (and the reference generated from it) must not depend on where it was produced.
        computed = fields[name].default is dataclasses.MISSING
        text = meaning if computed else f"{meaning} (default: {getattr(defaults, name)})"
        parser.add_argument(flag_name(name), dest=name, type=kind, default=getattr(defaults, name),
                            metavar=unit.upper().replace(" ", "_"), help=text.replace("%", "%%"))


def from_flags(args: argparse.Namespace, cls: type, table: Table) -> Any:
    """The settings the flags of ``add_flags`` give (InputError on a bad value)."""
    return cls(**{name: getattr(args, name) for name, _u, _m in table})
