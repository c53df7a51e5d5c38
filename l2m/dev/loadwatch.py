"""``l2m load``'s watchers: what a user of the job would feel while the load runs.

Input: the metrics topic (Kafka settings as ``l2m run`` uses them, the topic, the load's start
in epoch ms) or a Prometheus HTTP API's base URL, and afterwards the load's timeline
(``[(t_wall_s, sent_total)]``, epoch seconds, from :func:`l2m.dev.loadgen.run_load`). Output:
:class:`WatchResult` (latency of counter samples: p50/p90/p99/max and per second; the job's
processed count over time → lag) and :class:`PrometheusResult` (processed count over time as
``sum(l2m_input_logs_total)`` answers → the delay until a log is queryable).

* Latency of a sample = its arrival at this watcher (wall clock) − its ``timestamp``: a
  counter's sample (float or native histogram, format 2) carries the newest event time it
  counted, and the load stamps every log with its production time, so this is how long a
  log took to show up as a metric. Only counter samples of the users' rules with a timestamp
  ≥ the load's start count (gauges carry their window's start; l2m's own ``l2m-*`` rules are
  not a user's metric).
* Processed logs: l2m's own input counter ``l2m_input_logs_total`` (rule ``l2m-input``, one
  cumulative series per ``status``) — the sum over statuses of each series' increase since
  the load began. The watcher starts reading :data:`LOOKBACK_S` before the start, so that the
  value each series had before the load (a sample of a micro-batch timed before the start) is
  its baseline; a series born during the load (mark ``new``) starts from 0; otherwise its
  first value seen is the baseline and the count is short by that first micro-batch's logs
  (``baseline_exact`` False). A value below the last one is a restarted counter (state reset,
  expired series): counted from 0 again, as PromQL's ``increase()`` does; a sample of a
  micro-batch no newer than the series' last (``l2m-time``: a batch replayed after a restart)
  is skipped. On a job fed by other producers too, their logs count as processed.

Memory stays bounded on long runs: latencies are kept as counts per whole millisecond (the
samples' own resolution), so the percentiles are exact over every sample measured, in memory
that grows with the spread of the latencies, not with the number of samples; the series over
time keep one aggregate (or one point) per second. Percentiles are nearest-rank: the
``ceil(q·n)``-th smallest latency (:func:`l2m.semantics.exphist.nearest_rank`)."""

from __future__ import annotations

import bisect
import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from l2m.dev.loadgen import masked
from l2m.engine.samples import NEW, SampleRecord, read_headers, read_sample
from l2m.errors import ConfigError, KafkaUnavailableError
from l2m.rules.model import RESERVED_ID_PREFIX
from l2m.semantics.exphist import nearest_rank

# l2m's own input counter (l2m.state.counters.INPUT_RULE; not imported: the state package
# imports pyspark, which the dev tools never do — a unit test keeps the two equal).
INPUT_METRIC = "l2m_input_logs_total"
INPUT_RULE_ID = "l2m-input"
# How far before the load's start the watcher begins reading the metrics topic: the input
# counter's last samples before the load are its baseline (a busy job writes them every
# trigger; an idle one may have none this recent).
LOOKBACK_S = 120.0
# The most records one poll hands over, and how long it waits for them.
POLL_RECORDS = 10_000
POLL_S = 0.2
# Prometheus: the query, and how often it is asked.
PROMETHEUS_QUERY = f"sum({INPUT_METRIC})"
PROMETHEUS_INTERVAL_S = 1.0
PROMETHEUS_TIMEOUT_S = 5.0
QUANTILES = (0.5, 0.9, 0.99)
# The largest count of logs believed (2^53: every integer below it is a double): a larger
# one is another writer's record, and sums of such would leave the doubles.
MAX_COUNT = float(2**53)

Timeline = Sequence[tuple[float, int]]


class ConsumerLike(Protocol):
    """What the watcher uses of a ``confluent_kafka.Consumer`` (a fake in unit tests)."""

    def list_topics(self, topic: str, timeout: float) -> Any: ...
    def offsets_for_times(self, partitions: list[Any], timeout: float) -> list[Any]: ...
    def assign(self, partitions: list[Any]) -> None: ...
    def consume(self, num_messages: int, timeout: float) -> list[Any]: ...
    def close(self) -> None: ...


# --- latencies, bounded --------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyStats:
    """Latencies in ms over ``count`` samples: nearest-rank percentiles, min and max."""

    count: int
    p50: int
    p90: int
    p99: int
    max: int
    min: int


@dataclass(frozen=True)
class SecondLatency:
    """One second of arrivals (``t``: seconds since the load's start, the second's start):
    how many samples, their mean and max latency in ms."""

    t: int
    count: int
    mean_ms: float
    max_ms: int


class Latencies:
    """Latencies counted per whole millisecond, and per second of arrival (count, sum, max):
    exact percentiles over every latency added, memory bounded by the latencies' spread and
    the run's seconds. Not thread-safe on its own (the watchers hold their lock)."""

    def __init__(self) -> None:
        self._by_ms: dict[int, int] = {}
        self._seconds: dict[int, list[int]] = {}  # second → [count, sum, max]

    def add(self, latency_ms: int, second: int) -> None:
        self._by_ms[latency_ms] = self._by_ms.get(latency_ms, 0) + 1
        agg = self._seconds.get(second)
        if agg is None:
            self._seconds[second] = [1, latency_ms, latency_ms]
        else:
            agg[0] += 1
            agg[1] += latency_ms
            agg[2] = max(agg[2], latency_ms)

    def stats(self) -> LatencyStats | None:
        """Nearest-rank p50/p90/p99, min and max; None without any latency."""
        total = sum(self._by_ms.values())
        if not total:
            return None
        values = sorted(self._by_ms)
        ranks = [nearest_rank(q, total) for q in QUANTILES]
        found: list[int] = []
        seen = 0
        for value in values:
            seen += self._by_ms[value]
            while len(found) < len(ranks) and seen >= ranks[len(found)]:
                found.append(value)
        return LatencyStats(total, found[0], found[1], found[2], values[-1], values[0])

    def series(self) -> list[SecondLatency]:
        return [SecondLatency(s, c, total / c, top)
                for s, (c, total, top) in sorted(self._seconds.items())]


# --- the timeline ---------------------------------------------------------------------------


# Searched in place (no list of times or counts built per call): the report asks for every
# second of a run, and a day's timeline holds hundreds of thousands of points.
def _time(point: tuple[float, int]) -> float:
    return point[0]


def _count(point: tuple[float, int]) -> int:
    return point[1]


def sent_at(timeline: Timeline, t: float) -> float:
    """How many logs the load had sent at wall time ``t`` (epoch s): the timeline's points
    joined by straight lines (the load keeps a steady pace between them), 0 before the first
    point, the last count after the last."""
    if not timeline or t < timeline[0][0]:
        return 0.0
    i = bisect.bisect_right(timeline, t, key=_time) - 1
    if i >= len(timeline) - 1:
        return float(timeline[-1][1])
    (t0, s0), (t1, s1) = timeline[i], timeline[i + 1]
    return s0 + (s1 - s0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)


def produced_at(timeline: Timeline, n: float) -> float | None:
    """When the load produced its ``n``-th log (epoch s, between timeline points by a
    straight line); None if it never sent that many (or ``n`` ≤ 0, or no timeline)."""
    if not timeline or n <= 0 or n > timeline[-1][1]:
        return None
    i = bisect.bisect_left(timeline, n, key=_count)
    if i == 0:
        return float(timeline[0][0])
    (t0, s0), (t1, s1) = timeline[i - 1], timeline[i]
    return t0 + (t1 - t0) * (n - s0) / (s1 - s0)


@dataclass(frozen=True)
class LagPoint:
    """The job at one moment (``t``: s since the load's start): logs sent and processed so
    far, ``lag`` = sent − processed, and ``behind_s``: how long the oldest log sent and not
    yet processed had waited (0 when none waited)."""

    t: float
    sent: int
    processed: int
    lag: int
    behind_s: float


def lag_points(processed: Iterable[tuple[float, int]], timeline: Timeline,
               start_ms: int) -> list[LagPoint]:
    """Processed counts observed at wall times (epoch s) against the load's timeline."""
    out = []
    for t, done in processed:
        sent = round(sent_at(timeline, t))
        waiting = produced_at(timeline, done + 1)
        behind = 0.0 if waiting is None or waiting > t else round(t - waiting, 3)
        out.append(LagPoint(round(t - start_ms / 1000, 3), sent, done, sent - done, behind))
    return out


class _Processed:
    """Cumulative counters (one per key) summed as their increase since a baseline, counter
    resets counted from 0; one observation per second kept (the last). A sample of a
    micro-batch no newer than the key's last one (``batch_ms``) is a replay after a restart
    (at-least-once): it holds an older value, not a reset, and is skipped."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.batch: dict[str, int] = {}
        self.counting: set[str] = set()
        self.total = 0.0
        self.exact = True
        self.points: dict[int, tuple[float, int]] = {}

    def _replayed(self, key: str, batch_ms: int | None) -> bool:
        if batch_ms is None:
            return False
        if batch_ms <= self.batch.get(key, batch_ms - 1):
            return True
        self.batch[key] = batch_ms
        return False

    def before(self, key: str, value: float, batch_ms: int | None = None) -> None:
        """A value from before the load: the baseline (never once counting began)."""
        if key not in self.counting and not self._replayed(key, batch_ms):
            self.last[key] = value

    def after(self, key: str, value: float, born: bool, at: float,
              batch_ms: int | None = None) -> None:
        """A value during the load (``born``: the series' first sample), seen at ``at``."""
        if self._replayed(key, batch_ms):
            return
        self.counting.add(key)
        last = self.last.get(key)
        if last is None:
            last = 0.0 if born else value
            self.exact = self.exact and born
        self.total += value - last if value >= last else value
        self.last[key] = value
        self.points[int(at)] = (at, int(self.total))


# --- the metrics topic ------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchResult:
    """What :class:`MetricsWatcher` saw. ``latency`` None: no counter sample of a user's rule
    arrived; ``processed``: ``(wall s, logs processed since the start)``, one per second."""

    start_ms: int
    records: int            # records read at or after the start
    not_samples: int        # of those, not sample records (read_sample's reasons)
    samples: int            # counter samples of users' rules measured
    before_start: int       # counter samples of users' rules dated before the start
    negative: int           # samples dated after their arrival (clocks apart)
    latency: LatencyStats | None
    latency_series: list[SecondLatency]
    processed: list[tuple[float, int]]
    baseline_exact: bool
    error: str | None       # why the watcher stopped early (None: it ran to stop())

    def lag(self, timeline: Timeline) -> list[LagPoint]:
        """The job's lag over time against the load's timeline."""
        return lag_points(self.processed, timeline, self.start_ms)


class MetricsWatcher:
    """A thread reading the metrics topic from :data:`LOOKBACK_S` before ``start_ms``:
    latencies of the users' counter samples, the job's processed count. :meth:`start`
    checks the topic (a missing one is a :class:`~l2m.errors.ConfigError`) and starts the
    thread; :meth:`stop` (from any thread, any number of times) ends it and returns the
    :class:`WatchResult`; :meth:`snapshot` gives it meanwhile."""

    def __init__(self, kafka: Mapping[str, Any], topic: str, start_ms: int, *,
                 lookback_s: float = LOOKBACK_S, clock: Callable[[], float] = time.time,
                 consumer_factory: Callable[[dict[str, Any]], ConsumerLike] | None = None
                 ) -> None:
        self.kafka = dict(kafka)
        self.topic = topic
        self.start_ms = start_ms
        self.lookback_s = lookback_s
        self._clock = clock
        self._factory = consumer_factory
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: ConsumerLike | None = None
        self._latencies = Latencies()
        self._processed = _Processed()
        self._records = self._not_samples = self._samples = 0
        self._before = self._negative = 0
        self._error: str | None = None
        self._result: WatchResult | None = None

    def _settings(self) -> dict[str, Any]:
        # A group of its own that commits nothing: the watcher assigns partitions itself.
        return {**self.kafka, "group.id": f"l2m-load-watch-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False, "auto.offset.reset": "latest",
                "enable.partition.eof": False, "fetch.wait.max.ms": 100, "log_level": 3}

    def start(self) -> MetricsWatcher:
        """Assign every partition of the topic at :data:`LOOKBACK_S` before the start and
        begin reading on a daemon thread."""
        if self._factory is None:
            from confluent_kafka import Consumer

            self._factory = Consumer
        settings = self._settings()
        try:
            consumer = self._factory(settings)
        except Exception as exc:  # librdkafka refused a setting: it quotes the value
            raise ConfigError(f"--watch: kafka client settings: {masked(str(exc), settings)}"
                              ) from None
        try:
            self._assign(consumer)
        except BaseException:
            consumer.close()
            raise
        self._consumer = consumer
        self._thread = threading.Thread(target=self._run, name="l2m-load-watch", daemon=True)
        self._thread.start()
        return self

    def _assign(self, consumer: ConsumerLike) -> None:
        from confluent_kafka import OFFSET_END, KafkaError, TopicPartition

        try:
            found = consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
        except Exception as exc:  # a KafkaException: no broker answered
            raise KafkaUnavailableError(f"metrics topic {self.topic}: {exc}") from None
        if found is None or (found.error is not None and
                             found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise ConfigError(f"--watch: metrics topic {self.topic} not found")
        if found.error is not None or not found.partitions:
            why = found.error.str() if found.error is not None else "no partitions"
            raise KafkaUnavailableError(f"metrics topic {self.topic}: {why}")
        since = int(self.start_ms - self.lookback_s * 1000)
        asked = [TopicPartition(self.topic, p, since) for p in sorted(found.partitions)]
        try:
            offsets = consumer.offsets_for_times(asked, timeout=30)
        except Exception:  # a broker without times: from the end, no baseline then
            offsets = [TopicPartition(self.topic, tp.partition, -1) for tp in asked]
        # No record at or after that time: the partition's end.
        consumer.assign([TopicPartition(self.topic, tp.partition,
                                        tp.offset if tp.offset >= 0 else OFFSET_END)
                         for tp in offsets])

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            while not self._stop.is_set():
                records = consumer.consume(POLL_RECORDS, timeout=POLL_S)
                if records:
                    self.observe(records, self._clock())
        except Exception as exc:  # reported in the result, never a traceback
            with self._lock:
                self._error = f"{type(exc).__name__}: {exc}"
        finally:
            consumer.close()

    def observe(self, records: Iterable[Any], arrival_s: float) -> None:
        """Records consumed at ``arrival_s`` (epoch s): Kafka messages (``value()``,
        ``headers()``, ``timestamp()``, ``error()``). Anything a record holds is counted or
        skipped, never raised."""
        arrival_ms = round(arrival_s * 1000)
        second = math.floor((arrival_ms - self.start_ms) / 1000)
        with self._lock:
            for record in records:
                if record.error() is not None:
                    continue
                value = record.value()
                batch_ms = _record_time(record)
                early = batch_ms is not None and batch_ms < self.start_ms
                if early and (value is None or INPUT_RULE_ID.encode() not in value):
                    continue  # before the load, only the input counter's baseline matters
                mark, time_header = read_headers(record.headers())
                sample = read_sample(value, mark, time_header)
                if isinstance(sample, str):
                    self._not_samples += 0 if early else 1
                    self._records += 0 if early else 1
                    continue
                if sample.batch_ms is not None:
                    early = sample.batch_ms < self.start_ms
                if not early:
                    self._records += 1
                self._one(sample, early, arrival_s, arrival_ms, second)

    def _one(self, sample: SampleRecord, early: bool, arrival_s: float, arrival_ms: int,
             second: int) -> None:
        if sample.kind != "counter":
            return
        if sample.rule == INPUT_RULE_ID and sample.name == INPUT_METRIC:
            status = sample.labels.get("status", "")
            if not 0 <= sample.value < MAX_COUNT:  # NaN, ±Inf, negative: no count of logs
                return
            if early:
                self._processed.before(status, sample.value, sample.batch_ms)
            else:
                self._processed.after(status, sample.value, sample.mark == NEW, arrival_s,
                                      sample.batch_ms)
            return
        if early or sample.rule.startswith(RESERVED_ID_PREFIX):
            return
        if sample.timestamp < self.start_ms:
            self._before += 1
            return
        latency = arrival_ms - sample.timestamp
        self._samples += 1
        self._negative += latency < 0
        self._latencies.add(latency, second)

    def snapshot(self) -> WatchResult:
        """The result so far (the thread goes on)."""
        with self._lock:
            return WatchResult(
                self.start_ms, self._records, self._not_samples, self._samples, self._before,
                self._negative, self._latencies.stats(), self._latencies.series(),
                [self._processed.points[s] for s in sorted(self._processed.points)],
                self._processed.exact, self._error)

    def processed(self) -> int:
        """Logs processed since the start, as far as seen."""
        with self._lock:
            return int(self._processed.total)

    def wait_processed(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` logs are processed (True) or ``timeout_s`` passed or the
        watcher stopped (False)."""
        return _wait_processed(self.processed, self._stop, count, timeout_s, self._alive)

    def _alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

    def stop(self, timeout_s: float = 10.0) -> WatchResult:
        """End the thread (it closes its consumer) and return the result; again: the same."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        with self._lock:
            done = self._result
        if done is None:
            done = self.snapshot()
            with self._lock:
                self._result = self._result or done
                done = self._result
        return done


def _wait_processed(processed: Callable[[], int], stop: threading.Event, count: int,
                    timeout_s: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """A watcher's ``wait_processed``: True once ``processed()`` reaches ``count``; False at
    ``stop``, after ``timeout_s``, or once the watcher's thread is not ``alive()``."""
    deadline = time.monotonic() + timeout_s
    while processed() < count:
        if stop.is_set() or time.monotonic() >= deadline or not alive():
            return False
        stop.wait(min(0.1, max(0.0, deadline - time.monotonic())))
    return True


def _record_time(record: Any) -> int | None:
    """A record's Kafka timestamp (ms), None when it has none."""
    try:
        kind, ms = record.timestamp()
    except Exception:  # a record without one
        return None
    return ms if kind and isinstance(ms, int) and ms >= 0 else None


# --- Prometheus -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrometheusResult:
    """What :class:`PrometheusWatcher` saw: ``processed``: ``(wall s, logs counted since the
    first answer)``, one per second; ``polls``/``failed``: queries asked / not answered with
    a number (``last_error``: why the last one was not)."""

    start_ms: int
    polls: int
    failed: int
    last_error: str | None
    processed: list[tuple[float, int]]

    def delays(self, timeline: Timeline) -> list[tuple[float, float]]:
        """Per answer that counted new logs: ``(t since the start s, delay s)``, the delay
        until the V-th log was queryable = that answer's time − when the V-th log was
        produced (V: the logs counted so far)."""
        out = []
        last = 0
        for t, done in self.processed:
            made = produced_at(timeline, done)
            if done > last and made is not None:
                out.append((round(t - self.start_ms / 1000, 3), round(t - made, 3)))
            last = max(last, done)
        return out

    def queryable_after(self, timeline: Timeline) -> float | None:
        """Seconds from the production of the load's last log until Prometheus counted all
        of them; None if it never did while watched."""
        if not timeline or not timeline[-1][1]:
            return None
        made = produced_at(timeline, timeline[-1][1])
        for t, done in self.processed:
            if done >= timeline[-1][1] and made is not None:
                return round(t - made, 3)
        return None


def prometheus_query_url(base: str) -> str:
    """The instant-query URL of :data:`PROMETHEUS_QUERY` under a Prometheus base URL
    (``http://127.0.0.1:9090``, or a prefix such as ``…/prometheus``); a URL that is not
    http(s) with a host is a :class:`~l2m.errors.ConfigError`."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--prometheus: {base!r} is not an http(s) URL with a host")
    path = parts.path.rstrip("/") + "/api/v1/query"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path,
                                    urllib.parse.urlencode({"query": PROMETHEUS_QUERY}), ""))


def answer_value(body: bytes) -> float:
    """The number of an instant query's answer (``{"status": "success", "data": {"result":
    [{"value": [t, "n"]}]}}``; no series: 0); ValueError for anything else."""
    try:
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise ValueError(f"status {doc.get('status')!r}: {doc.get('error', '')}"[:200])
        result = doc["data"]["result"]
        if not result:
            return 0.0
        number = float(result[0]["value"][1])
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, KeyError, IndexError,
            TypeError) as exc:
        raise ValueError(f"not an instant-query answer ({type(exc).__name__})") from None
    if not math.isfinite(number):
        raise ValueError(f"not a finite count: {number}")
    return number


class PrometheusWatcher:
    """A thread asking a Prometheus (only the URL given) for :data:`PROMETHEUS_QUERY` every
    ``interval_s``: its first answer is the baseline, each later one how many logs are
    queryable. :meth:`start`, :meth:`stop` → :class:`PrometheusResult` as
    :class:`MetricsWatcher`'s."""

    def __init__(self, url: str, start_ms: int, *, interval_s: float = PROMETHEUS_INTERVAL_S,
                 clock: Callable[[], float] = time.time,
                 fetch: Callable[[str, float], bytes] | None = None) -> None:
        self.url = prometheus_query_url(url)
        self.start_ms = start_ms
        self.interval_s = interval_s
        self._clock = clock
        self._fetch = fetch or _http_get
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._processed = _Processed()
        self._polls = self._failed = 0
        self._last_error: str | None = None
        self._started = False

    def start(self) -> PrometheusWatcher:
        self._thread = threading.Thread(target=self._run, name="l2m-load-prometheus",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.poll()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def poll(self) -> None:
        """Ask once; the answer (or why there is none) is kept."""
        try:
            value = answer_value(self._fetch(self.url, PROMETHEUS_TIMEOUT_S))
            error = None
            if not 0 <= value < MAX_COUNT:
                raise ValueError(f"not a count of logs: {value:g}")
        except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
            value, error = math.nan, f"{type(exc).__name__}: {exc}"[:300]
        at = self._clock()
        with self._lock:
            self._polls += 1
            if error is not None:
                self._failed += 1
                self._last_error = error
                return
            if not self._started:
                self._processed.before("", value)
                self._started = True
            else:
                self._processed.after("", value, False, at)

    def processed(self) -> int:
        with self._lock:
            return int(self._processed.total)

    def wait_processed(self, count: int, timeout_s: float) -> bool:
        """As :meth:`MetricsWatcher.wait_processed`."""
        return _wait_processed(self.processed, self._stop, count, timeout_s)

    def snapshot(self) -> PrometheusResult:
        with self._lock:
            return PrometheusResult(self.start_ms, self._polls, self._failed, self._last_error,
                                    [self._processed.points[s]
                                     for s in sorted(self._processed.points)])

    def stop(self, timeout_s: float = 10.0) -> PrometheusResult:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        return self.snapshot()


def _http_get(url: str, timeout_s: float) -> bytes:
    # No proxy: the watcher talks to the URL it was given, nothing else.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as answer:
            return bytes(answer.read(1 << 20))
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code}") from None
