"""Every default of a job, a rule set's query settings and the command line, defined once.

Input: none. Output: constants read by :mod:`l2m.query.nodes` (query settings),
:mod:`l2m.config.job` (the job configuration's defaults), :mod:`l2m.engine` (event time) and
:mod:`l2m.cli` (option defaults), so that a default changed here changes everywhere and the
documentation (``topology/production.yaml``, ``docs/streaming.md``) has one place to agree
with."""

from __future__ import annotations

# Query semantics (SPEC §2): fields analysed as text, and the fields bare terms search.
TEXT_FIELDS: tuple[str, ...] = ("message",)
DEFAULT_FIELDS: tuple[str, ...] = ("message",)
# Event time (SPEC §3).
TIMESTAMP_FIELD = "@timestamp"

# Records per parsed batch of a read task: the Kafka reader's consume batches, the in-memory
# source's and backfill's slices of lines (l2m.engine.readtask).
BATCH_ROWS = 10_000

# Spark.
MASTER = "local[*]"

# The streaming job (SPEC §6; topology/production.yaml documents each).
BOOTSTRAP_SERVERS = "127.0.0.1:9092"
LOGS_TOPIC = "logs"
METRICS_TOPIC = "metrics"
DEAD_LETTERS_TOPIC = "logs-dead-letters"
RULES_PATH = "rules"
CHECKPOINT = "checkpoints/l2m"
TRIGGER_MS = 5_000
# How often `l2m run` looks at its rule files for a change (live rules; 0: only on SIGHUP or
# POST /-/reload): a change reaches its first sample within this plus two triggers.
RULES_POLL_MS = 2_000
# How long a gauge window stays open for late logs after the newest event time (SPEC §3).
GRACE_MS = 20 * 60_000
# A gauge window is published (its final value marked for remote write) once the newest event
# time has passed its end by this much; corrections after that stay on the Kafka topic only
# (docs/prometheus.md). At most the grace.
PUBLISH_DELAY_MS = 2 * 60_000
# How often a gauge window key that gets no logs is looked at again (the *recheck*: published
# once final, dropped once closed), on multiples of it; an idle source ticks then
# (docs/streaming.md, "Ticks"). Also the longest a job may set: live rules keep a rule set's
# version for one recheck past its windows (l2m.streaming.rulesets.RECHECK_MARGIN_MS).
RECHECK_MS = 60_000
# Event times further ahead of their record's Kafka time are counted as `future` and
# dead-lettered instead of moving the watermark.
MAX_FUTURE_MS = 5 * 60_000
COUNTER_TTL_MS = 7 * 86_400_000
COUNTER_SHARDS = 8

# Limits on what a sample may carry (SPEC §7; docs/rules.md, "Limits"): a label value from a
# log longer than this many characters is cut to it, with a marker, and counted.
MAX_LABEL_VALUE_LENGTH = 1_024
# The shortest limit a job may set: a cut value keeps at least 10 characters of the log's.
MIN_LABEL_VALUE_LENGTH = 16

# Series caps (SPEC §7; docs/rules.md, "Series limits"): live series a rule, a metric name
# of an account and an account may hold in one state domain (counters; each one-minute gauge
# window on its own). 0 means no cap. Measured (benchmarks/README.md, "cardinality"): 1M live
# series slow every batch of a 2-core job 3-5x; these keep a hostile tenant well below that.
MAX_SERIES_PER_RULE = 10_000
MAX_SERIES_PER_METRIC = 20_000
MAX_SERIES_PER_ACCOUNT = 100_000

# Per-tenant metrics name the top accounts by live series, the rest summed as one.
TOP_ACCOUNTS = 20
