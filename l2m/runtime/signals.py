"""Signal handlers that take no lock: what a handler asks for runs on a thread of its own.

Input: a callable and its arguments, handed over by a signal handler. Output: the call, made
moments later on the relay's daemon thread, in the order handed over.

Why: a Python signal handler runs in the main thread between two bytecodes — also while that
thread holds a lock the handler needs. ``threading.Event.set()`` takes the Event's condition
lock, which the main thread holds on its way into and out of ``Event.wait()``: a SIGTERM
landing there waits forever for its own thread, and a second signal, handled nested inside that
wait, finds the Event still clear. A CI run of the Kubernetes SIGTERM test printed
"SIGTERM received" twice and was killed 30 s later. ``queue.SimpleQueue.put`` is reentrant —
documented safe to call from a signal handler — so a handler here only puts."""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

Handler = Callable[[int, Any], None]


class SignalRelay:
    """A daemon thread making the calls signal handlers hand it (:meth:`call`)."""

    def __init__(self, name: str = "l2m-signals") -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the relay's thread; safe in a signal handler (no lock taken)."""
        self._calls.put((fn, args))

    def _run(self) -> None:
        while True:
            fn, args = self._calls.get()
            try:
                fn(*args)
            except Exception as exc:  # one call's failure must not end the relay
                print(f"l2m: handling a signal failed: {exc}", file=sys.stderr, flush=True)


def setting(event: threading.Event) -> Handler:
    """A signal handler that sets ``event`` (through a relay of its own)."""
    relay = SignalRelay()

    def handler(_signum: int, _frame: Any) -> None:
        relay.call(event.set)

    return handler
