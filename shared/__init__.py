"""Plumbing both services use: configuration, database transactions, problem+json
errors, base schemas, bearer auth, the internal HTTP client, metrics and serving.

Of the domain, shared holds only the wire contract's field rules that both
services validate (a cluster's and a firewall rule's fields, shared.schemas),
never tables or models; nothing here imports either service except the
console-script entry points that start them (shared.entrypoints).
"""
