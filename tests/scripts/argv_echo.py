"""A command-trial script for the tests: echoes its argv and environment, then ends as told."""

import json
import os
import signal
import sys

args = sys.argv[1:]
how = os.environ.get("ECHO_HOW") or next((a.split("=", 1)[1] for a in args if a.startswith("--how=")), "ok")
print("some ordinary output")
print(json.dumps({"epoch": 1, "loss": 0.5}))
print(json.dumps({"epoch": 2, "loss": 0.25}))
if how == "exit3":
    sys.exit(3)
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "file":
    with open(os.path.join(os.environ["SWEEPER_TRIAL_DIR"], "metrics.json"), "w") as f:
        json.dump({"from_file": 1.0}, f)
print(json.dumps({"n_args": len(args), "args": 0, "from_stdout": 1.0}))
with open(os.path.join(os.environ["SWEEPER_TRIAL_DIR"], "seen.json"), "w") as f:
    json.dump({"argv": args, "env": {k: v for k, v in os.environ.items() if k.startswith(("SWEEPER_", "CUDA_", "XLA_", "TF_"))}}, f)
