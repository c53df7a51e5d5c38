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
