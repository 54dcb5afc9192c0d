"""What operators run, by hand or periodically: drift repair (repair, drift), the operator's retry
of failed rows (retry), what ``sync-status`` and the sync gauges show (status, metrics), which
deleted rows purge may remove (purge), and the last pass of each kind (passes).

May import the push path; never the public API, the reconciler or the console.
"""
