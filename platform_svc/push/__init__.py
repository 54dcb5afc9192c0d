"""The push path: what moves cluster_svc toward a platform row, in three pieces a reader can hold
apart, plus what they judge with.

- *scheduling* (:mod:`platform_svc.push.schedule`): what is due, leases, backoff
  (:class:`~platform_svc.push.schedule.RetryPolicy`), waking rows when cluster_svc recovers,
  cutting claimed rows into units of work;
- *pushing* (:mod:`platform_svc.push.pusher`): one HTTP call per unit, inline after a public
  write or for each unit the reconciler claims;
- *recording* (:mod:`platform_svc.push.recording`): one UPDATE per unit, the only place a row
  is confirmed.

:mod:`platform_svc.push.content` says what the platform owns of an object (what is sent and
compared), :mod:`platform_svc.push.skew` which refusals a skewed clock explains, and
:mod:`platform_svc.push.breaker` keeps public writes from waiting on a cluster_svc that is down.

Imports no other role: the public API, the reconciler, the operations and the console use it.
"""
