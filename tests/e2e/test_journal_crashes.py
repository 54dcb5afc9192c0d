"""A caller that journals its operations (idempotent_pair_client.Journal), SIGKILLed at random
moments and started again, completes every operation it began exactly once: the crash test of the
client's journal against the real pair. The kills land at real moments of a real process (between
writing a key and sending it, mid-request, before the answer is recorded), so this test waits real
time between them; the seed replays a run (JOURNAL_SEED)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

from idempotent_pair_client import Journal
from sqlalchemy import text

KILLS = 15
OPERATIONS = 300  # more than the kills let it finish: each kill lands in the middle of the work


def test_a_caller_killed_15_times_completes_every_begun_operation_exactly_once(pair, tmp_path):
    seed = int(os.environ.get("JOURNAL_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    journal_path = tmp_path / "caller.journal"
    command = [sys.executable, "-m", "tests.e2e.journal_caller", pair.platform_svc.url, pair.api_key,
               str(journal_path), str(OPERATIONS)]
    killed_with = Counter()  # operations begun and not answered when each kill landed

    for _ in range(KILLS):
        caller = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, 0.8))  # real time: a random moment of its run is what the test is about
        caller.send_signal(signal.SIGKILL)
        caller.wait(30)
        seen = Journal(journal_path)
        killed_with[len(seen.unanswered())] += 1
        seen.close()
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.stdout.strip() == "done", (seed, finished.stderr[-2000:])

    journal = Journal(journal_path)
    keys = {}
    for n in range(OPERATIONS):
        begun = journal.get(f"op-{n}")
        assert begun is not None and begun.status in (200, 201), (seed, n, begun)  # every operation, answered
        keys[begun.idempotency_key] = n
    journal.close()
    with pair.platform_engine.connect() as conn:
        stored = Counter(conn.execute(
            text("SELECT idempotency_key FROM clusters WHERE account_id = :account"), {"account": pair.account_id}
        ).scalars())
    assert stored == Counter({key: 1 for key in keys}), seed  # one object each, none under another key
    print(f"journal crash test, seed {seed}: {KILLS} kills, operations begun and unanswered at each: "
          f"{dict(sorted(killed_with.items()))}; {OPERATIONS} objects, 0 duplicates")
