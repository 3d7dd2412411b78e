"""Per process group, the rank behind and the mismatched collectives, from Flight Recorder
dumps built by hand in the format torch writes (tests/fr_dumps.py)."""

from __future__ import annotations

import pickle

import pytest
from fr_dumps import dump, entry, two_groups_one_behind

from tb_monitor import contract
from tb_monitor.analysis.flight_recorder import group_verdicts, memberships
from tb_monitor.analysis.fr_records import collective_records, dumps_of_rows, parse_dump


def _by_group(dumps):
    return {v.group: v for v in group_verdicts(dumps)}


def test_the_rank_behind_is_named_in_its_own_group_only(torch):
    """Rank 3 is one collective behind in group 2: named there, and not in group 1 or the
    default group, where every rank is in step."""
    verdicts = _by_group(two_groups_one_behind())
    assert verdicts["2"].lagging == (3,)
    assert verdicts["2"].newest == {2: 3, 3: 2}
    assert verdicts["1"].lagging == () and verdicts["0"].lagging == ()


def test_gloo_groups_take_their_members_from_the_ranks_entries():
    """gloo leaves pg_config empty: each group's members are the ranks whose entries name it."""
    groups = memberships(two_groups_one_behind())
    assert groups == {"0": ("default_pg", (0, 1, 2, 3)), "1": ("tp", (0, 1)), "2": ("pp", (2, 3))}


def test_a_member_nccls_pg_config_names_without_entries_is_behind():
    """NCCL's pg_config names the members: one that entered none of the group's collectives is
    behind the others."""
    config = {"1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"}}
    dumps = {0: dump([entry(0, "1", 1)], config), 1: dump([entry(0, "0", 1)], config)}
    assert _by_group(dumps)["1"].lagging == (1,)


def test_a_member_without_a_dump_is_named():
    """A member whose dump is missing is listed, not taken for in step."""
    config = {"1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"}}
    assert _by_group({0: dump([entry(0, "1", 1)], config)})["1"].no_dump == (1,)


@pytest.mark.parametrize(
    ("changed", "kind"),
    [({"size": 8}, "size"), ({"dtype": "Half"}, "dtype"), ({"name": "broadcast"}, "type")],
)
def test_a_mismatched_collective_is_found_by_torchs_matcher(torch, changed, kind):
    """Rank 1's copy of group 1's second collective differs in size, dtype or type: torch's
    matcher names it and rank 1, in that group only."""
    ours = [entry(0, "1", 1), entry(1, "1", 2)]
    theirs = [entry(0, "1", 1), entry(1, "1", 2, **changed)]
    found = _by_group({0: dump(ours), 1: dump(theirs)})["1"].mismatches
    assert [(m.seq, m.kind, m.ranks) for m in found] == [(2, kind, (1,))]


def test_a_collective_still_running_elsewhere_is_no_mismatch(torch):
    """One rank's copy completed, another's still running: the lag, not a mismatch."""
    ours = [entry(0, "1", 1, state="completed")]
    theirs = [entry(0, "1", 1, state="started")]
    assert _by_group({0: dump(ours), 1: dump(theirs)})["1"].mismatches == ()


def test_torchs_flight_recorder_analysis_is_what_we_rely_on(torch):
    """The names and shapes the verdicts take from torch.distributed.flight_recorder: a torch
    that changes them fails here, not in a user's report."""
    from torch.distributed.flight_recorder.components import builder, config_manager, types

    args = config_manager.JobConfig().parse_args([])
    assert hasattr(args, "allow_incomplete_ranks") and args.just_print_entries is False
    assert {"type_of_mismatch", "mismatch_collectives", "collective_seq_id", "group_id"} <= set(
        types.Collective._fields
    )
    assert {"COLLECTIVE_TYPE_MISMATCH", "SIZE_OR_SYNTAX_MISMATCH", "COLLECTIVE_DTYPE_MISMATCH"} <= {
        state.name for state in types.MatchState
    }
    assert list(builder.build_db.__code__.co_varnames[:3]) == ["details", "args", "version"]


def test_a_pickled_dump_that_names_a_class_is_refused():
    """A dump from a store is read as plain values: one naming a class is not a dump."""
    with pytest.raises(ValueError, match="not a Flight Recorder dump"):
        parse_dump(pickle.dumps({"entries": [], "bad": pytest.raises}))


def test_a_dump_round_trips_through_the_records(torch):
    """The records an import writes make the same verdicts as the dumps they came from."""
    dumps = two_groups_one_behind()
    groups = memberships(dumps)
    rows = [
        {"name": contract.FR_COLLECTIVE, "metadata": data}
        for rank, d in dumps.items()
        for _, data in collective_records(rank, d, groups, now=0.0)
    ]
    assert group_verdicts(dumps_of_rows(rows)) == group_verdicts(dumps)


def test_a_gloo_collective_ends_when_the_rank_began_its_next():
    """gloo times no end: a collective pg_status counts completed ends as the rank's next
    begins; one not completed is open, up to the newest entry of any rank."""
    d = dump([entry(0, "1", 1), entry(5, "1", 2), entry(9, "1", 3)], completed={"1": 2})
    records = collective_records(0, d, memberships({0: d}), now=1_700_000_001.0)
    ends = [(round(data["end"] - begin, 4), data["open"]) for begin, data in records]
    assert ends == [
        (0.005, False),
        (0.004, False),
        (0.991, True),
    ]
