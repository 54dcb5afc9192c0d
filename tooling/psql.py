"""``make psql-platform`` / ``make psql-cluster``: a psql shell on a database ``make run`` serves.

    python -m tooling.psql PLATFORM_DATABASE_URL|CLUSTER_DATABASE_URL

Reads that URL from ``.dev/env`` in the current folder (what ``make run`` wrote), drops SQLAlchemy's
``+psycopg2`` (which psql does not read) and runs the system's psql, or the
embedded PostgreSQL's own when there is none on PATH.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

VARIABLES = ("PLATFORM_DATABASE_URL", "CLUSTER_DATABASE_URL")


def settings(env_file: Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of ``env_file``."""
    found = {}
    for line in env_file.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            found[name] = value
    return found


def psql_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return scheme.split("+", 1)[0] + sep + rest


def psql() -> str:
    found = shutil.which("psql")
    if found:
        return found
    import pgserver

    return str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in VARIABLES:
        print(f"usage: python -m tooling.psql {'|'.join(VARIABLES)}", file=sys.stderr)
        return 2
    env_file = Path.cwd() / ".dev" / "env"
    if not env_file.exists():
        print("tooling.psql: no .dev/env: start the pair with `make run` first", file=sys.stderr)
        return 1
    url = psql_url(settings(env_file)[args[0]])
    os.execv(psql(), ["psql", url])


if __name__ == "__main__":
    sys.exit(main())
