"""Who a rule belongs to in tenant mode (SPEC §7), as a plain value: read from the job
configuration (:mod:`l2m.config.job`), applied by the rule loader (:mod:`l2m.rules.loader`).

Input: none. Output: :class:`Tenancy`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tenancy:
    """Tenant mode (SPEC §7): a rule's account is where it was submitted — the directory
    ``<rules root>/<account>/`` (one ConfigMap per account on Kubernetes) — never its own text.
    Its ``account`` key may only repeat that account; its ``target_account`` defaults to the
    account and may only be the account or one of ``targets[account]``; its id is qualified
    by the account (``<account>/<id>``), so tenants cannot clash over ids."""

    targets: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (account, extra targets) pairs

    def allowed_targets(self, account: str) -> tuple[str, ...]:
        return (account, *dict(self.targets).get(account, ()))
