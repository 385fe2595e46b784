"""The sweep's own record in its ledger: typed, read the same by every
reader, and a ledger from before a key existed reads as the field's default."""

from __future__ import annotations

import json

import pytest

from sweeper.store.facts import SweepFacts, encoded, run_key
from sweeper.store.ledger import Ledger


@pytest.mark.unit
def test_the_record_reads_back_as_written_with_its_types(tmp_path):
    ledger = Ledger(str(tmp_path))
    try:
        assert ledger.facts() == SweepFacts()  # nothing on record: every default
        ledger.put_facts(uid="u1", total=12, log_scale=["lr"], definition={"seed": 3, "what": "f"},
                         environment={"python": "3.11"}, metric="val_loss", mode="min",
                         one_run=("r1", {"environment": {"python": "3.11"}, "target": None}))
        facts = ledger.facts()
        assert (facts.uid, facts.total, facts.log_scale, facts.definition) == ("u1", 12, ["lr"], {"seed": 3, "what": "f"})
        assert (facts.metric, facts.mode, facts.search, facts.target) == ("val_loss", "min", "", None)
        assert ledger.run_record("r1") == {"environment": {"python": "3.11"}, "target": None}
        assert ledger.run_record("nope") is None
        assert ledger.ranking() == ("val_loss", "min")
    finally:
        ledger.close()


@pytest.mark.unit
def test_values_an_earlier_release_wrote_read_the_same():
    """The keys and encodings on disk are those sweeper has always written: text, a number
    as text, JSON; an empty value is the default."""
    on_disk = {"total": "7", "log_scale": json.dumps(["a", "b"]), "metric": "", "definition": '{"seed": 1}',
               run_key("x"): "{}"}
    facts = SweepFacts.read(on_disk.get)
    assert (facts.total, facts.log_scale, facts.metric, facts.definition) == (7, ["a", "b"], "", {"seed": 1})
    assert dict(encoded(total=7, log_scale=["a", "b"], metric="")) == {"total": "7", "log_scale": '["a", "b"]',
                                                                      "metric": ""}
    with pytest.raises(TypeError, match="not facts of a sweep: colour"):
        encoded(colour="red")
