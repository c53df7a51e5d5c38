"""Accounts never merge at an endpoint (issue 53): when no tenant header keeps two accounts
apart — no header at all, a ``tenants:`` map folding accounts into one tenant, a
``default_tenant`` shared with an account — each account's samples carry the account as the
label ``account_label`` (l2m_account by default); with ``account_label: null`` such a
configuration is refused when ``l2m deliver`` starts, naming the accounts."""

from __future__ import annotations

import pytest

from l2m.config.job import RemoteWriteEndpoint
from l2m.config.loader import config_from_dict
from l2m.errors import ConfigError
from l2m.remotewrite.outbox import ACCOUNT_LABEL_TAKEN, Outbox, Tally
from l2m.runtime.deliver import route, shared_tenants
from tests.unit.remotewrite.test_remotewrite_outbox import W, sample, sent


def _deliver(cfg: RemoteWriteEndpoint, *accounts: str | None
             ) -> tuple[list[tuple[str | None, list[dict[str, str]]]], Tally]:
    tally = Tally()
    box = Outbox(route(cfg), 100, tally)
    for account in accounts:
        box.add(sample(account=account, service="api"), record_ms=W, mark=None)
    return [(tenant, [labels for labels, _ in series]) for tenant, series in sent(box)], tally


def test_without_a_tenant_header_every_account_s_samples_carry_their_account():
    got, _ = _deliver(RemoteWriteEndpoint(url="http://x/", tenant_header=None),
                      "acme", "globex", None)
    assert got == [(None, [  # series in label order
        {"__name__": "x_total", "service": "api", "l2m_account": "acme"},
        {"__name__": "x_total", "service": "api", "l2m_account": "globex"},
        {"__name__": "x_total", "service": "api"}])]  # no account (l2m's own): no label
    # One account only: nothing to keep apart.
    got, _ = _deliver(RemoteWriteEndpoint(url="http://x/", tenant_header=None,
                                          accounts=("acme",)), "acme")
    assert got == [(None, [{"__name__": "x_total", "service": "api"}])]


def test_only_the_tenants_accounts_share_carry_the_label_and_its_name_is_configurable():
    cfg = RemoteWriteEndpoint(url="http://x/", tenants={"acme": "shared", "globex": "shared",
                                                        "initech": "ini"},
                              default_tenant="ops", account_label="team")
    # Without an accounts list, an account named like a tenant of the map reaches it too.
    assert shared_tenants(cfg) == {
        "shared": ["acme", "globex", "any account named shared"],
        "ini": ["initech", "any account named ini"],
        "ops": ["any account named ops", "(samples without an account)"]}
    got, _ = _deliver(cfg, "acme", "globex", "initech", "umbrella", "ini", None)
    assert got == [
        ("ini", [{"__name__": "x_total", "service": "api", "team": "ini"},
                 {"__name__": "x_total", "service": "api", "team": "initech"}]),
        ("ops", [{"__name__": "x_total", "service": "api"}]),
        ("shared", [{"__name__": "x_total", "service": "api", "team": "acme"},
                    {"__name__": "x_total", "service": "api", "team": "globex"}]),
        ("umbrella", [{"__name__": "x_total", "service": "api"}])]
    # With one, only the folds it allows: ini is initech's alone.
    listed = RemoteWriteEndpoint(url="http://x/", tenants=cfg.tenants, account_label="team",
                                 accounts=("acme", "globex", "initech", "umbrella"))
    assert shared_tenants(listed) == {"shared": ["acme", "globex"]}


def test_an_account_not_named_but_named_like_a_tenant_never_merges_with_its_accounts():
    """tenants: {acme: globex} without accounts: account globex goes to tenant globex too, so
    both carry the label; with account_label: null the configuration is refused."""
    got, _ = _deliver(RemoteWriteEndpoint(url="http://x/", tenants={"acme": "globex"}),
                      "acme", "globex")
    assert got == [("globex", [
        {"__name__": "x_total", "service": "api", "l2m_account": "acme"},
        {"__name__": "x_total", "service": "api", "l2m_account": "globex"}])]
    with pytest.raises(ConfigError) as refused:
        route(RemoteWriteEndpoint(url="http://x/", name="m", account_label=None,
                                  tenants={"acme": "globex"}))
    assert str(refused.value) == (
        "remote_write endpoint m: accounts acme, any account named globex go to one tenant, "
        "globex, where their series of one name and labels would merge; set account_label "
        "(l2m_account by default) to keep them apart, or list the endpoint's accounts under "
        "accounts")
    # A key mapped to itself, or listed accounts that cannot collide: nothing shared.
    assert shared_tenants(RemoteWriteEndpoint(url="http://x/", tenants={"acme": "acme"})) == {}
    assert route(RemoteWriteEndpoint(url="http://x/", account_label=None, accounts=("acme",),
                                     tenants={"acme": "globex"})).account_label is None
    # An account whose tenant is the default tenant shares it with l2m's own samples.
    got, _ = _deliver(RemoteWriteEndpoint(url="http://x/", default_tenant="ops",
                                          tenants={"acme": "ops"}), "acme", None)
    assert got == [("ops", [{"__name__": "x_total", "service": "api", "l2m_account": "acme"},
                            {"__name__": "x_total", "service": "api"}])]


def test_a_sample_that_already_has_the_label_is_skipped():
    tally = Tally()
    box = Outbox(route(RemoteWriteEndpoint(url="http://x/", tenant_header=None)), 100, tally)
    box.add(sample(account="acme", l2m_account="x"), record_ms=W, mark=None)
    box.add(sample(account=None, l2m_account="x"), record_ms=W, mark=None)  # not labelled
    assert tally.skipped == {ACCOUNT_LABEL_TAKEN: 1}
    assert sent(box) == [(None, [({"__name__": "x_total", "l2m_account": "x"}, [(W, 1.0)])])]


@pytest.mark.parametrize(("cfg", "message"), [
    (RemoteWriteEndpoint(url="http://x/", name="prom", tenant_header=None, account_label=None),
     "remote_write endpoint prom: tenant_header is null, so every account's samples go to one "
     "tenant"),
    (RemoteWriteEndpoint(url="http://x/", name="m", account_label=None,
                         tenants={"acme": "t", "globex": "t", "initech": "i"}),
     "remote_write endpoint m: accounts acme, globex, any account named t go to one tenant, "
     "t, where"),
    (RemoteWriteEndpoint(url="http://x/", name="m", account_label=None,
                         tenants={"acme": "globex"}, accounts=("acme", "globex")),
     "accounts acme, globex go to one tenant, globex"),
    (RemoteWriteEndpoint(url="http://x/", name="m", account_label=None, default_tenant="acme",
                         accounts=("acme",)),
     r"accounts acme, \(samples without an account\) go to one tenant, acme"),
])
def test_with_account_label_null_a_folding_configuration_is_refused_naming_the_accounts(
        cfg, message):
    with pytest.raises(ConfigError, match=message):
        route(cfg)


def test_account_label_null_is_fine_where_nothing_folds_and_a_bad_name_is_refused():
    r = route(RemoteWriteEndpoint(url="http://x/", account_label=None,
                                  tenants={"acme": "acme-prod"}, accounts=("acme", "globex")))
    assert r.account_label is None
    assert route(RemoteWriteEndpoint(url="http://x/", tenant_header=None, account_label=None,
                                     accounts=("acme",))).account_label is None
    for bad in ("__account", "a-b", 5):
        with pytest.raises(ConfigError, match=r"remote_write.endpoints.0.account_label: "
                                              r"expected a Prometheus label name"):
            config_from_dict({"kafka": {"bootstrap.servers": "k:1"}, "remote_write": {
                "endpoints": [{"url": "http://x/", "account_label": bad}]}})
    cfg = config_from_dict({"kafka": {"bootstrap.servers": "k:1"}, "remote_write": {
        "endpoints": [{"url": "http://x/", "account_label": None}]}})
    assert cfg.remote_write.endpoints[0].account_label is None
