"""Tenant mode end to end (issue 20, deliverable 4): a rule in one account's directory counts
only that account's logs — whatever its query asks — in backfill and in the streaming job."""

from __future__ import annotations

import json
from pathlib import Path

from l2m.batch.backfill import run_backfill
from l2m.policy.tenancy import Tenancy
from l2m.rules.loader import load_rules

T0 = 1795341600000  # 2026-11-22T10:00:00Z


def logs() -> list[bytes]:
    """5 logs of acme, 3 of globex, 2 of no account."""
    accounts = ["acme"] * 5 + ["globex"] * 3 + [None] * 2
    out = []
    for i, account in enumerate(accounts):
        log: dict[str, object] = {"@timestamp": T0 + i * 1000, "level": "error",
                                  "service": f"s{i % 2}"}
        if account is not None:
            log["account"] = account
        out.append(json.dumps(log).encode())
    return out


def submit(root: Path) -> Path:
    count = "kind: counter, aggregation: count"
    for account in ("acme", "globex"):
        (root / account).mkdir(parents=True)
        (root / account / "rules.yaml").write_text(
            "rules:\n"
            f"  - {{id: all, name: logs_total, {count}, query: '*'}}\n"
            # asks for another tenant's logs: sees none of them
            f"  - {{id: spy, name: spied_total, {count}, query: 'account:globex OR "
            f"account:acme'}}\n")
    return root


def totals(samples: list[dict]) -> dict[tuple[str, str | None], float]:
    return {(s["rule"], s["account"]): s["value"] for s in samples
            if not s["rule"].startswith("l2m-")}


EXPECTED = {("acme/all", "acme"): 5.0, ("acme/spy", "acme"): 5.0,
            ("globex/all", "globex"): 3.0, ("globex/spy", "globex"): 3.0}


def test_backfill_counts_each_tenant_s_own_logs_only(spark, tmp_path):
    rules = load_rules([submit(tmp_path / "rules")], tenancy=Tenancy()).rules
    source = tmp_path / "logs.jsonl"
    source.write_bytes(b"\n".join(logs()) + b"\n")
    out = tmp_path / "out.jsonl"
    run_backfill(spark, rules, [str(source)], out, progress=False)
    assert totals([json.loads(line) for line in out.read_text().splitlines()]) == EXPECTED


def test_streaming_counts_each_tenant_s_own_logs_only(stream_test, tmp_path):
    rules = load_rules([submit(tmp_path / "rules")], tenancy=Tenancy()).rules
    job = stream_test(rules)
    job.add(logs(), record_ts=T0)
    job.process()
    assert totals(job.samples()) == EXPECTED
