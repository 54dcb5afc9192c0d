"""Summarize a py-spy raw profile (``py-spy record -f raw``) of a service's workers.

``python -m bench.profile FILE`` (``make bench`` uses it under ``--profile``).
py-spy samples only threads that are running (not the ones idle in a poll or a
socket read), so the shares below are of CPU time, across every worker.

- *self time by library*: each sample goes to the innermost frame that belongs
  to a library or the project (a standard-library frame counts for whoever
  called it); a psycopg2 call shows as its SQLAlchemy caller, so ``do_execute``
  and ``do_commit`` are split out as "psycopg2 (C)".
- *inclusive*: the share of samples with a given step anywhere on the stack.
"""
from __future__ import annotations

import re
import sys
from collections import Counter

FRAME = re.compile(r"^(?P<name>.*?) \((?P<path>[^():]*)(?::(?P<line>\d+))?\)$")
LIBRARIES = [
    ("psycopg2", "/psycopg2/"),
    ("SQLAlchemy", "/sqlalchemy/"),
    ("marshmallow", "/marshmallow/"),
    ("webargs", "/webargs/"),
    ("flask-smorest", "/flask_smorest/"),
    ("apispec", "/apispec/"),
    ("werkzeug", "/werkzeug/"),
    ("Flask", "/flask/"),
    ("gunicorn", "/gunicorn/"),
    ("cluster_svc", "/cluster_svc/"),
    ("platform_svc", "/platform_svc/"),
    ("shared (project)", "/shared/"),
    ("bench", "/bench/"),
    ("requests/urllib3", "/requests/"),
    ("requests/urllib3", "/urllib3/"),
]
PSYCOPG2_CALLERS = {"do_execute", "do_commit", "do_rollback", "do_ping", "_do_ping_w_event", "do_begin"}

def _on(frames, name: str, path: str) -> bool:
    return any(n == name and path in p for n, p in frames)


def _in(frames, path: str) -> bool:
    return any(path in p for _, p in frames)


def _psycopg2_leaf(frames) -> bool:
    name, path = frames[-1]
    return name in PSYCOPG2_CALLERS and "sqlalchemy" in path


# (label, test on the whole stack, innermost frame last). Indentation nests the steps.
INCLUSIVE = [
    ("gunicorn gthread worker, all of it", lambda f: _in(f, "/gunicorn/workers/gthread.py")),
    ("  event loop, accept, keep-alive bookkeeping", lambda f: _in(f, "/gunicorn/workers/gthread.py")
     and not _on(f, "handle_request", "/gunicorn/workers/gthread.py")),
    ("  HTTP request parsing", lambda f: _in(f, "/gunicorn/http/") and not _in(f, "/gunicorn/http/wsgi.py")
     and not _on(f, "wsgi_app", "/flask/app.py")),
    ("  response writing", lambda f: _in(f, "/gunicorn/http/wsgi.py") and not _on(f, "wsgi_app", "/flask/app.py")),
    ("  Flask wsgi_app (everything below)", lambda f: _on(f, "wsgi_app", "/flask/app.py")),
    ("    Flask/werkzeug around the view (ctx, routing, before_request, Response)",
     lambda f: _on(f, "wsgi_app", "/flask/app.py") and not _on(f, "dispatch_request", "/flask/app.py")),
    ("      bearer-token check", lambda f: _on(f, "require_bearer_token", "")),
    ("    flask-smorest/webargs decorators around post()",
     lambda f: _on(f, "dispatch_request", "/flask/views.py") and not _on(f, "post", "_svc/views.py")),
    ("      webargs: read JSON, marshmallow load", lambda f: _on(f, "parse", "/webargs/core.py")),
    ("        Schema() built per request (class passed to @arguments)", lambda f: _on(f, "_get_schema", "/webargs/")),
    ("      marshmallow dump of the response", lambda f: _on(f, "dump", "/marshmallow/schema.py")
     and not _on(f, "parse", "/webargs/core.py")),
    ("    the view, post()", lambda f: _on(f, "post", "_svc/views.py")),
    ("      transaction(): connection checkout, BEGIN, COMMIT, checkin", lambda f: _on(f, "transaction", "/shared/db.py")),
    ("        connection pool (checkout, checkin)", lambda f: _in(f, "/sqlalchemy/pool/")),
    ("        psycopg2 commit (C)", lambda f: f[-1][0] == "do_commit"),
    ("      create_or_return", lambda f: _on(f, "create_or_return", "/shared/idempotent.py")),
    ("        executing the prebuilt statements (SQLAlchemy Core and psycopg2)",
     lambda f: _on(f, "create_or_return", "/shared/idempotent.py") and _on(f, "execute", "/sqlalchemy/engine/base.py")),
    ("        Session.execute (ORM -> Core -> psycopg2)", lambda f: _on(f, "execute", "/sqlalchemy/orm/session.py")
     and not _on(f, "transaction", "/shared/db.py")),
    ("          cache key / compiled-statement cache", lambda f: _on(f, "_compile_w_cache", "/sqlalchemy/sql/")),
    ("          psycopg2 execute (C)", lambda f: f[-1][0] == "do_execute"),
    ("      url_for (Location header)", lambda f: _on(f, "url_for", "/flask/")),
    ("psycopg2 C calls, all (execute, commit)", _psycopg2_leaf),
    # platform_svc and the reconciler
    ("platform: API-key authentication (its own Session)", lambda f: _on(f, "authenticate", "/platform_svc/")),
    ("platform: create_object (the intent INSERT)", lambda f: _on(f, "create_object", "/platform_svc/api/services.py")),
    ("platform/reconciler: push(), the HTTP call to cluster_svc", lambda f: _on(f, "push", "/platform_svc/push/pusher.py")),
    ("  requests + urllib3", lambda f: _on(f, "push", "/platform_svc/push/pusher.py") and _in(f, "/requests/")),
    ("platform/reconciler: record() the outcome (own transaction)",
     lambda f: _on(f, "_push_and_record", "/platform_svc/push/pusher.py") and not _on(f, "push", "/platform_svc/push/pusher.py")),
    ("reconciler: claim_due (lease a batch)", lambda f: _on(f, "claim_due", "/platform_svc/push/pusher.py")),
]


def parse(raw: str) -> list[tuple[list[tuple[str, str]], int]]:
    stacks = []
    for line in raw.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        frames = []
        for part in stack.split(";"):
            match = FRAME.match(part.strip())
            if match:  # "Class.method (pkg/module.py:12)" -> ("method", "/pkg/module.py")
                name = match["name"].rsplit(".", 1)[-1]
                path = match["path"] if match["path"].startswith("/") else "/" + match["path"]
                frames.append((name, path))
        if frames and count.isdigit():
            stacks.append((frames, int(count)))
    return stacks


def library(path: str) -> str | None:
    for label, needle in LIBRARIES:
        if needle in path:
            return label
    return None


def owner(frames: list[tuple[str, str]]) -> str:
    name, path = frames[-1]
    if name in PSYCOPG2_CALLERS and "sqlalchemy" in path:
        return "psycopg2 (C: send, wait for PostgreSQL, parse)"
    for name, path in reversed(frames):
        label = library(path)
        if label:
            return label
    return "stdlib / other"


def summarize(raw: str, top: int = 12) -> str:
    stacks = parse(raw)
    total = sum(count for _, count in stacks)
    if not total:
        return "  (no samples)"
    by_library: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        by_library[owner(frames)] += count
        name, path = frames[-1]
        by_function[f"{name} ({_short(path)})"] += count
        for label, test in INCLUSIVE:
            if test(frames):
                inclusive[label] += count
    lines = [f"  {total} samples, all workers", "  self time by library:"]
    lines += [f"    {share:5.1f}%  {label}" for label, share in _shares(by_library, total)]
    lines.append("  inclusive (on the stack):")
    lines += [f"    {100 * inclusive[label] / total:5.1f}%  {label}" for label, _ in INCLUSIVE if inclusive[label]]
    lines.append(f"  top {top} functions by self time:")
    lines += [f"    {share:5.1f}%  {label}" for label, share in _shares(by_function, total)[:top]]
    return "\n".join(lines)


def _shares(counter: Counter[str], total: int) -> list[tuple[str, float]]:
    return [(label, 100 * count / total) for label, count in counter.most_common()]


def _short(path: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


if __name__ == "__main__":
    for filename in sys.argv[1:]:
        print(f"{filename}:")
        with open(filename) as handle:
            print(summarize(handle.read()))
