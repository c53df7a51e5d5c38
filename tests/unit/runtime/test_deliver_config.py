"""``l2m deliver``'s endpoints from the job file (l2m.runtime.deliver): names, credentials
read from a file or the environment when it starts, clear errors for what is missing."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from l2m.config.job import BasicAuth, JobConfig, RemoteWriteEndpoint
from l2m.config.loader import config_from_dict
from l2m.errors import ConfigError
from l2m.runtime.deliver import client_endpoint, deliver, endpoint_name, route


def test_an_endpoint_is_named_by_its_host_unless_named():
    assert endpoint_name(RemoteWriteEndpoint(url="https://mimir:8080/api/v1/push")) == "mimir:8080"
    assert endpoint_name(RemoteWriteEndpoint(url="http://x/", name="ops")) == "ops"
    # As before user info was refused: the host's case kept, so the consumer group
    # <group_id>-<name> of an existing deployment is unchanged.
    assert endpoint_name(RemoteWriteEndpoint(url="http://Prom.Example:9090/api/v1/write")) == \
        "Prom.Example:9090"
    assert endpoint_name(RemoteWriteEndpoint(url="http://u:p@w@[::1]:9/w")) == "[::1]:9"


def test_credentials_come_from_a_file_or_the_environment(tmp_path: Path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    bearer = client_endpoint(RemoteWriteEndpoint(url="http://x/", bearer_token_file=str(token)))
    assert bearer.headers["Authorization"] == "Bearer s3cret"
    monkeypatch.setenv("RW_PASSWORD", "pw")
    basic = client_endpoint(RemoteWriteEndpoint(
        url="http://x/", basic_auth=BasicAuth(username="l2m", password_env="RW_PASSWORD")))
    assert basic.headers["Authorization"] == "Basic " + base64.b64encode(b"l2m:pw").decode()
    with pytest.raises(ConfigError, match=r"endpoint x: bearer token file .*/nope: cannot read"):
        client_endpoint(RemoteWriteEndpoint(url="http://x/",
                                            bearer_token_file=str(tmp_path / "nope")))
    monkeypatch.delenv("RW_PASSWORD")
    with pytest.raises(ConfigError, match="environment variable RW_PASSWORD is not set"):
        client_endpoint(RemoteWriteEndpoint(
            url="http://x/", basic_auth=BasicAuth(username="l2m", password_env="RW_PASSWORD")))


def test_what_delivery_cannot_run_with_is_one_clear_error():
    with pytest.raises(ConfigError, match="no endpoints configured"):
        deliver(JobConfig())
    with pytest.raises(ConfigError, match="url is required"):
        client_endpoint(RemoteWriteEndpoint(name="a"))
    with pytest.raises(ConfigError, match=r"remote_write.endpoints.0: unknown key\(s\): tenant"):
        config_from_dict({"kafka": {"bootstrap.servers": "k:1"},
                          "remote_write": {"endpoints": [{"url": "http://x/", "tenant": "a"}]}})
    with pytest.raises(ConfigError, match=r"publish_delay .* must be at most grace"):
        config_from_dict({"kafka": {"bootstrap.servers": "k:1"}, "grace": "1 minute",
                          "publish_delay": "2 minutes"})


def test_the_route_of_an_endpoint():
    r = route(RemoteWriteEndpoint(url="http://x/", tenants={"a": "t"}, accounts=("a", "b"),
                                  default_tenant="ops"))
    assert (r.tenant("a"), r.tenant("b"), r.tenant(None)) == ("t", "b", "ops")
    assert route(RemoteWriteEndpoint(url="http://x/", tenant_header=None)).tenant("a") is None
