"""Drives clients/python/tandem_coloc.py against a real gateway (run by tests/coloc.rs).

A fake training loop (20 ms "steps") that exits 0 once step() has blocked for a pause and
the loop has then run again; prints one JSON line per notable event.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
import tandem_coloc  # noqa: E402

socket_path = sys.argv[1]
deadline = time.monotonic() + 60
with tandem_coloc.Trainer(socket_path, name="python-check", max_streams=2,
                          memory_bytes=1 << 20) as coloc:
    print(json.dumps({"event": "joined", "trainer_id": coloc.trainer_id}), flush=True)
    blocked_once = False
    step = 0
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        coloc.step()
        blocked = time.monotonic() - t0
        if blocked > 0.5:
            blocked_once = True
            print(json.dumps({"event": "resumed", "blocked_s": round(blocked, 2),
                              "directive": repr(coloc.directive)}), flush=True)
        elif blocked_once:
            print(json.dumps({"event": "running", "streams": coloc.max_streams}), flush=True)
            sys.exit(0)
        time.sleep(0.02)
        step += 1
        coloc.report(step=step, samples_per_second=50.0, loss=1.0 / step)
sys.exit("no pause seen within 60 s")
