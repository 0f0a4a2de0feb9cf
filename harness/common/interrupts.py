"""SIGTERM and SIGHUP as Ctrl-C: a command's ``finally`` blocks run whichever way it is stopped.

Python's default for SIGTERM ends the process at once, leaving containers, temporary folders and
Ray actors behind; ``make`` and ``timeout`` send it. Inside ``interrupt_on_signals`` both signals
raise KeyboardInterrupt in the main thread (the CLI's exit code 130), as Ctrl-C does.

``interrupts_held`` is the other half: inside it an interrupt waits, and is raised as it leaves, so
that a step that must not be cut in two (a child process started and recorded) is never cut.

>>> with interrupt_on_signals():
...     pass
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

SIGNAL_PREFIX = "signal "  # a KeyboardInterrupt raised for a signal says which: "signal 15"


def _interrupt_in(owner: int) -> Callable[[int, object], None]:
    """The handler: KeyboardInterrupt in the process that set it; a forked child that inherited it
    (a pool's worker, which the pool ends with SIGTERM) dies of the signal as it would have."""
    def handler(signum: int, frame: object) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"{SIGNAL_PREFIX}{signum}")
    return handler


def signal_of(interrupt: KeyboardInterrupt) -> str | None:
    """The name of the signal an interrupt was raised for (``SIGTERM``), None for Ctrl-C.

    >>> signal_of(KeyboardInterrupt("signal 15")), signal_of(KeyboardInterrupt())
    ('SIGTERM', None)
    """
    text = str(interrupt.args[0]) if interrupt.args else ""
    if not text.startswith(SIGNAL_PREFIX) or not text[len(SIGNAL_PREFIX):].isdigit():
        return None
    return signal.Signals(int(text[len(SIGNAL_PREFIX):])).name


@contextlib.contextmanager
def _handled(signals: tuple[int, ...], handler: Callable[[int, object], None]) -> Iterator[bool]:
    """Inside: ``handler`` for ``signals`` in the main thread (yields True), the previous handlers
    back after; elsewhere nothing changes (yields False: only the main thread may set them)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield True
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Inside: SIGTERM and SIGHUP become KeyboardInterrupt, so ``finally`` runs for them as for
    Ctrl-C (in the main thread; elsewhere nothing changes). The previous handlers come back after."""
    with _handled((signal.SIGTERM, signal.SIGHUP), _interrupt_in(os.getpid())):
        yield


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Inside: Ctrl-C, SIGTERM and SIGHUP are noted, not acted on; leaving, the previous handlers come
    back and the first signal noted is raised again for them (in the main thread; elsewhere nothing
    changes).

    For a step an interrupt must not cut in two: a child process started but not yet recorded by its
    caller cannot be stopped by the caller's cleanup.
    """
    noted: list[int] = []
    with _handled(HELD_SIGNALS, lambda signum, frame: noted.append(signum)):
        yield
    if noted:
        signal.raise_signal(noted[0])
