"""A fake training loop on clients/python/tandem_coloc.py (run by tests/coloc.rs): 20 ms
"steps" (or argv[2] seconds) for up to a minute, calling step() at every boundary, so that
it acks directives, blocks while paused, and rejoins a gateway that restarts.

    python coloc_loop.py SOCKET [STEP_SECONDS]"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
import tandem_coloc  # noqa: E402

step_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
deadline = time.monotonic() + 60
with tandem_coloc.Trainer(sys.argv[1], name="python-loop", max_streams=2,
                          memory_bytes=1 << 20) as coloc:
    step = 0
    while time.monotonic() < deadline:
        coloc.step()
        time.sleep(step_seconds)
        step += 1
        coloc.report(step=step, samples_per_second=50.0, loss=1.0 / step)
