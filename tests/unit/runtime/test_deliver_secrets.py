"""Secrets and auth of ``l2m deliver`` (issue 53): no credential in any output, name, repr or
error; user info in a URL refused at load; credentials a header cannot carry refused naming
their file or variable; 401/403 retried with the credentials read again (or final with
``auth_failures: refuse``); a 5xx that says "too old" final."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from l2m.config.job import BasicAuth, JobConfig, RemoteWriteEndpoint
from l2m.config.loader import config_from_dict, load_config
from l2m.errors import ConfigError
from l2m.remotewrite.client import Endpoint, Sender, retriable
from l2m.runtime.deliver import client_endpoint, endpoint_name
from tests.unit.remotewrite.test_remotewrite_client import receiver  # noqa: F401  (a fixture)

PASSWORD = "hunter2-pw"


def test_user_info_in_a_url_is_refused_at_load_without_the_password(tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text("kafka: {bootstrap.servers: 'k:1'}\nremote_write:\n  endpoints:\n"
                   f"    - url: https://l2m:{PASSWORD}@mimir.example/api/v1/push\n")
    with pytest.raises(ConfigError) as caught:
        load_config(job)
    assert str(caught.value) == (
        f"{job}:3: remote_write.endpoints.0.url: user info (user:password@) in the URL is "
        "refused: give the credentials as basic_auth (username, password_file or "
        "password_env) or a bearer token (bearer_token_file or bearer_token_env)")
    for url, problem in (("ftp://x/", "not ftp://…"), ("", "got a string")):
        with pytest.raises(ConfigError, match=problem):
            config_from_dict({"kafka": {"bootstrap.servers": "k:1"},
                              "remote_write": {"endpoints": [{"url": url}]}})


def test_an_endpoint_built_in_code_never_shows_its_user_info():
    cfg = RemoteWriteEndpoint(url=f"https://l2m:{PASSWORD}@mimir:8443/push?token={PASSWORD}",
                              headers={"X-Api-Key": PASSWORD})
    assert endpoint_name(cfg) == "mimir:8443"
    with pytest.raises(ConfigError) as caught:
        client_endpoint(cfg)
    assert PASSWORD not in str(caught.value) and "basic_auth" in str(caught.value)
    assert PASSWORD not in repr(cfg)
    job = JobConfig(kafka={"bootstrap.servers": "k:1", "sasl.password": PASSWORD},
                    spark={"spark.hadoop.fs.s3a.secret.key": PASSWORD})
    assert PASSWORD not in repr(job) and "sasl.password" in repr(job)


def test_the_client_endpoint_s_repr_hides_its_headers(tmp_path: Path):
    token = tmp_path / "token"
    token.write_text(PASSWORD + "\n")
    endpoint = client_endpoint(RemoteWriteEndpoint(url="http://x/", bearer_token_file=str(token)))
    assert endpoint.headers["Authorization"] == f"Bearer {PASSWORD}"
    assert PASSWORD not in repr(endpoint) and PASSWORD not in str(endpoint)
    assert "Authorization" in repr(endpoint)


def test_a_credential_a_header_cannot_carry_is_refused_naming_its_source(tmp_path: Path,
                                                                         monkeypatch):
    token = tmp_path / "token"
    token.write_text(f"{PASSWORD}\nsecond line\n")
    with pytest.raises(ConfigError) as caught:
        client_endpoint(RemoteWriteEndpoint(url="http://x/", bearer_token_file=str(token)))
    assert str(caught.value) == (
        f"remote_write endpoint x: bearer token file {token} holds a character an HTTP header "
        "cannot carry (a line break, a control character or non-ASCII): the value is not shown")
    monkeypatch.setenv("RW_TOKEN", f"{PASSWORD}\x01")
    with pytest.raises(ConfigError, match="bearer token environment variable RW_TOKEN holds"):
        client_endpoint(RemoteWriteEndpoint(url="http://x/", bearer_token_env="RW_TOKEN"))
    with pytest.raises(ConfigError, match="headers: the value of X-Key holds") as caught:
        client_endpoint(RemoteWriteEndpoint(url="http://x/", headers={"X-Key": f"a\n{PASSWORD}"}))
    assert PASSWORD not in str(caught.value)
    # A password goes in base64: any one fits.
    monkeypatch.setenv("RW_PASSWORD", "pä ss")
    basic = client_endpoint(RemoteWriteEndpoint(
        url="http://x/", basic_auth=BasicAuth(username="l2m", password_env="RW_PASSWORD")))
    assert basic.headers["Authorization"] == "Basic " + base64.b64encode(
        "l2m:pä ss".encode()).decode()
    with pytest.raises(ConfigError, match="tenant_header 'X Org' is not an HTTP header name"):
        client_endpoint(RemoteWriteEndpoint(url="http://x/", tenant_header="X Org"))
    with pytest.raises(ConfigError, match="tenant 'ü' cannot go in an HTTP header"):
        client_endpoint(RemoteWriteEndpoint(url="http://x/", tenants={"a": "ü"}))


def _sender(server, waits: list[float], fresh: list[dict[str, str]] | None = None,
            auths: list[int] | None = None, **kw) -> Sender:
    host, port = server.server_address[:2]
    return Sender(Endpoint(f"http://{host}:{port}/api/v1/write",
                           headers={"Authorization": "Bearer old"}, **kw),
                  sleep=waits.append, on_auth=(auths if auths is not None else []).append,
                  credentials=(lambda: fresh.pop(0)) if fresh is not None else None)


def test_401_and_403_are_retried_with_the_credentials_read_again(receiver):  # noqa: F811
    receiver.answers = [(401, {}), (403, {}), (401, {})]
    waits: list[float] = []
    auths: list[int] = []
    fresh = [{"Authorization": "Bearer a"}, {"Authorization": "Bearer b"},
             {"Authorization": "Bearer new"}]
    delivery = _sender(receiver, waits, fresh, auths).send(b"x")
    assert (delivery.status, delivery.attempts) == (204, 4)
    assert auths == [401, 403, 401]
    assert waits == [0.03, 0.06, 0.12]  # the 5xx backoff
    assert [h["Authorization"] for h, _ in receiver.seen] == [
        "Bearer old", "Bearer a", "Bearer b", "Bearer new"]


def test_with_auth_failures_refuse_a_401_is_final(receiver):  # noqa: F811
    receiver.answers = [(401, {})]
    waits: list[float] = []
    delivery = _sender(receiver, waits, auth_failures="refuse").send(b"x")
    assert (delivery.status, delivery.attempts, waits) == (401, 1, [])


def test_a_5xx_saying_too_old_is_final():
    assert not retriable(500, "too old sample")  # Prometheus 2.42
    assert not retriable(500, "out of bounds")
    assert retriable(500, "") and retriable(503, "overloaded") and retriable(429)
    assert not retriable(400, "") and not retriable(401)
