"""Only holders of an account's API key get in; keys are stored hashed."""
from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from sqlalchemy import text

from platform_svc.api import auth
from tests.helpers import UNREACHED_RATE_LIMIT, authed_client, cluster_body, make_account
from tooling.testing import assert_problem, console_script


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer not-a-key",
        "Bearer 0123456789abcdef.wrong-secret",
        "Bearer 0123456789abcdef" + "0" * 40 + ".too-long-an-id",
        "Bearer caf\u00e9.non-ascii-id",
        "Bearer ../../etc.passwd",
        "Basic dXNlcjpwYXNz",
    ],
)
def test_requests_without_a_valid_key_are_401(app, client, cluster, authorization):
    anonymous = app.test_client()
    headers = {} if authorization is None else {"Authorization": authorization}
    url = f"/v1/clusters/{cluster['id']}"

    responses = [
        anonymous.get("/v1/clusters", headers=headers),
        anonymous.post("/v1/clusters", headers=headers, json=cluster_body()),
        anonymous.get(url, headers=headers),
        anonymous.patch(url, headers=headers, json={"plan": "memory-8"}),
        anonymous.delete(url, headers=headers),
    ]

    for response in responses:
        assert_problem(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert client.get(url).get_json() == cluster  # untouched


def test_a_key_with_the_right_id_but_a_wrong_secret_is_401(app, account):
    key_id, _, secret = account[1].partition(".")
    forged = f"{key_id}.{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}"

    assert_problem(authed_client(app, forged).get("/v1/clusters"), 401, "unauthorized")
    assert authed_client(app, account[1]).get("/v1/clusters").status_code == 200


def test_the_api_key_is_stored_only_as_a_hash(platform_database, platform_engine):
    account_id, api_key = make_account(platform_database, "hashed")
    key_id, _, secret = api_key.partition(".")

    with platform_engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM api_keys WHERE account_id = :id"), {"id": account_id}).mappings().one()
        dump = conn.execute(
            text("SELECT string_agg(t::text, ' ') FROM (SELECT * FROM accounts a JOIN api_keys k ON k.account_id = a.id"
                 " WHERE a.id = :id) t"), {"id": account_id}
        ).scalar()

    assert secret not in dump and api_key not in dump
    assert row["key_id"] == key_id
    assert row["key_hash"] == hashlib.sha256(secret.encode()).hexdigest()


def test_create_account_cli_prints_a_working_key_once(app, platform_db_url):
    result = subprocess.run(
        [console_script("platform-svc"), "create-account", "cli-team", "--json"],
        env={"PLATFORM_DATABASE_URL": platform_db_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert set(printed) == {"account_id", "api_key"}
    client = authed_client(app, printed["api_key"])
    assert client.get("/v1/clusters").status_code == 200
    created = client.post("/v1/clusters", json=cluster_body(name="cli-db"))
    assert created.status_code == 201
    assert created.get_json()["sync_state"] == "synced"


def test_key_and_limit_commands_say_what_they_did_and_refuse_what_does_not_exist(platform_db_url, platform_engine):
    """The commands' other paths, in-process (the console script itself: tests/e2e/test_credentials.py)."""
    from click.testing import CliRunner

    from platform_svc.cli import main

    env = {"PLATFORM_DATABASE_URL": platform_db_url}
    run = lambda *args: CliRunner().invoke(main, list(args), env=env)
    created = run("create-account", "commands", "--rate-limit", "9", "--json")
    assert created.exit_code == 0, created.output
    account_id = json.loads(created.output)["account_id"]

    issued = run("create-key", account_id)
    assert issued.exit_code == 0 and "store the key now" in issued.output
    key_id = issued.output.split()[1]
    listing = run("list-keys", account_id).output.splitlines()
    assert len(listing) == 2 and all(line.endswith("active") and "never used" in line for line in listing)
    assert run("revoke-key", key_id).exit_code == 0
    assert run("revoke-key", key_id).exit_code == 0  # again: nothing more to do
    assert "revoked" in run("list-keys", account_id).output.splitlines()[1]

    def limit():
        with platform_engine.connect() as conn:
            return conn.execute(text("SELECT rate_limit FROM accounts WHERE id = :id"), {"id": account_id}).scalar()

    assert limit() == 9
    assert run("set-rate-limit", account_id, "250").output.strip().endswith("250 requests per second")
    assert limit() == 250
    assert run("set-rate-limit", account_id, "default").exit_code == 0
    assert limit() is None

    unknown = "0193a1b2-7c00-7000-8000-0000000000aa"
    for args in (("create-key", unknown), ("revoke-key", "0123456789abcdef"), ("set-rate-limit", unknown, "5")):
        refused = run(*args)
        assert refused.exit_code == 1 and "no " in refused.output, args
    assert run("set-rate-limit", account_id, "0").exit_code == 2
    assert run("list-keys", unknown).output.strip() == f"no keys for account {unknown}"


def test_a_key_with_a_nul_is_refused_never_a_500(platform_database):
    """PostgreSQL cannot take a NUL in a string: such a key is no key (401), never a failed statement."""
    _, api_key = make_account(platform_database, "nul")
    authenticate = auth.Authenticator(platform_database, UNREACHED_RATE_LIMIT)
    key_id, _, secret = api_key.partition(".")
    assert authenticate(f"{key_id}\x00.{secret}") is None
    assert authenticate(f"{key_id}.{secret}\x00") is None
    assert authenticate(api_key) is not None
