"""A multirun's closing summary, said once: after its last batch, not after each.

Hydra's sweeper hands the launcher its jobs in batches (``hydra.sweeper.max_batch_size``) and
never says which batch is the last, so the summary (counts, the leaderboard, the failures,
where the table is) waits for Hydra's end of the multirun (``on_multirun_end``, which Hydra
calls on the callbacks of the multirun's context once its sweeper returns). A batch after
which the multirun may end early is summarised at once: one with a job not ``ok`` (Hydra's
basic sweeper raises on its return, and never reaches the end), or one interrupted. The
summary covers every job of the multirun so far, with what all its batches ran and how long
they took.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from sweeper.model.lifecycle import SweepEnd
from sweeper.model.trial import Status


class MultirunSummary:
    """The summary of one multirun's batches, said when the multirun may end."""

    def __init__(self, words: Callable[[str], str]) -> None:
        self.words = words
        self.began: float | None = None  #: when the first batch began
        self.ran = 0  #: jobs its batches ran
        self.last: Any = None  #: the last batch's outcome (its rows: every job of the multirun so far)
        self.ranking: tuple[str | None, str | None] = (None, None)  #: the metric and mode asked for
        self.unsaid = False  #: a batch ended since the summary was last said
        self.at_exit = False  #: whether the process's exit says what is unsaid (a failed batch, another sweeper)

    def started(self) -> None:
        """A batch begins."""
        if self.began is None:
            self.began = time.monotonic()

    def ended(self, outcome: Any, keys: set[str], ranking: tuple[str | None, str | None], hooked: bool,
              basic: bool = True) -> None:
        """A batch ended (its jobs' keys): said now where the multirun may end here (an
        interrupted batch; a failed one under Hydra's ``basic`` sweeper, which raises on it), or
        where no end of the multirun will be heard (``hooked`` False); else when it ends. Another
        sweeper may go on after a failed batch (Optuna's, within its ``max_failure_rate``) or
        raise, which skips ``on_multirun_end``: what is unsaid is then said as the process exits."""
        self.ran += outcome.ran
        self.last, self.ranking, self.unsaid = outcome, ranking, True
        failed = any(r.key in keys and r.status is not Status.OK for r in outcome.results)
        if (failed and basic) or outcome.end is SweepEnd.INTERRUPTED or not hooked:
            self.say()
        elif failed and not self.at_exit:
            import atexit

            atexit.register(self.say)
            self.at_exit = True

    def say(self) -> None:
        """The summary, through the multirun's words, if a batch ended since it was last said."""
        from sweeper.front.shown import summary

        if not self.unsaid or self.last is None:
            return
        self.unsaid = False
        elapsed = time.monotonic() - (self.began if self.began is not None else time.monotonic())
        whole = dataclasses.replace(self.last, ran=self.ran, elapsed_s=elapsed)
        for line in summary(whole, *self.ranking):
            print(self.words(line), flush=True)


def hook(callbacks: Any, closing: MultirunSummary) -> bool:
    """Have Hydra's end of the multirun say ``closing``'s summary: a callback added to the
    multirun's own (``hydra_context.callbacks``); False where they cannot take one."""
    from hydra.experimental.callback import Callback

    class AtTheEnd(Callback):
        def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
            closing.say()

        def __reduce__(self) -> Any:  # sent to a job's process (Hydra's context): a callback that says nothing
            return Callback, ()

    listed = getattr(callbacks, "callbacks", None)
    if not isinstance(listed, list):
        return False
    listed.append(AtTheEnd())
    return True
