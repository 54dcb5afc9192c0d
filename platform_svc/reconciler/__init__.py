"""The reconciler process (``platform-svc reconcile``), shaped as a controller manager:

- :mod:`platform_svc.reconciler.controller`: the work queue that pushes every row whose
  downstream state is behind, and the watch that notices cluster_svc recovering;
- :mod:`platform_svc.reconciler.leadership`: which of several reconcilers runs the periodic
  passes (drift repair, purge), by a lease in the platform's database;
- :mod:`platform_svc.reconciler.manager`: the process assembled from its settings, which starts
  every thread it runs.

May import the push path and the operations (the periodic passes); never the public API or the
console.
"""
