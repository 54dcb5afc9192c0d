"""The reconciler process (``platform-svc reconcile``), shaped as a controller manager:

- :mod:`platform_svc.reconciler.controller`: the work queue that pushes every row whose
  downstream state is behind, and the watch that notices cluster_svc recovering;
- :mod:`platform_svc.reconciler.periodic`: the leader's periodic passes (drift repair, purge, the
  repair runs asked for on the console), while it holds the lease of
  :mod:`platform_svc.operations.leadership`;
- :mod:`platform_svc.reconciler.manager`: the process assembled from its settings, which starts
  every thread it runs.

May import the push path and the operations (the periodic passes); never the public API or the
console.
"""
