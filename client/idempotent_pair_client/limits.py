"""cluster_svc's limits on one request, which its callers cut their batches to fit.

Here, where importing them loads nothing: the server (shared.api) enforces them
and the HTTP clients (shared.client, idempotent_pair_client.cluster) read them.
"""
MAX_BODY_BYTES = 1024 * 1024
MAX_BATCH_ITEMS = 1000  # items in one batch create, at most (and its body within MAX_BODY_BYTES)
