"""Settings fail fast with one line naming what is missing or malformed."""
from __future__ import annotations

import pytest

from shared.config import ConfigError, database_url, integer, require, seconds


def test_require_returns_the_value():
    assert require("TOKEN", {"TOKEN": "s3cret"}) == "s3cret"


def test_require_strips_surrounding_whitespace():
    assert require("TOKEN", {"TOKEN": "  s3cret\n"}) == "s3cret"


@pytest.mark.parametrize("environ", [{}, {"TOKEN": ""}, {"TOKEN": "   "}], ids=["unset", "empty", "blank"])
def test_require_refuses_a_missing_value_naming_it(environ):
    with pytest.raises(ConfigError) as raised:
        require("TOKEN", environ)

    message = str(raised.value)
    assert "TOKEN" in message
    assert "\n" not in message


def test_require_explains_why_when_told():
    with pytest.raises(ConfigError, match=r"TOKEN is not set \(the bearer token\)"):
        require("TOKEN", {}, why="the bearer token")


def test_require_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("CONFIG_TEST_SETTING", "from-env")

    assert require("CONFIG_TEST_SETTING") == "from-env"


def test_require_fails_when_the_process_environment_lacks_it(monkeypatch):
    monkeypatch.delenv("CONFIG_TEST_SETTING", raising=False)

    with pytest.raises(ConfigError, match="CONFIG_TEST_SETTING"):
        require("CONFIG_TEST_SETTING")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/app", "postgresql+psycopg2://u:p@db:5432/app"),
        ("postgres://u@db/app", "postgresql+psycopg2://u@db/app"),
        ("postgresql+psycopg2://u@db/app?sslmode=require", "postgresql+psycopg2://u@db/app?sslmode=require"),
        ("postgresql://postgres@/postgres?host=/tmp/pg", "postgresql+psycopg2://postgres@/postgres?host=/tmp/pg"),
    ],
)
def test_database_url_pins_postgresql_to_psycopg2(given, expected):
    assert database_url("DB_URL", {"DB_URL": given}) == expected


@pytest.mark.parametrize(
    "given", ["mysql://u@db/app", "postgresql+psycopg://u@db/app", "sqlite:///x.db", "db.example.com/app", "postgresql:/x"]
)
def test_database_url_refuses_other_urls_naming_the_setting(given):
    with pytest.raises(ConfigError) as raised:
        database_url("DB_URL", {"DB_URL": given})

    assert "DB_URL" in str(raised.value)
    assert "postgresql+psycopg2://" in str(raised.value)


def test_database_url_is_required():
    with pytest.raises(ConfigError, match="DB_URL is not set"):
        database_url("DB_URL", {})


@pytest.mark.parametrize(("raw", "value"), [("8", 8), (" 16 ", 16), ("-1", -1), ("0", 0)])
def test_integer_parses_the_setting(raw, value):
    assert integer("POOL", 5, {"POOL": raw}) == value


@pytest.mark.parametrize("environ", [{}, {"POOL": ""}, {"POOL": "  "}], ids=["unset", "empty", "blank"])
def test_integer_falls_back_to_the_default(environ):
    assert integer("POOL", 5, environ) == 5


@pytest.mark.parametrize("raw", ["eight", "8.5", "0x10", "1e3"])
def test_integer_refuses_a_non_integer_naming_it(raw):
    with pytest.raises(ConfigError) as raised:
        integer("POOL", 5, {"POOL": raw})

    assert "POOL" in str(raised.value)
    assert repr(raw) in str(raised.value)


@pytest.mark.parametrize(("raw", "value"), [("8", 8.0), (" 0.25 ", 0.25), ("1e-1", 0.1)])
def test_seconds_parses_the_setting(raw, value):
    assert seconds("LEASE", 15, {"LEASE": raw}) == value


@pytest.mark.parametrize("environ", [{}, {"LEASE": ""}, {"LEASE": "  "}], ids=["unset", "empty", "blank"])
def test_seconds_falls_back_to_the_default(environ):
    assert seconds("LEASE", 15, environ) == 15


@pytest.mark.parametrize("raw", ["soon", "0", "-1", "nan", "inf", "5s"])
def test_seconds_refuses_anything_but_a_positive_number_naming_it(raw):
    with pytest.raises(ConfigError) as raised:
        seconds("LEASE", 15, {"LEASE": raw})

    assert "LEASE" in str(raised.value)
    assert repr(raw) in str(raised.value)


def test_the_timings_tests_shorten_are_read_from_the_environment():
    from datetime import timedelta

    from platform_svc import inline_lease
    from platform_svc.reconciler.settings import ReconcilerSettings

    assert inline_lease({}) == timedelta(seconds=15)
    assert inline_lease({"INLINE_LEASE_SECONDS": "8"}) == timedelta(seconds=8)
    environ = {"RECONCILER_LEASE_MARGIN_SECONDS": "1", "RECONCILER_IDLE_SECONDS": "0.1", "RECONCILER_PROBE_SECONDS": "0.2"}
    settings = ReconcilerSettings.from_env(environ, batch=5, push_timeout=1.0)
    assert (settings.lease_margin, settings.idle_interval, settings.probe_interval) == (1.0, 0.1, 0.2)
    assert settings.longest_push == settings.client_policy().longest_call() < ReconcilerSettings().longest_push
    assert (settings.batch, settings.lease) == (5, timedelta(seconds=settings.longest_push + 1.0))
    assert ReconcilerSettings.from_env({}) == ReconcilerSettings()


def test_the_default_inline_lease_outlasts_the_inline_push_it_leases_rows_to():
    from datetime import timedelta

    from platform_svc import INLINE_POLICY, inline_lease

    longest = timedelta(seconds=INLINE_POLICY.longest_call())
    assert longest == timedelta(seconds=1)  # the figure inline_lease's docstring and docs/operations.md give
    assert inline_lease({}) > longest


def test_internal_token_may_list_several_tokens():
    from shared.config import internal_tokens, token_accepted

    assert internal_tokens("one") == ("one",)
    assert internal_tokens(" new , old ") == ("new", "old")
    for broken in ("new,,old", "new,", ",old", " , "):
        with pytest.raises(ConfigError, match="INTERNAL_TOKEN"):
            internal_tokens(broken)
    accepted = internal_tokens("new,old")
    assert token_accepted("new", accepted) and token_accepted("old", accepted)
    assert not any(token_accepted(sent, accepted) for sent in ("new,old", "ne", "newold", "", "new "))


def test_a_service_refuses_to_start_with_an_empty_token_in_the_list():
    from shared.config import checked_internal_token

    assert checked_internal_token({"INTERNAL_TOKEN": "a,b"}) == "a,b"
    with pytest.raises(ConfigError, match="empty token"):
        checked_internal_token({"INTERNAL_TOKEN": "a,,b"})


def test_account_rate_limit_is_a_positive_number_of_requests_per_second():
    from platform_svc import default_rate_limit

    assert default_rate_limit({}) == 100
    assert default_rate_limit({"ACCOUNT_RATE_LIMIT": "250"}) == 250
    for wrong in ("0", "-1", "1000001", "many"):
        with pytest.raises(ConfigError, match="ACCOUNT_RATE_LIMIT"):
            default_rate_limit({"ACCOUNT_RATE_LIMIT": wrong})
