"""Series caps (SPEC §7) as plain values: read from the job configuration
(:mod:`l2m.config.job`) or backfill's flags, checked against rules by the rule loader
(:mod:`l2m.rules.loader`, a rule's ``max_series``) and enforced by the admission of new series
(:mod:`l2m.engine.admission`).

Input: none. Output: :class:`SeriesLimits` and :class:`Limits`; :func:`check_label_limit`
refuses a label value limit too short to keep anything of a cut value."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from l2m import defaults
from l2m.errors import ConfigError

# The label that marks a rule's overflow series, in place of its group-by labels
# (l2m.engine.admission); no rule may use it.
OVERFLOW_LABEL = ("l2m_overflow", "true")


@dataclass(frozen=True)
class SeriesLimits:
    """Live series caps; 0 means no cap. ``per_rule``: one rule's series; ``per_metric``:
    one metric name's series among an account's rules; ``per_account``: all of an account's
    series."""

    per_rule: int = defaults.MAX_SERIES_PER_RULE
    per_metric: int = defaults.MAX_SERIES_PER_METRIC
    per_account: int = defaults.MAX_SERIES_PER_ACCOUNT


@dataclass(frozen=True)
class Limits:
    """The job's caps and each account's overrides: ``(account, {key: value})`` pairs, where a
    key is a :class:`SeriesLimits` field and an absent key keeps the job's."""

    series: SeriesLimits = SeriesLimits()
    accounts: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    def for_account(self, account: str | None) -> SeriesLimits:
        """The caps that apply to an account's rules (the job's, with its overrides)."""
        if account is None:
            return self.series
        return self._by_account.get(account, self.series)

    @functools.cached_property
    def _by_account(self) -> dict[str, SeriesLimits]:
        # Built once: the loader and rule_caps ask per rule (100,000 rules, as many overrides).
        return {account: replace(self.series, **dict(override))
                for account, override in self.accounts}


def check_label_limit(limit: int) -> None:
    """Refuse a label value limit too short to keep anything of a cut value (a usage error,
    code CONFIG)."""
    least = defaults.MIN_LABEL_VALUE_LENGTH
    if limit < least:
        raise ConfigError(f"the label value limit must be at least {least} characters, "
                          f"got {limit}")
