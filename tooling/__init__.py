"""Development and test tooling: never imported by a deployed service.

``embedded_pg`` and ``devrun`` are what ``make run`` uses; ``testing`` and
``faultproxy`` are what the tests and benchmarks use.
"""
