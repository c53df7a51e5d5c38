"""The hostile records of the poison tests (unit, Spark and integration tiers): records that
are still JSON objects with a usable time or not, malformed lines, records that are processed
(the expected status follows each), and the rules they run through."""

from __future__ import annotations

import json

from l2m.rules.loader import load_text

T0 = 1795341600000  # 2026-11-22T10:00:00Z
RULES, _ = load_text("""\
rules:
  - {id: n, name: logs_total, kind: counter, query: "*", aggregation: count, group_by: [svc]}
  - {id: s, name: bytes_total, kind: counter, query: "*", aggregation: sum, field: b}
  - {id: g, name: bytes_max, kind: gauge, query: "NOT svc:big", aggregation: max, field: b}
""")

# (record, what it is): hostile records that are still JSON objects with a usable time, or
# not; the expected status follows each.
HOSTILE_TIMES = [
    (b'{"@timestamp": 1e20, "svc": "a"}', "timestamp 1e20"),
    (b'{"@timestamp": 9223372036854775808, "svc": "a"}', "timestamp 2^63"),
    (b'{"@timestamp": -9223372036854775808, "svc": "a"}', "timestamp int64 min"),
    (b'{"@timestamp": 1e16, "svc": "a"}', "timestamp 1e16"),
    (b'{"@timestamp": 1e30, "svc": "a"}', "timestamp 1e30"),
    (b'{"@timestamp": "99999-01-01T00:00:00Z", "svc": "a"}', "ISO year 99999"),
    (b'{"@timestamp": "0001-01-01T00:00:00+01:00", "svc": "a"}', "before year 1"),
]
MALFORMED_LINES = [
    (b'{"@timestamp": 1795341600000, "b": NaN}', "NaN literal"),
    (b'{"@timestamp": 1795341600000, "b": Infinity}', "Infinity literal"),
    (b'{"@timestamp": 1795341600000, "svc": "\xff\xfe"}', "invalid UTF-8"),
    (b'{"a":' * 5000 + b"1" + b"}" * 5000, "nesting 5000 deep"),
    (b'{"@timestamp": 1795341600002, "b": 1e400}', "past double range"),
]
PROCESSED = [
    (b'{"@timestamp": 1795341600000, "b": 1e308, "svc": "big"}', "1e308"),
    (b'{"@timestamp": 1795341600001, "b": 1e308, "svc": "big"}', "1e308 again: sum is +Inf"),
    (b'{"@timestamp": 1795341600002, "b": 123456789012345678901234567890, "svc": "x"}',
     "an integer past int64: read as a double"),
    (json.dumps({"@timestamp": T0, "svc": "huge", "m": "x" * 2_000_000}).encode(), "2 MB"),
]
