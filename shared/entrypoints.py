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
    from cluster_svc.cli import main

    _load_resource_modules()
    main()


def platform_svc() -> None:
    _patch_if_serving()
    from platform_svc.cli import main

    _load_resource_modules()
    main()


def _load_resource_modules() -> None:
    """Resources a deployment adds (``RESOURCE_MODULES``), registered before any command builds on the registry."""
    from shared.registry import load_resource_modules

    load_resource_modules()
