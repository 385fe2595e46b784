"""Readings of a sweep's results frame that tests of different backends share."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd


def most_at_once(df: pd.DataFrame) -> int:
    """Most trials running at once on one device, from recorded start times and durations."""
    events = []
    for row in df.itertuples():
        start = row.started_at.to_pydatetime()  # a UTC datetime in the frame
        events += [(start, 1, row.device), (start + timedelta(seconds=row.duration_s), -1, row.device)]
    most, now = 0, {}
    for _, step, device in sorted(events, key=lambda e: (e[0], e[1])):
        now[device] = now.get(device, 0) + step
        most = max(most, now[device])
    return most


def most_at_once_in(spans: list[tuple[float, float, str]]) -> int:
    """Most trials running at once on one device, from each trial's own (start, end, device):
    times the trial's process took itself, not when the sweep heard of it (which a busy
    machine delays)."""
    events = [e for start, end, device in spans for e in ((start, 1, device), (end, -1, device))]
    most, now = 0, {}
    for _, step, device in sorted(events, key=lambda e: (e[0], e[1])):
        now[device] = now.get(device, 0) + step
        most = max(most, now[device])
    return most
