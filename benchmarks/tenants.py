"""Rules by the thousand: ``accounts`` tenants, each with the rules a team writes for its own
services (errors, 5xx, latency histogram, bytes, checkout failures, payments, declines,
timeouts, slow requests, auth failures), from templates varied per tenant — services,
thresholds, buckets and group-by differ — and scoped to the tenant's account.

``python -m benchmarks.tenants --accounts 1000 --out rules-10k.yaml`` writes the rule file
the 10,000-rule scenario validates and runs; logs for it come from
``GeneratorConfig(accounts=1000)``."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import yaml

from l2m.dev.generator import SERVICES, tenant

RULES_PER_ACCOUNT = 10


def tenant_rules(k: int, rng: random.Random) -> list[dict[str, Any]]:
    """The ten rules of tenant ``k``."""
    account = tenant(k)
    service = rng.choice(sorted(SERVICES))
    other = rng.choice(sorted(set(SERVICES) - {service}))
    slow = rng.choice([250, 500, 1000, 2000])
    bounds = rng.choice([[10, 50, 100, 500, 1000], [25, 100, 250, 1000], [5, 20, 80, 320]])
    word = rng.choice(["timeout", "refused", "OutOfMemoryError", "killed"])

    def rule(name: str, kind: str, query: str, aggregation: str,
             **extra: Any) -> dict[str, Any]:
        return {"id": f"{account}-{name}", "name": f"{name.replace('-', '_')}"
                + ("_total" if kind == "counter" else ""), "kind": kind, "query": query,
                "aggregation": aggregation, "account": account, "target_account": account,
                **extra}

    return [
        rule("errors", "counter", "level:error", "count", group_by=["service"]),
        rule("server-errors", "counter", f"service:{service} AND http.status:>=500", "count",
             group_by=["http.status"]),
        rule("latency", "gauge", f'service:{service} AND NOT http.path:"/healthz"',
             "histogram", field="http.duration_ms", buckets=bounds),
        rule("bytes", "counter", "_exists_:http.bytes", "sum", field="http.bytes",
             group_by=["service"]),
        rule("checkout-failures", "counter", "service:checkout AND level:(error OR warn)",
             "count"),
        rule("payments", "counter", "event:payment.captured", "sum", field="payment.amount",
             group_by=["payment.currency"]),
        rule("declines", "counter", "event:payment.declined", "count",
             group_by=["payment.decline_code"]),
        rule("mentions", "counter", f"message:{word}", "count", group_by=["service"]),
        rule("slow", "gauge", f"service:({service} OR {other}) AND http.duration_ms:>{slow}",
             "max", field="http.duration_ms", group_by=["service"]),
        rule("auth-failures", "counter", "service:auth AND http.status:(401 OR 403)",
             "count"),
    ]


def rules_document(accounts: int, seed: int = 10) -> dict[str, Any]:
    rng = random.Random(seed)
    return {"rules": [r for k in range(accounts) for r in tenant_rules(k, rng)]}


def write_rules(path: Path, accounts: int, seed: int = 10) -> Path:
    """Write the tenants' rules (``accounts`` × 10) to ``path``."""
    path.write_text(yaml.safe_dump(rules_document(accounts, seed), sort_keys=False,
                                   width=120))
    return path


def write_tenant_dirs(root: Path, accounts: int, seed: int = 10) -> Path:
    """Write the same rules as tenant mode takes them: ``root/<account>/rules.yaml`` (ids
    become ``<account>/<id>``). 100,000 rules are 20.8 MB, over the 10 MB limit of one rule
    file; a service of that size keeps them per tenant anyway."""
    rng = random.Random(seed)
    for k in range(accounts):
        rules = tenant_rules(k, rng)
        folder = root / tenant(k)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "rules.yaml").write_text(yaml.safe_dump({"rules": rules}, sort_keys=False,
                                                          width=120))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tenant-dirs", action="store_true",
                        help="write OUT/<account>/rules.yaml (for `l2m validate --tenants OUT`)")
    args = parser.parse_args()
    if args.tenant_dirs:
        write_tenant_dirs(args.out, args.accounts, args.seed)
    else:
        write_rules(args.out, args.accounts, args.seed)
    print(f"{args.accounts * RULES_PER_ACCOUNT} rules for {args.accounts} accounts → {args.out}")


if __name__ == "__main__":
    main()
