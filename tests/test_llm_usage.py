"""Usage records and the per-(stage, side) ledger: sums, JSON round trip, merging."""

from __future__ import annotations

import json
import pickle

import pytest

from rg.llm.usage import Usage, UsageLedger

A = Usage(prompt_tokens=10, completion_tokens=2, total_tokens=12, calls=1, retries=1, latency_s=0.5)
B = Usage(prompt_tokens=5, completion_tokens=1, total_tokens=6, calls=2, failures=1, latency_s=0.25)


def test_usage_adds_fieldwise_and_is_frozen():
    assert A + B == Usage(15, 3, 18, 3, 1, 1, 0.75)
    with pytest.raises(AttributeError):
        A.calls = 3  # type: ignore[misc]


def test_ledger_sums_per_stage_and_side():
    ledger = UsageLedger()
    ledger.add("refine", "hand", A)
    ledger.add("refine", "hand", A)
    ledger.add("refine", "brain", B)
    ledger.add("read", "hand", B)
    assert ledger.get("refine", "hand") == A + A
    assert ledger.get("verify", "brain") == Usage()
    assert ledger.by_stage() == {"refine": A + A + B, "read": B}
    assert ledger.by_side() == {"hand": A + A + B, "brain": B}
    assert ledger.total() == A + A + B + B


def test_ledger_rejects_bad_keys():
    ledger = UsageLedger()
    with pytest.raises(ValueError, match="side must be one of"):
        ledger.add("refine", "cloud", A)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stage must be a non-empty"):
        ledger.add("", "hand", A)


def test_round_trip_through_json_and_pickle():
    ledger = UsageLedger()
    ledger.add("refine", "brain", A)
    ledger.add("read", "hand", B)
    data = json.loads(json.dumps(ledger.to_dict()))
    assert data["total"]["calls"] == 3
    assert UsageLedger.from_dict(data) == ledger
    assert pickle.loads(pickle.dumps(ledger)) == ledger
    with pytest.raises(ValueError, match="'stages' mapping"):
        UsageLedger.from_dict({"refine": {}})
    with pytest.raises(ValueError, match=r"unknown Usage fields \['tokens'\]"):
        Usage.from_dict({"tokens": 3})


def test_merge_adds_other_ledgers():
    driver, actor_1, actor_2 = UsageLedger(), UsageLedger(), UsageLedger()
    driver.add("refine", "hand", A)
    actor_1.add("refine", "hand", B)
    actor_2.add("read", "brain", A)
    for shipped in (actor_1.to_dict(), actor_2.to_dict()):
        driver.merge(UsageLedger.from_dict(shipped))
    assert driver.get("refine", "hand") == A + B
    assert driver.get("read", "brain") == A
    assert actor_1.get("refine", "hand") == B  # merging leaves the source unchanged
