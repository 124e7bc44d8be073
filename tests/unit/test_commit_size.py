"""How many records a commit takes: the records' cap, the bytes' cap at the records' size, and
when a batch's records ask the job to plan its commits again."""

import pytest
from pydantic import ValidationError

from floe_sparkapp.commit_size import CommitSize, records_per_commit
from floe_sparkapp.contract import CommitSpec

MIB = 1024 * 1024


def test_the_defaults_take_two_million_small_records_and_half_a_gib_of_large_ones():
    commit = CommitSpec()
    assert records_per_commit(commit, None) == 2_000_000
    assert records_per_commit(commit, 100) == 2_000_000  # ~190 MiB: the records' cap
    assert records_per_commit(commit, 1000) == 512 * MIB // 1000  # the bytes' cap
    assert records_per_commit(commit, 10 * MIB) == 51
    assert records_per_commit(commit, 2 * 512 * MIB) == 1  # never none


def test_the_bytes_cap_takes_the_units_the_resource_writes():
    assert CommitSpec(maxBytesPerCommit="1Gi").max_bytes_per_commit_bytes == 1024 * MIB
    assert CommitSpec(maxBytesPerCommit="64m").max_bytes_per_commit_bytes == 64 * MIB
    assert CommitSpec(maxBytesPerCommit="100M").max_bytes_per_commit_bytes == 100_000_000
    with pytest.raises(ValidationError, match="must be at least 1Mi"):
        CommitSpec(maxBytesPerCommit="512Ki")
    with pytest.raises(ValidationError):
        CommitSpec(maxBytesPerCommit="lots")


def test_records_much_larger_than_sampled_plan_the_commits_again():
    size = CommitSize(CommitSpec(), sampled=100)
    assert size.limit == 2_000_000
    size.observe(rows=5_000, size=5_000 * 150)  # larger, not by DRIFT: nothing
    assert size.replan is None
    size.observe(rows=5_000, size=5_000 * 1_000)  # a commit of 2M would be ~1.9 GiB
    assert size.replan == 512 * MIB // 1_000
    size.replanned()  # the next start: the batch's size counts beside a new sample's
    assert size.replan is None
    assert CommitSize(CommitSpec(), sampled=100, observed=size.observed).limit == 512 * MIB // 1_000


def test_smaller_records_plan_larger_commits_only_when_a_batch_was_full():
    size = CommitSize(CommitSpec(), observed=10_000)
    assert size.limit == 512 * MIB // 10_000
    size.observe(rows=1_000, size=1_000 * 100)  # a caught-up topic: its batches stay small
    assert size.replan is None
    size.observe(rows=size.limit, size=size.limit * 100)  # a backlog cut short by the cap
    assert size.replan == 2_000_000


def test_small_records_ahead_of_large_ones_do_not_make_a_commit_overshoot():
    size = CommitSize(CommitSpec(), sampled=10_000)  # the topic's newest records are large
    size.observe(rows=size.limit, size=size.limit * 100)  # its oldest are small
    assert size.replan is None


def test_a_few_records_say_nothing_unless_they_overshoot_the_cap():
    commit = CommitSpec(maxRecordsPerCommit=1000, maxBytesPerCommit="1Mi")
    size = CommitSize(commit)
    size.observe(rows=10, size=10 * 10_000)  # 10 KB records, but only ten: not yet
    assert size.replan is None and size.limit == 1000
    size.observe(rows=10, size=10 * 200_000)  # ten records over the cap already
    assert size.replan == MIB // 200_000
