"""Imported by the fork server (``start_method="forkserver"``): loads the grid file named
by ``SWEEPER_PRELOAD_FILE`` so every forked trial starts with it (and its framework) imported."""

import os

from .target import load_file

_path = os.environ.get("SWEEPER_PRELOAD_FILE")
if _path:
    try:
        load_file(_path)
    except Exception:  # noqa: BLE001 - each trial loads it again and reports the error itself
        pass
