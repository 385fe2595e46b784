"""Population-based training's checkpoints on disk (:mod:`sweeper.search.pbt` decides, this
copies): a member's checkpoint folder published whole at a segment's end, a published one
copied into a member that takes it, the copy and its record made one step, and what a
killed run or a finished sweep leaves, tidied::

    <sweep>/.pbt/<trial id>/<epoch>/        a member's checkpoint as it left it at <epoch>
    <sweep>/.pbt/<trial id>/<epoch>.copy    a copy under way: what it copies and the record to
                                            make; the resume completes it (written first,
                                            removed once the record is in the ledger)
    .<name>.<hex>                           a copy half-built beside its place (a killed run's):
                                            removed as a resume starts, and at the end

A copy is built beside its place, then renamed in, so a folder is whole or absent; a
published one, and a journal entry, are fsynced with their folders before the step after
them (the rename, the record, the entry's removal), so a power cut leaves each whole or
absent too, and never a record whose copy is not on disk. A link in
a checkpoint to a file in the same folder, absolute or not, points in the copy to the copy's
own file (as it stood, a link would read the other member's later state); one to a file
elsewhere in the sweep folder is refused in one line; one outside the sweep (a dataset, say)
is kept as it is. A full disk is one line, the half-built copy removed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SweepError
from sweeper.store import paths

#: The suffix of a copy's journal entry, ``<sweep>/.pbt/<trial id>/<epoch>.copy``.
JOURNAL = ".copy"


@dataclass(frozen=True)
class Copying:
    """A copy under way: ``trial_id`` goes on from ``source`` (a published checkpoint) after
    ``epoch``, with ``params``, its lineage naming ``copied_from``."""

    trial_id: str
    epoch: int
    source: str
    params: dict[str, Any]
    copied_from: str


def begin(pbt_folder: str, job: Copying) -> str:
    """The copy's journal entry, written whole before anything is copied; its path."""
    path = os.path.join(pbt_folder, job.trial_id, f"{job.epoch}{JOURNAL}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with paths.atomic(path) as f:
            json.dump({"epoch": job.epoch, "source": job.source, "params": job.params,
                       "copied_from": job.copied_from}, f, sort_keys=True)
        _sync_up(os.path.dirname(path), 2)  # its name, and its member's folder in .pbt/
    except OSError as exc:
        raise SweepError(f"population-based training could not write {path}: {exc.strerror or exc}; "
                         "free space on its disk and run the same command again to resume") from None
    return path


def end(path: str) -> None:
    """The copy and its record are both made: its journal entry goes (durably: before anything
    the copy read from may be removed)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    _sync_dir(os.path.dirname(path))


def unfinished(pbt_folder: str) -> list[tuple[str, Copying]]:
    """The copies a killed run left under way: (journal entry, the copy), oldest epoch first."""
    found = []
    for tid in sorted(os.listdir(pbt_folder)) if os.path.isdir(pbt_folder) else []:
        folder = os.path.join(pbt_folder, tid)
        for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if entry.endswith(JOURNAL) and entry[:-len(JOURNAL)].isdigit():
                path = os.path.join(folder, entry)
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                found.append((path, Copying(tid, int(data["epoch"]), data["source"], dict(data["params"]),
                                            data["copied_from"])))
    return sorted(found, key=lambda item: item[1].epoch)


def copy(source: str, target: str, what: str, sweep: str, durable: bool = True) -> None:
    """``target`` becomes a copy of ``source`` (``what``: how a line names it; ``sweep``: the
    sweep folder), built beside it, then renamed into place; links as the module says; a full
    disk said in one line. ``durable``: on disk, its files and folders fsynced, before the
    rename, and the rename itself before this returns."""
    parent = os.path.dirname(target)
    building = os.path.join(parent, f".{os.path.basename(target)}.{uuid.uuid4().hex[:8]}")
    try:
        os.makedirs(parent, exist_ok=True)
        inside = _links(source, sweep)
        shutil.copytree(source, building, symlinks=True)
        for rel, points in inside:  # a link into its own folder: to the copy's own file
            os.remove(os.path.join(building, rel))
            os.symlink(points, os.path.join(building, rel))
        if durable:
            _sync_tree(building)
    except (OSError, shutil.Error) as exc:
        shutil.rmtree(building, ignore_errors=True)
        raise SweepError(f"population-based training could not copy {what} ({_size(source)}) to {target}: "
                         f"{_why(exc)}; free space on its disk and run the same command again to resume") from None
    old = None
    if os.path.lexists(target):
        old = os.path.join(parent, f".{os.path.basename(target)}.old.{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
    os.rename(building, target)
    if durable:
        _sync_up(parent, 3)  # the rename; and the folders a first copy made (.pbt/<member>, .pbt)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _sync_tree(folder: str) -> None:
    """Every file and folder under ``folder`` (itself included) on disk (a link is a name: its
    folder's fsync holds it)."""
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        _sync_dir(root)


def _sync_dir(folder: str) -> None:
    """The names in ``folder`` on disk (a rename, a removal, a new entry)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_up(folder: str, levels: int) -> None:
    """``folder`` and the ``levels - 1`` folders above it, fsynced (a name in each made durable)."""
    for _ in range(levels):
        _sync_dir(folder)
        folder = os.path.dirname(folder)


def _links(source: str, sweep: str) -> list[tuple[str, str]]:
    """The links in ``source`` that point inside it: (the link, where it points relative to
    the link's folder), each relative to ``source``; a link that points elsewhere in the sweep
    folder (another trial's files change) is refused in one line."""
    root, sweep = os.path.realpath(source), os.path.realpath(sweep)
    inside = []
    for folder, dirs, files in os.walk(source):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                continue
            real = os.path.realpath(path)
            rel = os.path.relpath(path, source)
            if _within(real, root):
                here = os.path.dirname(os.path.join(root, rel))
                inside.append((rel, os.path.relpath(real, here)))
            elif _within(real, sweep):
                raise SweepError(f"the checkpoint {source} holds a link, {rel} -> {os.readlink(path)}, to a file of "
                                 "the sweep outside that folder: a copy of it would read what another trial writes "
                                 "there later; save the file itself in current_trial().checkpoint")
    return inside


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _why(exc: BaseException) -> str:
    """Why a copy failed, in a few words: the first file's reason, without paths or errno."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        text = str(exc.args[0][0][-1]).split(": '")[0]  # copytree's list: (source, target, reason)
        return text.split("] ", 1)[-1] if text.startswith("[Errno") else text
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _size(folder: str) -> str:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return f"{total / 1e6:.1f} MB"


def tidy(pbt_folder: str, trials_folder: str) -> None:
    """Remove the half-built copies a killed run left: beside each published checkpoint, and
    beside each member's checkpoint folder."""
    for folder in _subfolders(pbt_folder):
        _remove_hidden(folder, "")
    for folder in _subfolders(trials_folder):
        _remove_hidden(folder, f".{paths.CHECKPOINT}.")


def _subfolders(folder: str) -> list[str]:
    entries = os.listdir(folder) if os.path.isdir(folder) else []
    return [os.path.join(folder, e) for e in entries if os.path.isdir(os.path.join(folder, e))]


def _remove_hidden(folder: str, prefix: str) -> None:
    """Half-built copies in ``folder`` (hidden folders named ``prefix``...), and journal entries
    a kill left half-written (``<epoch>.copy.tmp<pid>``: never begun, nothing to complete)."""
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        if entry.startswith(prefix or ".") and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif not prefix and f"{JOURNAL}.tmp" in entry:
            os.remove(path)


def remove(folder: str) -> str | None:
    """``folder`` removed, as far as it can be; why not, in a few words (None: it is gone)."""
    failed: list[str] = []
    shutil.rmtree(folder, onerror=lambda _f, path, exc: failed.append(f"{path}: {_why(exc[1])}"))
    if not os.path.lexists(folder):
        return None
    return failed[0] if failed else "it is still there"


def published_size(pbt_folder: str) -> str:
    """What the published checkpoints take on disk, as a line says it."""
    return _size(pbt_folder)
