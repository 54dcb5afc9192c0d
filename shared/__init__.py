"""Plumbing both services use: configuration, database transactions, problem+json
errors, base schemas, bearer auth, the internal HTTP client and test helpers.

Nothing here imports either service, and nothing here knows a domain model.
"""
