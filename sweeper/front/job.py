"""``python -m sweeper run [--gpus IDS] [--gpu-memory SIZE] -- CMD ...``: one command as a
task-spooler user runs it (``ts python eval.py``), beside the machine's sweeps.

It waits for a card where its memory (``--gpu-memory``, its cap, plus a CUDA context beside
it) fits beside what every sweep reserved and other processes hold, and its turn in the fair
share (the sweeps leave it the room it waits for: :mod:`sweeper.placement.share`); then it runs
the command pinned to that card (``CUDA_VISIBLE_DEVICES`` by UUID) with the variables a
trial's cap is made of (:func:`sweeper.system.capping.trial_env`): JAX's fraction caps JAX;
TensorFlow only grows (``TF_FORCE_GPU_ALLOW_GROWTH``) unless the script calls
``sweeper.worker.setup()``, which makes ``SWEEPER_MEMORY_LIMIT_MB`` its exact cap; nothing caps
PyTorch (``SWEEPER_MEMORY_FRACTION`` is there for the script to apply). A command that takes
more than it said can push the sweeps' trials out of memory; their OOM is then not theirs
(:mod:`sweeper.placement.crowd`). Its output streams as it comes, and it exits with the command's
code (128 + the signal that ended it). Its record (:mod:`sweeper.placement.record`, kind
``job``) says what it holds while it runs, so the sweeps count it. Without a GPU it runs the
command at once, on the CPU, and says so.

Signals: a Ctrl-C at a terminal reaches every process of the terminal's foreground group,
the command's too: where this job is that group it passes none on (a second Ctrl-C ends the
command, SIGKILL). Elsewhere (no terminal, in the background) the command runs in a process
group of its own, and every SIGINT, SIGTERM or SIGHUP the job gets is passed on once.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Any

from sweeper.errors import SweepError
from sweeper.model.text import printable
from sweeper.placement.holders import holders, said
from sweeper.placement.neighbours import LOOK_EVERY, Neighbours
from sweeper.placement.record import Holding, Kind
from sweeper.model.devices import MARGIN
from sweeper.system import capping
from sweeper.system.gpus import Gpu, inventory

#: The job's card, what it reserves there and its cap: (Gpu, MB reserved, MB cap).
Choice = tuple[Gpu, int, int]
#: Default share of a card a job reserves without ``--gpu-memory`` (as ``--per-gpu 1``'s cap).
WHOLE = MARGIN


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{prog} run", allow_abbrev=False,
        description="Run one command on a GPU with room, beside the sweeps of this machine: it waits for its "
                    "card and its turn in their fair share, is pinned to it with its memory capped, streams its "
                    "output and exits with the command's code.")
    p.add_argument("--gpus", default="all", help="which cards it may take: all (default) or ids such as 0,2")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="what the command's framework may take on its card, such as 4GB: its cap, reserved with a "
                        f"CUDA context beside it (default: {WHOLE:.0%} of a card)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    return p


def main(argv: list[str], prog: str = "python -m sweeper") -> int:
    args = parser(prog).parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SweepError("run needs a command after --, such as: python -m sweeper run -- python eval.py")
    want = _megabytes(args.gpu_memory)
    cards = _cards(args.gpus)
    text = printable(" ".join(command))
    if not cards:
        print("sweeper: no GPU here (NVML lists none); running it on the CPU", file=sys.stderr, flush=True)
        return _run(command, {"CUDA_VISIBLE_DEVICES": "-1"}, None)
    neighbours = Neighbours(text, Kind.JOB)
    neighbours.open()
    try:
        try:
            gpu, _, cap = _wait(neighbours, cards, want, text)
        except KeyboardInterrupt:
            print("sweeper: interrupted while it waited for a card; the command did not run", file=sys.stderr)
            return 128 + signal.SIGINT
        env = {"CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
               **capping.trial_env(cap, gpu.total_mb)}
        print(f"sweeper: gpu:{gpu.index}: {text} (cap {cap} MB)", file=sys.stderr, flush=True)
        return _run(command, env, neighbours)
    finally:
        neighbours.close()


def _megabytes(value: str | None) -> int | None:
    if value is None:
        return None
    from sweeper.model.units import megabytes

    return megabytes(value, "--gpu-memory")


def _cards(which: str) -> list[Gpu]:
    """The cards the job may take (the user's CUDA_VISIBLE_DEVICES and --gpus), as NVML lists them."""
    from sweeper.model.devices import GpuSelection
    from sweeper.placement.slots import choose_gpus

    ids, known, _ = choose_gpus(GpuSelection.of(which).chosen)  # run --'s own --gpus, read as a sweep's
    return [g for g in known if str(g.index) in ids]


def _wait(neighbours: Neighbours, cards: list[Gpu], want: int | None, text: str) -> Choice:
    """The card the job runs on, once its memory fits there beside the others' and within its
    share; its reservation published under the machine's lock. Said once per cause meanwhile."""
    too_big = [g for g in cards if want is not None and want > g.total_mb]
    if len(too_big) == len(cards):
        raise SweepError(f"--gpu-memory {want} MB is more than any card here has ({max(g.total_mb for g in cards)} "
                         "MB); give less")
    while True:
        neighbours.read_round()
        with neighbours.deciding():  # its reservation published before the lock is let go
            found = _fits(neighbours, {g.index: g for g in inventory()}, cards, want)
            if found is not None:
                gpu, mb, cap = found
                neighbours.hold("job", Holding(gpu.uuid, text, 0, mb, cap))
                neighbours.admitted()
        neighbours.end_round()
        if found is not None:
            return found
        if neighbours.starved:
            raise SweepError(neighbours.starved.replace("no trial could start", "the job could not start"))
        time.sleep(LOOK_EVERY)  # NVML says nothing when memory frees: it looks again


def _fits(neighbours: Neighbours, now: dict[int, Gpu], cards: list[Gpu], want: int | None) -> Choice | None:
    """The card with the least room left once the job's memory is on it, or None (said why, published
    as what the job wants). It reserves its cap and a context (:func:`sweeper.placement.crowd.default_context`);
    a card where nothing is (no process NVML lists, no reservation) takes it where its cap fits."""
    from sweeper.placement.crowd import default_context

    best: tuple[float, Choice] | None = None
    words, keys, uuids, strangers, wanted = [], [], [], [], [1]
    for card in cards:
        gpu = now.get(card.index)
        if gpu is None:
            continue
        cap = want if want is not None else int(WHOLE * gpu.total_mb)
        mb = min(gpu.total_mb, cap + default_context(cap, gpu.total_mb))
        listed: dict[int, tuple[str, int | None]] = {pid: (str(gpu.index), q) for pid, q in gpu.processes}
        room = gpu.free_mb - neighbours.unclaimed(gpu.uuid, _held(listed))
        found = holders(listed, str(gpu.index), set(), neighbours.read(), gpu.uuid)
        need = min(mb, room) if mb > room and not listed and room == gpu.free_mb else mb
        share = neighbours.share_room(gpu.uuid, gpu.total_mb, need, room,
                                      gpu.free_mb + sum(h.mb or 0 for h in found if h.sweep))
        if max(need, cap) <= min(room, share):
            if best is None or room - need < best[0]:
                best = (room - need, (gpu, need, cap))
            continue
        owed = "; the fair share lets a sweep that waited longer go first" if share < need else ""
        words.append(f"gpu:{gpu.index} has {gpu.free_mb} MB free, the job reserves {need} MB: "
                     f"{said(found) or 'memory others reserved'}{owed}")
        keys.append(f"{gpu.index}:{sorted(h.sweep or h.pid for h in found)}:{bool(owed)}")
        uuids.append(gpu.uuid)
        wanted.append(need)
        strangers += [h for h in found if not h.sweep]
    if best is not None:
        return best[1]
    neighbours.blocked(tuple(uuids), max(wanted), "; ".join(words), "|".join(keys))
    if strangers and len(strangers) >= len(uuids):
        neighbours.starving(said(strangers))
    else:
        neighbours.starving_since = None
    return None


def _held(listed: dict[int, tuple[str, int | None]]) -> Any:
    from sweeper.system.procs import descendants

    def held(pid: int) -> int:
        tree = {pid, *descendants(pid)}
        return sum(mb or 0 for p, (_, mb) in listed.items() if p in tree)

    return held


def _run(command: list[str], env: dict[str, str], neighbours: Neighbours | None) -> int:
    """The command, its output streamed (inherited), signals passed on (see the module
    docstring); its exit code."""
    try:  # at a terminal, in this job's group (it reads the terminal, Ctrl-Z stops both); else in its own
        child = subprocess.Popen(command, env={**os.environ, **env}, process_group=None if _foreground() else 0)
    except OSError as exc:
        raise SweepError(f"cannot run {command[0]!r}: {exc.strerror}; check the command after --") from None
    if neighbours is not None:
        neighbours.started("job", child.pid)
        neighbours.publish()
    passed = {s: signal.signal(s, lambda signum, _frame: child.send_signal(signum))
              for s in (signal.SIGTERM, signal.SIGHUP)}
    asked = 0
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                asked += 1
                _pass_on(child, asked)
    finally:
        for s, old in passed.items():
            signal.signal(s, old)
    return 128 - code if code < 0 else code


def _foreground() -> bool:
    """Whether this process's group is its terminal's foreground group (a Ctrl-C there
    reaches every process in it); False without a terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _pass_on(child: subprocess.Popen, asked: int) -> None:
    """A SIGINT while the command runs: passed on where it cannot have reached the command
    (the command's process group is not this job's: its own, or one it moved to), never
    twice; a second one ends it (SIGKILL). The exit code is then the command's, as always."""
    if asked > 1:
        child.kill()
        return
    try:
        if os.getpgid(child.pid) != os.getpgrp():
            child.send_signal(signal.SIGINT)
    except ProcessLookupError:  # it ended meanwhile
        pass
