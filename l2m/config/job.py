"""The job configuration as typed records: everything ``l2m run`` needs.

Input: none (plain values; :mod:`l2m.config.loader` builds them from a YAML file). Output:
:class:`JobConfig` and its sections, read by the streaming job, the runtime and the CLI."""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any, Literal

from l2m import defaults
from l2m.config.decode import (
    DURATION,
    PATH,
    ZERO_IS_NONE,
    Client,
    Invalid,
    Key,
    Parse,
    Range,
    describe,
    parse_duration_ms,
)
from l2m.errors import ConfigError
from l2m.policy.limits import Limits, SeriesLimits
from l2m.policy.tenancy import Tenancy, account_problem, shown_account
from l2m.query.nodes import QueryConfig
from l2m.semantics.values import LABEL_NAME_RE

# How values are written in the file (l2m.config.decode reads these annotations; in Python
# they are plain ints and strings).
Duration = Annotated[int, DURATION]  # milliseconds; written "20 minutes", "5s" or seconds
Count = Annotated[int, Range(minimum=1)]  # at least 1, at most a Java int
Limit = Annotated[int | None, Range(minimum=1), ZERO_IS_NONE]  # 0 or null: no limit
ClientSettings = Annotated[dict[str, str], Client()]  # librdkafka settings; values secret


@dataclass(frozen=True)
class Topics:
    logs: str = defaults.LOGS_TOPIC
    metrics: str = defaults.METRICS_TOPIC
    dead_letters: str = defaults.DEAD_LETTERS_TOPIC


def starting_offsets(value: Any) -> str:
    """``earliest``, ``latest`` or per-partition offsets (-2 earliest, -1 latest), written as
    a YAML mapping or a JSON string, optionally under the topic's name → ``earliest``,
    ``latest`` or the JSON :mod:`l2m.kafka.source` reads; else :class:`Invalid`."""
    if value in ("earliest", "latest"):
        return str(value)
    expected = "expected earliest, latest or a mapping of partition to offset"
    written = value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise Invalid(f"{expected}, got {describe(written)}") from None
    if not isinstance(value, dict) or not value:
        raise Invalid(f"{expected}, got {describe(written)}")
    per_topic = all(isinstance(v, dict) for v in value.values())
    for partitions in value.values() if per_topic else [value]:
        for partition, offset in partitions.items():
            if not re.fullmatch(r"[0-9]+", str(partition)):
                raise Invalid(f"partition '{partition}' is not a partition number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise Invalid(f"offset of partition {partition} must be an integer, -2 "
                              f"(earliest) or -1 (latest) or more, got {describe(offset)}")
    if per_topic:
        return json.dumps({str(t): {str(p): o for p, o in ps.items()} for t, ps in value.items()})
    return json.dumps({str(p): o for p, o in value.items()})


def recheck_ms(value: Any) -> int:
    """The ``recheck`` duration, ms: 1 second to :data:`l2m.defaults.RECHECK_MS` (live rules
    keep a rule set's version for one recheck past its windows); else :class:`Invalid`."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise Invalid(f"expected a duration, got {describe(value)}")
    ms = parse_duration_ms(value)
    if not 1_000 <= ms <= defaults.RECHECK_MS:
        raise Invalid(f"must be between 1 second and {defaults.RECHECK_MS // 60_000} minute "
                      f"(live rules keep a rule set for one past its windows), got {value}")
    return ms


@dataclass(frozen=True)
class SourceConfig:
    """How the Kafka source reads (``source:`` in the file; the same fields, by their
    option names, are ``format("l2m-kafka")``'s options: :mod:`l2m.kafka.options`)."""

    starting_offsets: Annotated[str, Parse(starting_offsets)] = "earliest"
    max_records_per_trigger: Limit = None
    max_records_per_task: Limit = 100_000
    min_partitions: Limit = None  # default: Spark's default parallelism
    planner: Literal["balanced", "partition"] = "balanced"  # partition: a task per partition
    plan_log: str | None = None  # benchmarks: a file each batch's task sizes are appended to
    fail_on_data_loss: bool = True
    group_id: str | None = None
    poll_timeout_ms: Count = 120_000


@dataclass(frozen=True)
class MonitoringConfig:
    """Where the driver serves ``/metrics``, ``/healthz`` and ``/readyz`` (docs/metrics.md);
    port 0: a free one (the endpoint reports it); no port (absent or null): not served."""

    port: Annotated[int | None, Range(0, 65535)] = None
    host: str = "0.0.0.0"
    # Per-tenant metrics (l2m.state.accounts) name this many accounts, by live series; the
    # rest are summed as account="__other__", so l2m's own series stay bounded.
    top_accounts: Count = defaults.TOP_ACCOUNTS


def account_limits(value: Any) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """``{account: {max_series_per_rule|…_metric|…_account: n}}`` — each account's overrides of
    the job's series caps — as sorted pairs; else :class:`Invalid`."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise Invalid(f"expected a mapping of account to its caps, got {describe(value)}")
    pairs = []
    for account, caps in value.items():
        if not isinstance(caps, dict):
            raise Invalid(f"caps of account '{account}': expected a mapping like "
                          f"{{max_series_per_account: 500000}}, got {describe(caps)}")
        override = []
        for key, number in caps.items():
            name = SERIES_CAP_KEYS.get(str(key))
            if name is None:
                raise Invalid(f"caps of account '{account}': unknown key '{key}' (one of "
                              f"{', '.join(SERIES_CAP_KEYS)})")
            if not isinstance(number, int) or isinstance(number, bool) or \
                    not 0 <= number < 2**31:
                raise Invalid(f"caps of account '{account}': {key} must be a whole number "
                              f"from 0 (no cap) to 2147483647, got {describe(number)}")
            override.append((name, number))
        pairs.append((str(account), tuple(sorted(override))))
    return tuple(sorted(pairs))


# The keys of a series cap in `limits:` and `limits.accounts.<account>:` → SeriesLimits fields.
SERIES_CAP_KEYS = {"max_series_per_rule": "per_rule", "max_series_per_metric": "per_metric",
                   "max_series_per_account": "per_account"}
Cap = Annotated[int, Range(minimum=0)]  # 0: no cap


@dataclass(frozen=True)
class LimitsConfig:
    """What a sample may carry and how many series a tenant may hold (``limits:``;
    docs/rules.md, "Limits"): a label value from a log longer than ``max_label_value_length``
    characters is cut to it and counted; a log that would open a series past a cap is counted
    into its rule's overflow series (:mod:`l2m.engine.admission`). ``accounts``: per-account
    overrides of the three caps."""

    max_label_value_length: Annotated[int, Range(minimum=defaults.MIN_LABEL_VALUE_LENGTH)] = \
        defaults.MAX_LABEL_VALUE_LENGTH
    max_series_per_rule: Cap = defaults.MAX_SERIES_PER_RULE
    max_series_per_metric: Cap = defaults.MAX_SERIES_PER_METRIC
    max_series_per_account: Cap = defaults.MAX_SERIES_PER_ACCOUNT
    accounts: Annotated[tuple[tuple[str, tuple[tuple[str, int], ...]], ...],
                        Parse(account_limits)] = ()

    @property
    def series(self) -> Limits:
        """The caps as the loader and the engine take them."""
        return Limits(SeriesLimits(self.max_series_per_rule, self.max_series_per_metric,
                                   self.max_series_per_account), self.accounts)


def tenant_targets(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{account: [target, …]}`` — the target accounts each account may write to besides
    its own — as sorted pairs; else :class:`Invalid`."""
    if value is None:
        return ()
    expected = "expected a mapping of account to a list of target accounts"
    if not isinstance(value, dict):
        raise Invalid(f"{expected}, got {describe(value)}")
    pairs = []
    for account, targets in value.items():
        if isinstance(targets, str):
            targets = [targets]
        if not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets):
            raise Invalid(f"targets of account '{account}': {expected}, got "
                          f"{describe(targets)}")
        # Each becomes a tenant header and a label value, as a rule's own accounts do
        # (docs/rules.md, "Accounts"): one the rules could never name is a typo, said here.
        for name in (str(account), *targets):
            problem = account_problem(name)
            if problem is not None:
                raise Invalid(f"account {shown_account(name)} {problem} (an account is a "
                              "Mimir tenant ID: docs/rules.md, \"Accounts\")")
        pairs.append((str(account), tuple(targets)))
    return tuple(sorted(pairs))


@dataclass(frozen=True)
class TenancyConfig:
    """Who a rule belongs to (``tenancy:``; docs/rules.md, "Tenant mode"). ``open``: a
    rule's ``account`` and ``target_account`` are what it says (one team's rules). ``accounts``:
    each rules path is a root of account directories; a rule belongs to its directory's
    account, sees only that account's logs and writes to it or to one of ``targets``."""

    mode: Literal["open", "accounts"] = "open"
    targets: Annotated[tuple[tuple[str, tuple[str, ...]], ...], Parse(tenant_targets)] = ()


@dataclass(frozen=True)
class TlsConfig:
    """How a remote-write endpoint's TLS is checked (``tls:``)."""

    ca_file: Annotated[str | None, PATH] = None
    cert_file: Annotated[str | None, PATH] = None
    key_file: Annotated[str | None, PATH] = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class BasicAuth:
    """``basic_auth:``: the password from a file (a mounted Secret) or an environment
    variable, never written in the file."""

    username: str = ""
    password_file: Annotated[str | None, PATH] = None
    password_env: str | None = None


def shown_url(url: str) -> str:
    """A URL as l2m prints it: without user info, query and fragment (they may hold
    credentials)."""
    try:
        parsed = urllib.parse.urlsplit(url)
        host = parsed.hostname or ""
        port = f":{parsed.port}" if parsed.port is not None else ""
    except ValueError:  # a port that is not a number
        return "(a URL not shown)"
    if ":" in host:
        host = f"[{host}]"
    return urllib.parse.urlunsplit((parsed.scheme, host + port, parsed.path, "", ""))


def remote_write_url(value: Any) -> str:
    """An endpoint's ``url``: http(s)://host…, without user info. Never quoted in a problem:
    it may hold a password."""
    if not isinstance(value, str) or not value:
        raise Invalid(f"expected a URL like https://host/api/v1/push, got "
                      f"{describe(value, secret=True)}")
    try:
        parsed = urllib.parse.urlsplit(value)
        parsed.port  # noqa: B018  (raises for a port that is not a number)
    except ValueError:
        raise Invalid("not a URL like https://host/api/v1/push") from None
    if parsed.username is not None or parsed.password is not None:
        raise Invalid("user info (user:password@) in the URL is refused: give the credentials "
                      "as basic_auth (username, password_file or password_env) or a bearer "
                      "token (bearer_token_file or bearer_token_env)")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise Invalid(f"expected a URL like https://host/api/v1/push, not "
                      f"{parsed.scheme or 'no scheme'}://…")
    return value




def account_label(value: Any) -> str:
    """``account_label``: a Prometheus label name, not a reserved one (``__…``)."""
    if not isinstance(value, str) or not LABEL_NAME_RE.fullmatch(value) or \
            value.startswith("__"):
        raise Invalid(f"expected a Prometheus label name (letters, digits, _; not starting "
                      f"with __), got {describe(value)}")
    return value


def _redacted(record: Any, secret: tuple[str, ...] = (), urls: tuple[str, ...] = ()) -> str:
    """A record's repr with the values of its ``secret`` mappings and the user info of its
    ``urls`` left out: a repr lands in logs and tracebacks."""
    parts = []
    for f in fields(record):
        value = getattr(record, f.name)
        if f.name in secret and isinstance(value, dict):
            value = dict.fromkeys(value, "(not shown)")
        elif f.name in urls and isinstance(value, str):
            value = shown_url(value)
        parts.append(f"{f.name}={value!r}")
    return f"{type(record).__name__}({', '.join(parts)})"


@dataclass(frozen=True)
class RemoteWriteEndpoint:
    """One Prometheus remote-write receiver (``remote_write.endpoints[]``; docs/prometheus.md).
    A sample goes to every endpoint whose ``accounts`` hold its target account (none listed:
    all), with its tenant — ``tenants[account]``, else the account itself, else
    ``default_tenant`` for a sample without one — in ``tenant_header`` (null: no header).
    Accounts that share a tenant get their account as the label ``account_label`` (null:
    such a configuration is refused when ``l2m deliver`` starts); ``auth_failures``: what a
    401 or 403 does — ``retry`` (with backoff, until the credentials work) or ``refuse``."""

    url: Annotated[str, Parse(remote_write_url)] = ""
    name: str | None = None  # default: the URL's host and port
    headers: Annotated[dict[str, str], Client()] = field(default_factory=dict)
    tenant_header: str | None = "X-Scope-OrgID"
    tenants: dict[str, str] = field(default_factory=dict)
    default_tenant: str | None = None
    accounts: tuple[str, ...] = ()
    bearer_token_file: Annotated[str | None, PATH] = None
    bearer_token_env: str | None = None
    basic_auth: BasicAuth | None = None
    tls: TlsConfig = TlsConfig()
    timeout_ms: Annotated[Duration, Key("timeout")] = 30_000
    max_samples_per_send: Count = 2_000
    account_label: Annotated[str | None, Parse(account_label)] = "l2m_account"
    auth_failures: Literal["retry", "refuse"] = "retry"

    def __repr__(self) -> str:
        return _redacted(self, secret=("headers",), urls=("url",))


@dataclass(frozen=True)
class RemoteWriteConfig:
    """``l2m deliver``: the metrics topic → remote-write endpoints (docs/prometheus.md). Each
    endpoint reads the topic on its own, its progress committed as the offsets of the consumer
    group ``<group_id>-<endpoint name>``."""

    endpoints: tuple[RemoteWriteEndpoint, ...] = ()
    group_id: str = "l2m-remote-write"
    poll_ms: Annotated[Duration, Key("poll")] = 1_000


@dataclass(frozen=True)
class JobConfig:
    """Everything ``l2m run`` needs. See ``topology/production.yaml`` for each key."""

    # A file must name bootstrap.servers; this default is for jobs built in code.
    kafka: Annotated[ClientSettings, Client(required=("bootstrap.servers",))] = field(
        default_factory=lambda: {"bootstrap.servers": defaults.BOOTSTRAP_SERVERS})
    # Overrides of `kafka` for the metrics (sink) side, e.g. another cluster.
    sink_kafka: ClientSettings = field(default_factory=dict)
    topics: Topics = Topics()
    rules: Annotated[tuple[str, ...], PATH] = (defaults.RULES_PATH,)
    # docs/streaming.md "Live rule changes": how often the rule paths are looked at.
    rules_poll_ms: Annotated[Duration, Key("rules_poll")] = defaults.RULES_POLL_MS
    checkpoint: Annotated[str, PATH] = defaults.CHECKPOINT  # a URI is kept as written
    trigger_ms: Annotated[Duration, Key("trigger")] = defaults.TRIGGER_MS
    grace_ms: Annotated[Duration, Key("grace")] = defaults.GRACE_MS
    # docs/prometheus.md: when a gauge window's value is final (at most the grace; unset:
    # defaults.PUBLISH_DELAY_MS, or the grace if that is shorter — see publish_delay).
    publish_delay_ms: Annotated[int | None, DURATION, Key("publish_delay")] = None
    # docs/streaming.md "Ticks": how often a window without logs is looked at (≤ 1 minute).
    recheck_ms: Annotated[int, Parse(recheck_ms), Key("recheck")] = defaults.RECHECK_MS
    # Event times further ahead of their record's Kafka time are counted as `future` and
    # dead-lettered instead of moving the watermark.
    max_future_ms: Annotated[Duration, Key("max_future_skew")] = defaults.MAX_FUTURE_MS
    counter_ttl_ms: Annotated[Duration, Key("counter_ttl")] = defaults.COUNTER_TTL_MS
    counter_shards: Count = defaults.COUNTER_SHARDS
    text_fields: tuple[str, ...] = defaults.TEXT_FIELDS
    default_fields: tuple[str, ...] = defaults.DEFAULT_FIELDS
    timestamp_field: str = defaults.TIMESTAMP_FIELD
    source: SourceConfig = SourceConfig()
    limits: LimitsConfig = LimitsConfig()
    tenancy: TenancyConfig = TenancyConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    remote_write: RemoteWriteConfig = RemoteWriteConfig()
    master: Annotated[str, Key("spark", "master")] = defaults.MASTER
    spark: dict[str, str] = field(default_factory=dict)  # Spark settings (master aside)
    path: Annotated[str | None, Key()] = None  # the file it was read from

    def __repr__(self) -> str:
        return _redacted(self, secret=("kafka", "sink_kafka", "spark"))

    def __post_init__(self) -> None:
        if self.publish_delay_ms is not None and self.publish_delay_ms > self.grace_ms:
            raise ConfigError(
                f"{self.path or 'config'}: publish_delay ({self.publish_delay_ms / 60_000:g} "
                f"minutes) must be at most grace ({self.grace_ms / 60_000:g} minutes): a gauge "
                "window is published before it closes")

    @property
    def publish_delay(self) -> int:
        """How long past its end (in event time) a gauge window is published, ms."""
        if self.publish_delay_ms is not None:
            return self.publish_delay_ms
        return min(defaults.PUBLISH_DELAY_MS, self.grace_ms)

    @property
    def query_config(self) -> QueryConfig:
        return QueryConfig(text_fields=self.text_fields, default_fields=self.default_fields)

    @property
    def rule_tenancy(self) -> Tenancy | None:
        """The rule loader's tenant mode, or None (open)."""
        if self.tenancy.mode == "open":
            return None
        return Tenancy(targets=self.tenancy.targets)

    @property
    def sink(self) -> dict[str, str]:
        return {**self.kafka, **self.sink_kafka}

    def with_bootstrap(self, bootstrap: str) -> JobConfig:
        return replace(self, kafka={**self.kafka, "bootstrap.servers": bootstrap})
