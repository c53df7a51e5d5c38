"""Who a rule belongs to in tenant mode (SPEC §7), as a plain value: read from the job
configuration (:mod:`l2m.config.job`), applied by the rule loader (:mod:`l2m.rules.loader`);
and what an account may be called (:func:`account_problem`), checked by both.

Input: none. Output: :class:`Tenancy`, :func:`account_problem`."""

from __future__ import annotations

import re
from dataclasses import dataclass

# An account (a rule's `account`, its `target_account`, a tenant's directory) becomes a
# tenant header (`X-Scope-OrgID`) and a label value downstream: it must be one that every
# receiver takes as it is. Mimir's tenant IDs (Cortex, Loki and Pyroscope share them): a
# header cannot carry a newline or non-ASCII text, and a tenant Mimir refuses would stop
# that target's delivery for good.
ACCOUNT_CHARS = "A-Z a-z 0-9 ! - _ . * ' ( )"
_ACCOUNT_RE = re.compile(r"[A-Za-z0-9!\-_.*'()]+")
_BAD_CHAR = re.compile(r"[^A-Za-z0-9!\-_.*'()]")
MAX_ACCOUNT_LENGTH = 150  # characters, and bytes: every allowed character is one byte
# Not tenants: path segments (Mimir refuses them for its storage paths) and Mimir's own.
RESERVED_ACCOUNTS = (".", "..", "__mimir_cluster")
_SHOWN = 40  # characters of a refused account quoted in its message


def account_problem(value: str) -> str | None:
    """Why ``value`` cannot be an account or a target account, in a few words that follow
    its quoted name (``'東京' holds '東' (U+6771) at character 1``), or None when it can:
    1 to :data:`MAX_ACCOUNT_LENGTH` characters from :data:`ACCOUNT_CHARS`, none of
    :data:`RESERVED_ACCOUNTS` (Mimir's tenant IDs, docs/rules.md "Accounts")."""
    if _ACCOUNT_RE.fullmatch(value) and len(value) <= MAX_ACCOUNT_LENGTH \
            and value not in RESERVED_ACCOUNTS:
        return None
    if not value:
        return "is empty"
    bad = _BAD_CHAR.search(value)
    if bad is not None:
        char = bad.group()
        shown = f"{char!r} " if char.isprintable() and char != " " else ""
        return f"holds {shown}(U+{ord(char):04X}) at character {bad.start() + 1}"
    if len(value) > MAX_ACCOUNT_LENGTH:
        return f"is {len(value)} characters long"
    return "is reserved"


def invalid_account(value: str, what: str = "") -> dict[str, object] | None:
    """The parameters of an ``INVALID_ACCOUNT`` problem (:mod:`l2m.errors`) for ``value``,
    its message starting with ``what`` (``"account directory "``; a rule's key names itself),
    or None when ``value`` is a valid account (:func:`account_problem`)."""
    reason = account_problem(value)
    if reason is None:
        return None
    return {"what": what, "value": shown_account(value), "reason": reason,
            "limit": MAX_ACCOUNT_LENGTH, "chars": ACCOUNT_CHARS,
            "reserved": ", ".join(repr(r) for r in RESERVED_ACCOUNTS[:-1]) +
            f" or {RESERVED_ACCOUNTS[-1]!r}"}


def shown_account(value: str) -> str:
    """An account as a message quotes it: escaped (no line break or control character
    reaches the output) and at most :data:`_SHOWN` characters, then ``…``."""
    return repr(value[:_SHOWN]) + ("…" if len(value) > _SHOWN else "")


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
