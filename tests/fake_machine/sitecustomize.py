"""Make every Python process a machine with the GPUs ``SWEEPER_FAKE_NVML`` describes.

A check of the test suite itself, for machines without GPUs: with this folder on
``PYTHONPATH`` the whole suite (its CLI subprocesses and trial processes included) runs
as on a GPU machine, as NVML would describe it (see tests/fake_nvml.py)::

    SWEEPER_FAKE_NVML="$(python tests/fake_nvml.py --describe 1)" PYTHONPATH=tests/fake_machine \\
        python -m pytest

Trials pinned to a fake card see no CUDA device and compute on the CPU.
"""

import os
import sys

if os.environ.get("SWEEPER_FAKE_NVML"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import fake_nvml
    finally:
        sys.path.pop(0)
    fake_nvml.FakeNvml.from_json(os.environ["SWEEPER_FAKE_NVML"]).install_for_good()
