"""l2m's per-account samples after each micro-batch (:mod:`l2m.state.accounts`), written off
the batch's path.

Input: after each batch, a copy of what the query's accumulators hold then (the state keys'
series, the tasks' sums) and each rule's account. Output: the per-account view's samples on the
metrics topic, from one thread of this module's own, in batch order.

Why a thread: summing the tallies per account reads one key per rule and state key — about
400,000 with 100,000 rules, 0.2–0.3 s — and the samples wait for Kafka's acknowledgement.
Done in the batch's ``foreachBatch`` call, every batch waited for both; the next batch now
starts while they are written. Work never piles up: a batch that ends while the previous
batch's samples are still being written replaces whatever was waiting (the newest totals
carry everything the older ones did: series are a value at the moment, the rest are
counters). :meth:`AccountMetrics.close` writes what is left, so ``l2m run --once`` ends with
its last batch's numbers written.

Each snapshot's samples carry its time (strictly increasing) as their records' time, and a
counter's first sample in this process is marked ``new``: remote write writes a 0 just before
it, so ``increase()`` counts its first value (a process counts from 0 again: a reset)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from l2m.engine.samples import MARK_KEY, NEW
from l2m.state.accounts import AccountBook, account_samples, account_totals

# How long the samples of one batch wait for their acknowledgement before they are given up.
ACCOUNT_FLUSH_S = 5.0


@dataclass
class _Snapshot:
    batch_id: int
    accounts: Mapping[str, str | None]
    latest: dict[Any, float]
    sums: dict[Any, float]
    taken_ms: int


# Writes samples to the metrics topic (l2m.kafka.sink.produce_samples, bound to the job's topic
# and settings); raises when they were not delivered.
Produce = Callable[[list[dict[str, Any]]], None]


@dataclass
class AccountMetrics:
    """The per-account samples of a query's batches, computed and written by one thread.
    :meth:`batch_done` from the batch (cheap: two dictionary copies); :meth:`close` at the
    query's end."""

    book: AccountBook
    produce: Produce
    _pending: _Snapshot | None = None
    _busy: bool = False
    _closed: bool = False
    _thread: threading.Thread | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)
    # The counter series (name, account) whose first sample was delivered: the first one of
    # each is marked new (l2m.engine.samples.NEW), so remote write writes a 0 before it and
    # increase() counts its first value. Per process: a new process counts from 0 again.
    _started: set[tuple[str, str]] = field(default_factory=set)
    _last_ms: int = 0  # the newest snapshot's time: each later one strictly after it

    def batch_done(self, batch_id: int, accounts: Mapping[str, str | None],
                   latest: Mapping[Any, float], sums: dict[Any, float]) -> None:
        """Hand over a batch's tallies (``latest`` is copied here; ``sums`` must already be a
        copy, :func:`l2m.state.tally.task_sums`)."""
        with self._cond:
            if self._closed:
                return
            # Strictly increasing, whatever the clock does: the samples' time is their
            # records' (remote write stamps counters with it), one value per time per series.
            self._last_ms = max(int(time.time() * 1000), self._last_ms + 1)
            snap = _Snapshot(batch_id, accounts, dict(latest), sums, self._last_ms)
            self._pending = snap  # an older one waiting is superseded (see the module doc)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="l2m-account-metrics",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def close(self, timeout_s: float = 2 * ACCOUNT_FLUSH_S) -> None:
        """Write what is waiting, then stop the thread (at most ``timeout_s``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            deadline = time.monotonic() + timeout_s
            while (self._pending is not None or self._busy) and self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    break
                self._cond.wait(left)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                snap, self._pending = self._pending, None
                if snap is None:
                    return  # closed, nothing left
                self._busy = True
            try:
                self._write(snap)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, snap: _Snapshot) -> None:
        # Best effort: l2m's own metrics never fail a batch, nor stop the next ones.
        try:
            view = self.book.view(account_totals(snap.accounts, snap.latest, snap.sums))
            samples = account_samples(view, snap.taken_ms)
            first = []
            for sample in samples:
                series = (sample["name"], sample["labels"]["account"])
                if sample["kind"] == "counter" and series not in self._started:
                    sample[MARK_KEY] = NEW
                    first.append(series)
            self.produce(samples)
            self._started.update(first)  # delivered: later samples continue the series
        except Exception as exc:
            print(f"l2m: the per-account metrics of batch {snap.batch_id} were not written: "
                  f"{exc}", file=sys.stderr, flush=True)
