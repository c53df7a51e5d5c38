"""Rule sets several test files run (the Kafka tests, the in-memory harness, the sink)."""

# Every kind of counter state: a count by label, an exact sum, a histogram.
COUNTER_RULES = """\
rules:
  - {id: all, name: logs_total, kind: counter, query: "*", aggregation: count,
     group_by: [service]}
  - {id: bytes, name: bytes_total, kind: counter, query: "_exists_:http.bytes",
     aggregation: sum, field: http.bytes, group_by: [service]}
  - {id: lat, name: latency, kind: counter, query: "_exists_:http.duration_ms",
     aggregation: histogram, field: http.duration_ms, buckets: [10, 50, 250]}
"""


# Rules scoped to accounts (the generator's globex and platform), one for an account no log
# has, and an unscoped one nothing matches: the fan-out's account slices.
SCOPED_RULES = """\
rules:
  - {id: acct-web, name: acct_web_total, kind: counter, query: "service:payments", account: globex,
     aggregation: count, group_by: [service, http.status]}
  - {id: acct-lat, name: acct_lat, kind: gauge, query: "*", account: platform,
     aggregation: max, field: http.duration_ms, group_by: [region]}
  - {id: acct-sum, name: acct_sum_total, kind: counter, query: "level:error", account: platform,
     aggregation: sum, field: http.duration_ms}
  - {id: acct-none, name: acct_none_total, kind: counter, query: "*", account: nobody-here,
     aggregation: count}
  - {id: none, name: none_total, kind: counter, query: "service:nothing-has-this",
     aggregation: count}
"""
