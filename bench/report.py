"""The table and the summary ``make bench`` prints, and the JSON it writes, from one run's figures."""
from __future__ import annotations

import os
import platform
import statistics
from datetime import datetime, timezone
from typing import Any

from bench.driver import Contender
from shared.cli import READ_TIMEOUT


def build_report(*, size, args, pg_version, max_conn, elapsed, phase1, phase2, drains, reconcile_startup, p4, p4_extra,
                 rows, recovery) -> dict[str, Any]:
    (cl_create, limit_create, kt_create, cl_replay, limit_replay, kt_replay, big_create,
     cl_many, limit_many, kt_many, replay_many, cl_one, limit_one) = phase1
    cl_create2, pf_create, pf_down, cl2_many, pf_many = phase2
    many = cl_many.connections
    drain_rates = [d.rate for d in drains]
    drain_median = statistics.median(drain_rates) if drain_rates else float("nan")
    p4_ok = p4 == (["INSERT"], ["INSERT", "SELECT"])

    def spread(num: list[float], den: list[float]) -> str:
        ratios = [a / b for a, b in zip(num, den) if b]
        return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"

    def cpu(contender: Contender) -> str:
        """CPU µs per good request of each of the contender's own processes (PostgreSQL's: "pg")."""
        return "+".join(f"{contender.cpu_median(name) * 1000:.0f}{'pg' if name == 'postgres' else ''}"
                        for name in contender.cpu_roots)

    pairs = {  # each ratio's numerator and denominator, for the CPU column
        "P1": (cl_create, limit_create), "P2": (cl_create, kt_create), "P3": (cl_replay, cl_create),
        "P5": (big_create, cl_create), "P7": (pf_create, cl_create2), "P8": (pf_down, pf_create),
        f"P1@{many}": (cl_many, limit_many), f"P2@{many}": (cl_many, kt_many), f"P3@{many}": (replay_many, cl_many),
        f"P7@{many}": (pf_many, cl2_many),
    }
    rows_out = [
        ("P1", "cluster_svc creates / limit", cl_create.median / limit_create.median, 1.0,
         f"{cl_create.median:.0f} / {limit_create.median:.0f}", spread(cl_create.samples, limit_create.samples)),
        ("P2", "cluster_svc creates / key-table", cl_create.median / kt_create.median, 1.25,
         f"{cl_create.median:.0f} / {kt_create.median:.0f}", spread(cl_create.samples, kt_create.samples)),
        ("P3", "cluster_svc replays / its creates", cl_replay.median / cl_create.median, 1.0,
         f"{cl_replay.median:.0f} / {cl_create.median:.0f}", spread(cl_replay.samples, cl_create.samples)),
        ("P4", "statements per create / replay", None, None,
         f"{'1/2 (tested)' if p4_ok else 'create ' + '+'.join(p4[0]) + ', replay ' + '+'.join(p4[1])}", ""),
        ("P5", f"creates, {size.big_rows:,} rows / empty", big_create.median / cl_create.median, 0.9,
         f"{big_create.median:.0f} / {cl_create.median:.0f}", spread(big_create.samples, cl_create.samples)),
        ("P6", f"drain of {size.pending:,} pending / creates", drain_median / cl_create2.median, 2.0,
         f"{drain_median:.0f} / {cl_create2.median:.0f}", ""),
        ("P7", "platform creates / cluster_svc creates", pf_create.median / cl_create2.median, 0.5,
         f"{pf_create.median:.0f} / {cl_create2.median:.0f}", spread(pf_create.samples, cl_create2.samples)),
        ("P8", "platform creates, cluster_svc down / up", pf_down.median / pf_create.median, 1.0,
         f"{pf_down.median:.0f} / {pf_create.median:.0f}", spread(pf_down.samples, pf_create.samples)),
        (f"P1@{many}", "cluster_svc creates / limit", cl_many.median / limit_many.median, 1.0,
         f"{cl_many.median:.0f} / {limit_many.median:.0f}", spread(cl_many.samples, limit_many.samples)),
        (f"P2@{many}", "cluster_svc creates / key-table", cl_many.median / kt_many.median, 1.25,
         f"{cl_many.median:.0f} / {kt_many.median:.0f}", spread(cl_many.samples, kt_many.samples)),
        (f"P3@{many}", "cluster_svc replays / its creates", replay_many.median / cl_many.median, 1.0,
         f"{replay_many.median:.0f} / {cl_many.median:.0f}", spread(replay_many.samples, cl_many.samples)),
        (f"P7@{many}", "platform creates / cluster_svc creates", pf_many.median / cl2_many.median, 0.5,
         f"{pf_many.median:.0f} / {cl2_many.median:.0f}", spread(pf_many.samples, cl2_many.samples)),
    ]
    p50_ratio = cl_one.latency_median(0) / limit_one.latency_median(0)
    p9_target = 2.0 + recovery.waiting / drain_median
    lines = []
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines.append("")
    lines.append(f"idempotent-pair benchmark, {now}; nproc {os.cpu_count()}; {platform.platform(terse=True)};"
                 f" Python {platform.python_version()}; PostgreSQL {pg_version}"
                 f" ({'TEST_DATABASE_URL' if os.environ.get('TEST_DATABASE_URL') else 'embedded'},"
                 f" max_connections {max_conn})")
    lines.append(f"every contender: gunicorn gevent (shared.gunicorn_worker) --workers {args.workers},"
                 f" keep-alive / read timeout {READ_TIMEOUT} s, {args.pool_size} pooled DB connections per worker")
    lines.append(f"  cluster_svc, cluster_svc_1m: cluster-svc serve --workers {args.workers} --pool-size {args.pool_size}"
                 " (LOG_FORMAT text, an access line per request, metrics in PROMETHEUS_MULTIPROC_DIR files)")
    lines.append(f"  platform_svc: platform-svc serve --workers {args.workers} --pool-size {args.pool_size}"
                 " (the same; inline pushes to cluster_svc over a keep-alive urllib3 pool)")
    lines.append(f"  limit, keytable: python -m bench.serve limit|keytable --workers {args.workers} --pool-size"
                 f" {args.pool_size} (shared.cli.run_gunicorn; bare Flask on a psycopg2 pool: no log line, no metrics)")
    lines.append(f"load: wrk -t{args.wrk_threads} -c{args.connections} (and -c{many}, -t1 -c1 where a label says so;"
                 f" keep-alive), {size.rounds} rounds x"
                 f" {size.duration:g} s per contender, alternated, {size.warmup:g} s warm-up each; medians of rounds")
    lines.append(f"creates: a new UUIDv4 per request; replays: one of {size.replay_ids:,} existing IDs;"
                 f" P6: platform-svc reconcile --once --concurrency {args.reconcile_concurrency}"
                 f" (wall time incl. process start-up)")
    lines.append("P8: cluster_svc frozen with SIGSTOP (connections hang), platform_svc's breakers opened by priming;"
                 " P9: platform-svc reconcile (default settings) running throughout, cluster_svc frozen")
    lines.append(f"elapsed {elapsed / 60:.1f} min; rows at the end of phase 1: cluster_svc {rows['cluster']:,},"
                 f" 1M instance {rows['big']:,}")
    lines.append("")
    lines.append("req/s per round")
    for contender in [*phase1, *phase2]:
        phase = "2" if contender in phase2 else "1"
        cells = " ".join(f"{s:7.0f}" for s in contender.samples)
        lines.append(f"  [{phase}] {contender.label:<46} {cells}   median {contender.median:7.0f}")
    if drains:
        cells = " ".join(f"{rate:7.0f}" for rate in drain_rates)
        lines.append(f"  [2] {'reconciler drain, rows/s':<46} {cells}   median {drain_median:7.0f}"
                     f"   ({', '.join(f'{d.pushed} rows in {d.seconds:.1f} s' for d in drains)};"
                     f" reconcile --once with nothing due takes {reconcile_startup:.1f} s)")
    lines.append("")
    lines.append("CPU per good request, ms (medians; 'machine' = cores busy during the run, out of"
                 f" {os.cpu_count()}, including anything else running)")
    for contender in [*phase1, *phase2]:
        trees = [name for name in contender.cpu_roots] + ["wrk"]
        cells = ", ".join(f"{name} {contender.cpu_median(name):.2f}" for name in trees)
        lines.append(f"  {contender.label:<50} {cells}; machine {contender.cpu_median('machine busy'):.2f}")
    if drains:
        names = [name for name in drains[0].cpu_ms if name != "machine busy"]
        cells = ", ".join(f"{name} {statistics.median(d.cpu_ms[name] for d in drains):.2f}" for name in names)
        machine = statistics.median(d.cpu_ms["machine busy"] for d in drains)
        lines.append(f"  {'reconciler drain (per row)':<50} {cells}; machine {machine:.2f}")
    lines.append("")
    lines.append("latency at one connection (wrk -t1 -c1), ms, medians of rounds' p50 and p99")
    for contender in (cl_one, limit_one):
        lines.append(f"  {contender.label:<50} p50 {contender.latency_median(0):.2f},"
                     f" p99 {contender.latency_median(1):.2f}"
                     f"   (per round p50: {', '.join(f'{p50:.2f}' for p50, _ in contender.latency)})")
    lines.append("")
    lines.append("the database per create (medians): PostgreSQL CPU ms (all its processes)"
                 " and WAL bytes (pg_current_wal_lsn)")
    for contender in (cl_create, limit_create, kt_create, cl_many, limit_many, kt_many, cl_one, limit_one):
        lines.append(f"  {contender.label:<50} postgres CPU {contender.cpu_median('postgres'):.3f} ms,"
                     f" WAL {contender.wal_median:,.0f} bytes")
    lines.append("")
    header = (f"{'target':<7}{'what':<44}{'measured':>9}  {'target':<9}{'result':<7}{'medians (req/s)':<18}"
              f"{'per-round':<11}{'CPU µs per request (each process), numerator / denominator'}")
    lines.append(header)
    lines.append("-" * len(header))
    summary = []
    data_rows = []
    for target, what, ratio, goal, medians, per_round in rows_out:
        if goal is None:
            result = "pass" if p4_ok else "FAIL"
            lines.append(f"{target:<7}{what:<44}{'1/2' if p4_ok else '?':>9}  {'1/2':<9}{result:<7}{medians}")
            summary.append(f"{target} {'1/2' if p4_ok else '?'} {result}")
            data_rows.append({"target": target, "what": what, "measured": "1/2" if p4_ok else p4, "pass": p4_ok})
            continue
        result = "pass" if ratio >= goal else "FAIL"
        cpus = " / ".join(cpu(contender) for contender in pairs[target]) if target in pairs else ""
        lines.append(f"{target:<7}{what:<44}{ratio:>9.2f}  {'>= ' + format(goal, 'g'):<9}{result:<7}{medians:<18}"
                     f"{per_round:<11}{cpus}".rstrip())
        summary.append(f"{target} {ratio:.2f} {result}")
        data_rows.append({"target": target, "what": what, "measured": round(ratio, 3), "goal": goal,
                          "pass": ratio >= goal, "medians": medians})
    l1_pass = p50_ratio <= 1.5
    lines.append(f"{'L1':<7}{'p50 at -c1, cluster_svc / limit':<44}{p50_ratio:>9.2f}  {'<= 1.5':<9}"
                 f"{'pass' if l1_pass else 'FAIL':<7}"
                 f"{cl_one.latency_median(0):.2f} / {limit_one.latency_median(0):.2f} ms"
                 f"{'':<7}{cpu(cl_one)} / {cpu(limit_one)}")
    p99_ratio = cl_one.latency_median(1) / limit_one.latency_median(1)
    lines.append(f"{'L1p99':<7}{'p99 at -c1, cluster_svc / limit':<44}{p99_ratio:>9.2f}  {'(report)':<9}{'':<7}"
                 f"{cl_one.latency_median(1):.2f} / {limit_one.latency_median(1):.2f} ms")
    summary.append(f"L1 {p50_ratio:.2f} {'pass' if l1_pass else 'FAIL'} (p99 {p99_ratio:.2f})")
    data_rows.append({"target": "L1", "what": "p50 at -c1, cluster_svc / limit", "measured": round(p50_ratio, 3),
                      "goal": 1.5, "pass": l1_pass})
    # P11: what the database spends per create, cluster_svc's over the key table's (CPU and WAL, each <= 0.6).
    p11_cpu = cl_create.cpu_median("postgres") / kt_create.cpu_median("postgres")
    p11_wal = cl_create.wal_median / kt_create.wal_median
    p11_pass = p11_cpu <= 0.6 and p11_wal <= 0.6
    lines.append(f"{'P11':<7}{'PostgreSQL CPU, WAL per create / key-table':<44}{max(p11_cpu, p11_wal):>9.2f}  {'<= 0.6':<9}"
                 f"{'pass' if p11_pass else 'FAIL':<7}CPU {p11_cpu:.2f} ({cl_create.cpu_median('postgres') * 1000:.0f} /"
                 f" {kt_create.cpu_median('postgres') * 1000:.0f} µs), WAL {p11_wal:.2f} ({cl_create.wal_median:.0f} /"
                 f" {kt_create.wal_median:.0f} bytes)")
    summary.append(f"P11 CPU {p11_cpu:.2f} WAL {p11_wal:.2f} {'pass' if p11_pass else 'FAIL'}")
    data_rows.append({"target": "P11", "what": "PostgreSQL CPU and WAL per create / key-table",
                      "measured": [round(p11_cpu, 3), round(p11_wal, 3)], "goal": 0.6, "pass": p11_pass})
    p9_pass = recovery.seconds <= p9_target
    lines.append(f"{'P9':<7}{'seconds from recovery to all synced':<44}{recovery.seconds:>8.2f}s  "
                 f"{'<= ' + format(p9_target, '.2f') + 's':<9}{'pass' if p9_pass else 'FAIL':<7}"
                 f"{recovery.waiting} rows after {recovery.outage:.0f} s; target 2 s + {recovery.waiting} / "
                 f"{drain_median:.0f} rows/s")
    summary.append(f"P9 {recovery.seconds:.2f}s {'pass' if p9_pass else 'FAIL'}")
    data_rows.append({"target": "P9", "what": "seconds from recovery to all synced", "measured": round(
        recovery.seconds, 3), "goal": round(p9_target, 3), "pass": p9_pass, "waiting": recovery.waiting,
        "outage": round(recovery.outage, 1)})
    lines.append("")
    lines.append(f"P4 on the wire: {p4_extra}")
    lines.append(f"info: limit replays {limit_replay.median:.0f}/s, key-table replays {kt_replay.median:.0f}/s,"
                 f" key-table creates / limit {kt_create.median / limit_create.median:.2f}")
    problems = [f"  {c.label}: {p}" for c in [*phase1, *phase2] for p in c.problems]
    if problems:
        lines.append("WARNING: unexpected answers (results for these contenders are suspect):")
        lines.extend(problems)
    lines.append("")
    lines.append("summary: " + " | ".join(summary))
    data = {
        "date": now, "nproc": os.cpu_count(), "workers": args.workers, "pool_size": args.pool_size,
        "connections": args.connections, "rounds": size.rounds, "duration": size.duration,
        "targets": data_rows,
        "samples": {c.label: c.samples for c in [*phase1, *phase2]},
        "cpu_ms_per_request": {c.label: c.cpu for c in [*phase1, *phase2]},
        "answers": {c.label: c.answers for c in [*phase1, *phase2]},
        "drains": [d.__dict__ for d in drains],
        "latency_ms": {c.label: c.latency for c in [*phase1, *phase2]},
        "wal_bytes_per_request": {c.label: c.wal for c in [*phase1, *phase2]},
    }
    return {"text": "\n".join(lines), "data": data}
