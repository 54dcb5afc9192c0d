"""The console scripts ``cluster-svc`` and ``platform-svc``.

``serve`` runs gevent workers (shared/gunicorn_worker.py). gevent has to patch
the standard library before anything imports ``ssl``, ``socket`` or
``threading`` names: a module that imported ``ssl.SSLContext`` before the
patch (urllib3 does) would keep a context that blocks the whole worker on
HTTPS. So for ``serve`` the patch comes first, here, before the service's
modules are imported; the forked workers inherit it. Every other command
(migrate, reconcile, repair, ...) runs unpatched, with real threads.
"""
from __future__ import annotations

import sys


def _patch_if_serving() -> None:
    if sys.argv[1:2] == ["serve"]:
        from gevent import monkey

        monkey.patch_all()


def cluster_svc() -> None:
    _patch_if_serving()
    _start("cluster-svc", "cluster_svc.cli")


def platform_svc() -> None:
    _patch_if_serving()
    _start("platform-svc", "platform_svc.cli")


def _start(prog: str, cli: str) -> None:
    """Import the service's commands and the resources a deployment adds (``RESOURCE_MODULES``), so
    every resource is registered before any command builds on the registry; then run the command.

    A model that disagrees with its resource's declaration stops it here, in one line naming the field.
    """
    import importlib

    from shared.declaration import DeclarationMismatch
    from shared.registry import load_resource_modules

    try:
        main = importlib.import_module(cli).main
        load_resource_modules()
    except DeclarationMismatch as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        sys.exit(2)
    main()
