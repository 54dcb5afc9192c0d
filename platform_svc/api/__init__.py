"""The public API: the routes (views), what they do to the platform's rows (services), and who may
call them how often (auth: API keys and the per-account admission).

May import the push path (a public write is pushed inline once committed); never the reconciler,
the operations or the console.
"""
