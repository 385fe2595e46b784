"""Population-based training through the real engine in fake time: a backend that plays each
member's process (an epoch a second or so, its checkpoint written before each report, a pause
heard at its report, a death where the test says), so whole populations, synchronous or not,
with a burn-in and a member that dies, run in milliseconds to their end, and never hang."""

from __future__ import annotations

import heapq
import itertools
import os
import select
from typing import Any

import pytest

import sweeper
from sweeper.model import contract
from sweeper.model.protocol import Answer, Began, Decision, Exited, Reports, Result, Traits
from sweeper.model.space import Space
from sweeper.model.trial import Status
from sweeper.search import pbt
from sweeper.run.engine import Engine
from sweeper.run.planning import plan
from sweeper.store.ledger import Ledger

pytestmark = pytest.mark.unit
EPOCHS = 12


class Members:
    """A backend in fake time playing members: member ``i`` trains an epoch every ``1 + 0.3 i``
    seconds, its accuracy growing by its lr; ``dies``: the member names that die (SIGSEGV) as
    their second segment starts. Two at a time; each report waits for its answer."""

    def __init__(self, dies: tuple[str, ...] = ()) -> None:
        self.now = 1000.0
        self.traits = Traits(2, stop_word="killed", answers=True)
        self.pending: list[tuple[float, int, str, Any]] = []
        self.order = itertools.count()
        self.state: dict[str, dict[str, Any]] = {}
        self.dies = dies
        self.starts = 0

    def clock(self) -> float:
        return self.now

    def _at(self, dt: float, tid: str, event: Any) -> None:
        heapq.heappush(self.pending, (self.now + dt, next(self.order), tid, event))

    def open(self) -> None:
        pass

    def start(self, spec: Any) -> Began:
        self.starts += 1
        path = os.path.join(spec.checkpoint, "state")
        epoch, acc = (0, 0.0)
        if os.path.exists(path):
            epoch_s, acc_s = open(path).read().split()
            epoch, acc = int(epoch_s), float(acc_s)
        assert epoch == int(spec.env.get(contract.RESUMED_EPOCH, 0)), "resumed from another epoch than its checkpoint's"
        self.state[spec.trial_id] = {"spec": spec, "epoch": epoch, "acc": acc,
                                     "step": 1 + 0.3 * int(spec.name.split("_")[1].split(".")[0])}
        if spec.name in self.dies and epoch > 0:
            self._at(0.5, spec.trial_id, Exited(-11))
        else:
            self._step(spec.trial_id)
        return Began(self.starts, "cpu")

    def _step(self, tid: str) -> None:
        s = self.state[tid]
        if s["epoch"] == EPOCHS:
            self._at(0.1, tid, Result(Status.OK, {"acc": s["acc"]}, "", None))
            self._at(0.2, tid, Exited(0))
            return
        s["epoch"] += 1
        s["acc"] += s["spec"].params["lr"] * (1 - s["acc"])
        with open(os.path.join(s["spec"].checkpoint, "state"), "w") as f:  # saved, then reported
            f.write(f"{s['epoch']} {s['acc']}")
        self._at(s["step"], tid, Reports([{"epoch": s["epoch"], "metrics": {"acc": s["acc"]}, "t": 0.0}]))

    def wait(self, timeout: float | None, wake: int, queued: int) -> list[tuple[str, Any]]:
        if select.select([wake], [], [], 0)[0]:
            return []
        assert self.starts < 300, "the population kept going"
        nxt = self.pending[0][0] if self.pending else None
        if nxt is None or (timeout is not None and self.now + timeout < nxt):
            assert timeout is not None, "nothing runs and the engine waits forever: the population hangs"
            self.now += timeout
            return []
        self.now = max(self.now, nxt)
        events = []
        while self.pending and self.pending[0][0] <= self.now:
            _, _, tid, event = heapq.heappop(self.pending)
            events.append((tid, event))
        return events

    def tell(self, trial_id: str, message: Any) -> None:
        assert isinstance(message, Answer)
        if message.decision is Decision.PAUSE:  # it hears the pause at its report and leaves
            self._at(0.05, trial_id, Result(Status.INTERRUPTED, {}, f"paused: {message.why}", None))
            self._at(0.1, trial_id, Exited(0))
        else:
            self._step(trial_id)

    def cancel(self, trial_id: str, hard: bool) -> None:
        self.pending = [p for p in self.pending if p[2] != trial_id]
        heapq.heapify(self.pending)
        self._at(0, trial_id, Exited(-9 if hard else -15))

    def drain(self, trial_id: str) -> list[Any]:
        return []

    def close(self) -> list[Any]:
        return []


def play(tmp_path: Any, backend: Members, **how: Any) -> tuple[dict[str, Any], pbt.Population, Ledger]:
    """A population of 4 through the engine; its rows by name, the scheduler, the ledger (open)."""
    made: list[Any] = []
    specs = plan([{"lr": 0.05 * (i + 1)} for i in range(4)], str(tmp_path), seed=0)
    specs = [s.__class__(**{**s.__dict__, "name": f"member_{i}", "dir": str(tmp_path / f"member_{i}")})
             for i, s in enumerate(specs)]

    def make_spec(params: Any, name: str) -> Any:
        spec = plan([params], str(tmp_path), seed=0, taken={s.trial_id for s in specs + made})[0]
        spec = spec.__class__(**{**spec.__dict__, "name": name, "dir": str(tmp_path / name)})
        made.append(spec)
        return spec

    ledger = Ledger(str(tmp_path))
    population = pbt.Population(specs, Space.searched({"lr": sweeper.uniform(0.01, 0.5)}),
                                pbt.PbtSettings(population=4, interval=2, **how), "acc", "max",
                                str(tmp_path / ".pbt"), 0, ledger.set_schedule, make_spec)
    Engine(backend, ledger, clock=backend.clock).run(population)
    rows = {r.name: r for r in ledger.results().values()}
    return rows, population, ledger


@pytest.mark.parametrize("synch", [False, True])
@pytest.mark.parametrize("burn_in", [0, 6])
def test_a_population_runs_to_its_end_in_fake_time_whatever_its_mode(tmp_path, synch, burn_in):
    rows, population, ledger = play(tmp_path, Members(dies=("member_2",)), synch=synch, burn_in=burn_in)
    try:
        # every member has a row: member_2 crashed, its replacement (a copy of a top member) ran on
        assert rows["member_2"].status is Status.CRASHED
        assert sorted(n for n, r in rows.items() if r.status is Status.OK) == [
            "member_0", "member_1", "member_2.r1", "member_3"]
        assert all(r.epoch_reached == EPOCHS for n, r in rows.items() if n != "member_2")
        assert ledger.running() == []
        # decisions only at the interval's epochs from the burn-in on, and none at the last epoch
        copied = [epoch for _, epoch, _ in population.lineage]
        assert copied and all(e % 2 == 0 and e >= max(burn_in, 2) and e < EPOCHS for e in copied)
        for name, row in rows.items():  # every epoch once, in order: one continuous curve each
            epochs = [e for e, _, _ in ledger.epochs(row.trial_id)]
            first = epochs[0] if epochs else 1
            assert epochs == list(range(first, row.epoch_reached + 1 if row.epoch_reached else first)), name
    finally:
        ledger.close()
