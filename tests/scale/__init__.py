"""Heavy process tests of the production shape (``make test-scale``; ``make test`` leaves them out)."""
