# ruff: noqa: E501  (the rendered document has long Markdown table rows)
"""`l2m topology`: the stage graph of the streaming job, like Kafka Streams'
``Topology.describe()``.

Input: a job configuration and its rules. Output: Markdown — the stages, the modules that
implement them (found from the code, so a moved stage shows its new home), the state format
and keys (the code's own constants), and the settings that shape each stage.
``topology/TOPOLOGY.md`` is this output for ``topology/local.yaml`` (a test keeps it so)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

from l2m.config.job import JobConfig
from l2m.engine.partials import KEY
from l2m.engine.routing import plan_for
from l2m.engine.samples import PACK_SAMPLES
from l2m.kafka.deadletters import DEAD_LETTER_MAX_BYTES
from l2m.rules.identity import shown_type
from l2m.rules.model import Rule
from l2m.state.format import BLOB_FORMAT, CUMULATIVE, PAGE_SERIES, STATE_FORMAT, STATE_KEY


def _fmt_ms(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0 and ms >= size:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def _shown(path: str) -> str:
    """A path relative to the working directory when it is below it (stable across
    machines in the committed TOPOLOGY.md)."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def describe(cfg: JobConfig, rules: Sequence[Rule]) -> str:
    """Markdown description of the query's stages, with the settings that shape them."""
    enabled = [r for r in rules if r.enabled]
    counters = [r for r in enabled if r.kind == "counter"]
    gauges = [r for r in enabled if r.kind == "gauge"]
    src = cfg.source
    if src.planner == "partition":
        split = "one task per partition range"
    else:
        split = ("balanced plan: tasks of about equal size, a hot partition split over several"
                 + (f", about {src.max_records_per_task:,} records at most"
                    if src.max_records_per_task else ""))
    limit = (f"at most {src.max_records_per_trigger:,} records per micro-batch, shared by "
             "backlog" if src.max_records_per_trigger else "everything available per batch")
    fields = ", ".join(u.path for u in plan_for(enabled, cfg.timestamp_field).plan.fields)

    def rule_list(rs: list[Rule]) -> str:
        return ", ".join(f"`{r.id}`" for r in rs) or "(none)"

    def metadata(rs: list[Rule], shown: int = 50) -> str:
        rows = [f"| `{r.name}` | {shown_type(r)} | {r.unit or '—'} | {r.description or '—'} |"
                for r in rs[:shown]]
        more = [f"\n… and {len(rs) - shown} more (`l2m validate --list`)."] \
            if len(rs) > shown else []
        return "\n".join(["| metric | type | unit | description |", "|---|---|---|---|",
                          *rows, *more])

    keys = ", ".join(STATE_KEY)
    lim = cfg.limits
    m = _module
    return f"""# l2m streaming topology

Rendered by `l2m topology --config {_shown(cfg.path) if cfg.path else '<config>'}` — do not edit by hand.

One streaming query in one Spark application (`{cfg.master}`), checkpoint
`{_shown(cfg.checkpoint)}/metrics`. Trigger: every {_fmt_ms(cfg.trigger_ms)}. Kafka:
`{cfg.kafka.get('bootstrap.servers')}`; metrics to `{cfg.sink.get('bootstrap.servers')}`.

```
l2m-metrics ({len(counters)} counter rules, {len(gauges)} gauge rules)
  Source: l2m-kafka [{cfg.topics.logs}]; in each read task, on Arrow ({m("l2m.engine.readtask")}):
    consume --> parse --> Dead letters [{cfg.topics.dead_letters}]
            --> Route: one row per (log, rule, series), plus one status row per log
            --> Pre-aggregate: per task, per ({", ".join(KEY)})
    --> partials only leave the task: those of one state key in one row (an Arrow IPC stream)
    --> Watermark: max event time of routed logs - {_fmt_ms(cfg.grace_ms)}
    --> Exchange: hash({keys}); shard = the shard of the rule's account (of the rule without one)
    --> State: transformWithStateInPandas, RocksDB, keyed by ({keys}), a large rule's series in pages
          series caps per rule {_cap(lim.max_series_per_rule)}, metric {_cap(lim.max_series_per_metric)}, account {_cap(lim.max_series_per_account)}: past them, the rule's overflow series
          counters: window {CUMULATIVE}, {cfg.counter_shards} shards, TTL {_fmt_ms(cfg.counter_ttl_ms)}
          gauges:   1-minute windows, until the watermark passes the window
    --> Sink: l2m-kafka-sink [{cfg.topics.metrics}]
```

| stage | module | contract |
|---|---|---|
| source | `{m("l2m.kafka.source")}`, `{m("l2m.kafka.consumer")}`, `{m("l2m.kafka.offsets")}` | Kafka → the read task's partials (`{m("l2m.engine.readtask")}`); offsets in the checkpoint, explicit partition assignment (no consumer group, no rebalancing); {split}; {limit}; starting offsets `{src.starting_offsets}`; failOnDataLoss `{str(src.fail_on_data_loss).lower()}` |
| parse | `{m("l2m.engine.parse")}` | JSON → typed columns for the referenced fields only, and one boolean per regex/wildcard (RE2, `{m("l2m.query.patterns")}`); event time `{cfg.timestamp_field}`, else the Kafka timestamp; more than {_fmt_ms(cfg.max_future_ms)} ahead of the record: `future`; malformed and future → `{cfg.topics.dead_letters}` with the reason (records over {DEAD_LETTER_MAX_BYTES // 1024} KiB cut) |
| route | `{m("l2m.engine.match")}`, `{m("l2m.engine.fanout")}` | each rule's query evaluated on Arrow, every distinct query node once per chunk of logs; rules scoped to an account only on that account's logs; one row per (log, rule, series) |
| pre-aggregate | `{m("l2m.engine.preaggregate")}`, `{m("l2m.engine.partials")}`, `{m("l2m.engine.streamtask")}` | per task, before any shuffle: one partial per ({", ".join(KEY)}); counters have no window; exact decimal sums; a state key's partials leave the task as one packed row, read back at once by the state stage |
| state | `{m("l2m.state.processor")}` | one key per ({keys}) for all rules together; a small rule's series in its entry, a large rule's in pages of about {PAGE_SERIES} (hashed): a batch reads and writes only the entries of the series it touches; idle counters expire by the state TTL |
| series caps | `{m("l2m.engine.admission")}` | every series of an account in one shard, so each cap is counted in one key; a new series past a cap goes to its rule's overflow series (`l2m_overflow="true"`), the logs counted as `l2m_series_refused_total` |
| counters | `{m("l2m.state.counters")}` (`CounterState`) | cumulative per series, many series per Python call; idle series dropped after the TTL; the input statuses (one key) also count late logs, `l2m_late_logs_total` |
| gauges | `{m("l2m.state.gauges")}` (`GaugeState`) | watermark = max event time − grace; corrected windows re-emitted; logs for windows past the watermark dropped |
| sink | `{m("l2m.kafka.sink")}` | idempotent producer, deterministic keys, a batch commits only when every sample is acknowledged; a state call's samples from {PACK_SAMPLES} on arrive packed in one row and are unpacked (`{m("l2m.engine.samples")}`) |

The state schema does not depend on the rules (rule id, labels and `le` are data): adding,
changing or removing rules keeps the checkpoint usable. Stored state carries its format
version (`{m("l2m.state.format")}`): a new checkpoint is written in format {STATE_FORMAT}
(keys ({keys})); a checkpoint of format {BLOB_FORMAT} (releases 0.1.0 and 0.2.0) continues in
its own layout, one blob per key; other formats are refused.

Fields parsed: {fields or "(none)"}.

Counter rules: {rule_list(counters)}.
Gauge rules: {rule_list(gauges)}.

Metric metadata (rules' `unit` and `description`, remote write's UNIT and HELP; the type
column is the rule's form, whose TYPE remote write sends as counter, gauge (quantiles too),
histogram, or gaugehistogram for a gauge with native buckets; docs/prometheus.md):

{metadata(enabled)}
"""


def _cap(n: int) -> str:
    return f"{n:,}" if n else "none"


def _module(name: str) -> str:
    """The source file of a module, relative to the package's parent (``l2m/kafka/sink.py``),
    found without importing it: a stage that moves renders its new home, one that is gone
    fails the render."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise LookupError(f"topology names {name}, which does not exist")
    package = importlib.util.find_spec("l2m")
    assert package is not None and package.origin is not None
    return Path(spec.origin).relative_to(Path(package.origin).parent.parent).as_posix()
