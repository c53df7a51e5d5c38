"""Tenant mode (issue 20, deliverable 4): a rule's account is the directory it was submitted
in, never its own text; it may not name another account nor write to a target the job does
not allow that account; ids are the account's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from l2m.errors import RuleValidationError
from l2m.policy.tenancy import Tenancy
from l2m.rules.loader import load_rules

COUNT = "kind: counter, query: 'level:error', aggregation: count"


def submit(root: Path, account: str, *specs: str, file: str = "rules.yaml") -> Path:
    folder = root / account
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text("rules:\n" + "".join(f"  - {{{s}}}\n" for s in specs))
    return path


def problems(root: Path, tenancy: Tenancy | None = None
             ) -> list[tuple[str, str, str | None]]:
    with pytest.raises(RuleValidationError) as info:
        load_rules([root], tenancy=tenancy or Tenancy())
    return [(p.code, Path(p.file).name, p.rule_id) for p in info.value.problems]


def test_a_rule_is_bound_to_its_directory_s_account(tmp_path):
    submit(tmp_path, "acme", f"id: errors, name: errors_total, {COUNT}")
    submit(tmp_path, "globex", f"id: errors, name: errors_total, {COUNT}",
           f"id: own, name: own_total, {COUNT}, account: globex")
    ruleset = load_rules([tmp_path], tenancy=Tenancy())
    assert [(r.id, r.account, r.target_account) for r in ruleset.rules] == [
        ("acme/errors", "acme", "acme"), ("globex/errors", "globex", "globex"),
        ("globex/own", "globex", "globex")]


def test_a_rule_may_not_name_another_account(tmp_path):
    submit(tmp_path, "acme", f"id: spy, name: spy_total, {COUNT}, account: globex")
    assert problems(tmp_path) == [("ACCOUNT_MISMATCH", "rules.yaml", "spy")]


def test_targets_are_the_account_and_what_the_job_allows(tmp_path):
    submit(tmp_path, "acme", f"id: a, name: a_total, {COUNT}, target_account: shared")
    assert problems(tmp_path) == [("TARGET_NOT_ALLOWED", "rules.yaml", "a")]
    ruleset = load_rules([tmp_path], tenancy=Tenancy(targets=(("acme", ("shared",)),)))
    assert ruleset.rules[0].target_account == "shared"


def test_rule_files_outside_an_account_directory_are_refused(tmp_path):
    (tmp_path / "loose.yaml").write_text(f"rules:\n  - {{id: x, name: x_total, {COUNT}}}\n")
    submit(tmp_path, "acme", f"id: a, name: a_total, {COUNT}")
    assert problems(tmp_path) == [("RULE_OUTSIDE_ACCOUNT", "loose.yaml", None)]


def test_ids_repeat_freely_across_accounts_but_not_within_one(tmp_path):
    submit(tmp_path, "acme", f"id: a, name: a_total, {COUNT}")
    submit(tmp_path, "acme", f"id: a, name: b_total, {COUNT}", file="more.yaml")
    assert problems(tmp_path) == [("DUPLICATE_ID", "rules.yaml", "a")]


def test_series_of_two_tenants_never_collide_but_shared_targets_can(tmp_path):
    submit(tmp_path, "acme", f"id: a, name: m_total, {COUNT}")
    submit(tmp_path, "globex", f"id: a, name: m_total, {COUNT}")
    load_rules([tmp_path], tenancy=Tenancy())  # each writes its own account
    shared = Tenancy(targets=(("acme", ("pool",)), ("globex", ("pool",))))
    submit(tmp_path, "acme", f"id: p, name: p_total, {COUNT}, target_account: pool",
           file="p.yaml")
    submit(tmp_path, "globex", f"id: p, name: p_total, {COUNT}, target_account: pool",
           file="p.yaml")
    assert problems(tmp_path, shared) == [("SERIES_COLLISION", "p.yaml", "globex/p")]


def test_a_configmap_per_account_loads_each_rule_once(tmp_path):
    # a ConfigMap mount: the files are symlinks into a hidden, timestamped folder
    folder = tmp_path / "acme"
    data = folder / "..2026_11_24_00_00_00.1"
    data.mkdir(parents=True)
    (data / "rules.yaml").write_text(f"rules:\n  - {{id: a, name: a_total, {COUNT}}}\n")
    (folder / "..data").symlink_to(data.name)
    (folder / "rules.yaml").symlink_to("..data/rules.yaml")
    ruleset = load_rules([tmp_path], tenancy=Tenancy())
    assert [r.id for r in ruleset.rules] == ["acme/a"]


def test_validate_takes_tenant_mode_and_extra_targets(tmp_path):
    from tests.support.tools import cli

    submit(tmp_path, "acme", f"id: a, name: a_total, {COUNT}, target_account: shared")
    res = cli("validate", "--tenants", str(tmp_path))
    assert res.returncode == 1 and "[TARGET_NOT_ALLOWED]" in res.stderr
    res = cli("validate", "--tenants", "--tenant-target", "acme=shared", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ok: 1 rules")
    res = cli("validate", str(tmp_path))  # open mode: the account's directory means nothing
    assert res.returncode == 0, res.stderr


def test_the_job_config_selects_tenant_mode_and_targets():
    from l2m.config.loader import config_from_dict

    open_job = config_from_dict({"kafka": {"bootstrap.servers": "k:9092"}})
    assert open_job.rule_tenancy is None
    job = config_from_dict({"kafka": {"bootstrap.servers": "k:9092"},
                            "tenancy": {"mode": "accounts", "targets": {"acme": ["shared"]}}})
    assert job.rule_tenancy == Tenancy(targets=(("acme", ("shared",)),))
    assert job.rule_tenancy.allowed_targets("acme") == ("acme", "shared")
    assert job.rule_tenancy.allowed_targets("globex") == ("globex",)


@pytest.mark.parametrize(("targets", "shown"), [
    ({"acme": ["東京"]}, "account '東京' holds '東' (U+6771) at character 1"),
    ({"acme": ["a\nb"]}, "account 'a\\nb' holds (U+000A) at character 2"),
    ({"a b": ["shared"]}, "account 'a b' holds (U+0020) at character 2"),
    ({"acme": [".."]}, "account '..' is reserved"),
])
def test_the_job_config_refuses_accounts_a_tenant_header_cannot_carry(targets, shown):
    from l2m.config.loader import config_from_dict
    from l2m.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        config_from_dict({"kafka": {"bootstrap.servers": "k:9092"},
                          "tenancy": {"mode": "accounts", "targets": targets}})
    assert f"tenancy.targets: {shown} (an account is a Mimir tenant ID" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_validate_refuses_a_tenant_target_a_header_cannot_carry(tmp_path):
    from tests.support.tools import cli

    res = cli("validate", "--tenants", "--tenant-target", "acme=a b", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.splitlines()[-1] == (
        "l2m validate: error: argument --tenant-target: account 'a b' holds (U+0020) at "
        'character 2 (docs/rules.md, "Accounts")')


# Run in a fresh interpreter: forking the test process, which may hold the suite's Spark
# session and its threads, is what load_rules' callers must not do (l2m.cli: validate only).
_COMPARE = """
import json, sys
from pathlib import Path
from l2m.errors import RuleValidationError
from l2m.rules.loader import load_rules
from l2m.policy.tenancy import Tenancy

def load(workers):
    try:
        ruleset = load_rules([Path(sys.argv[1])], tenancy=Tenancy(), workers=workers)
    except RuleValidationError as exc:
        return [[p.code, p.file, p.line, p.column, p.rule_id, p.message]
                for p in exc.problems]
    return [[r.id, r.account, r.file, r.line, repr(r)] for r in ruleset.rules]

print(json.dumps([load(1), load(2), load(3)]))
"""


def _loaded(root: Path) -> list[list[list[object]]]:
    out = subprocess.run([sys.executable, "-c", _COMPARE, str(root)], capture_output=True,
                         text=True, check=True, timeout=300)
    return json.loads(out.stdout)


def test_files_read_by_several_processes_give_what_one_process_gives(tmp_path):
    """`l2m validate` reads files in forked processes (load_rules' ``workers``): the same
    rules and the same problems in the same order, bad files among them — a query that does
    not parse, a YAML error, another account named, an id twice, a file past the size limit
    — as one process reading them in turn."""
    from l2m.rules.loader import PARALLEL_FILES
    from l2m.yamlio.yamlsafe import MAX_FILE_BYTES

    accounts = [f"a{i:04d}" for i in range(4 * PARALLEL_FILES + 3)]
    for i, account in enumerate(accounts):
        specs = [f"id: r{j}, name: r{j}_total, {COUNT}" for j in range(3)]
        if i % 17 == 3:
            specs.append("id: bad, name: bad_total, kind: counter, query: 'level:(', "
                         "aggregation: count")
        if i % 23 == 5:
            specs.append(f"id: r0, name: again_total, {COUNT}")
        if i % 29 == 7:
            specs.append(f"id: other, name: other_total, {COUNT}, account: someone-else")
        submit(tmp_path, account, *specs)
        if i % 31 == 11:
            (tmp_path / account / "broken.yaml").write_text("rules: [ {id: x\n")
    (tmp_path / accounts[-1] / "huge.yaml").write_text("#" * (MAX_FILE_BYTES + 1))

    one, two, three = _loaded(tmp_path)
    assert {code for code, *_ in one} >= {"DUPLICATE_ID", "ACCOUNT_MISMATCH", "FILE_TOO_LARGE",
                                          "YAML_SYNTAX"}
    assert two == one
    assert three == one

    # Without the bad files: the same rules, in the same order, bound to their accounts.
    for account in accounts:
        for extra in ("broken.yaml", "huge.yaml"):
            (tmp_path / account / extra).unlink(missing_ok=True)
        submit(tmp_path, account, *[f"id: r{j}, name: r{j}_total, {COUNT}" for j in range(3)])
    one, two, three = _loaded(tmp_path)
    assert len(one) == 3 * len(accounts)
    assert one[0][:2] == ["a0000/r0", "a0000"]
    assert two == one
    assert three == one
