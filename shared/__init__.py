"""Plumbing both services use: configuration, database transactions, problem+json
errors, base schemas, bearer auth, the internal HTTP client, metrics and serving.

Of the domain, shared holds only each resource's wire contract, declared once
for both services (shared.declaration, and the shipped declarations in
shared.contract), never tables or models; nothing here imports either service except the
console-script entry points that start them (shared.entrypoints).
"""
