"""IMEX indices: once per (domain, node), lowest free, kept while a member; a full clique
leaves the newcomer out rather than moving anyone."""

from __future__ import annotations

import pytest

from controller.compute_domain.indices import assign_indices


def test_new_members_get_the_lowest_indices_in_the_order_given() -> None:
    placement = assign_indices({}, ["n3", "n1", "n2"], 18)
    assert dict(placement.indices) == {"n3": 0, "n1": 1, "n2": 2}
    assert placement.left_out == ()


def test_a_member_keeps_its_index_when_others_come_and_go() -> None:
    first = assign_indices({}, ["n1", "n2", "n3"], 18)
    # n1 leaves, n4 joins: n2 and n3 stay where they were, n4 fills n1's gap.
    second = assign_indices(first.indices, ["n2", "n3", "n4"], 18)
    assert dict(second.indices) == {"n2": 1, "n3": 2, "n4": 0}


def test_the_lowest_gap_is_filled_first() -> None:
    placement = assign_indices({"a": 0, "b": 3, "c": 1}, ["a", "b", "c", "d", "e"], 18)
    assert placement.indices["d"] == 2
    assert placement.indices["e"] == 4


def test_the_nineteenth_node_of_an_18_node_clique_is_left_out_and_nobody_moves() -> None:
    nodes = [f"n{i:02d}" for i in range(19)]
    placement = assign_indices({}, nodes, 18)
    assert placement.left_out == ("n18",)
    assert sorted(placement.indices.values()) == list(range(18))
    # Once one leaves, the waiting node takes the freed index; the others keep theirs.
    after = assign_indices(placement.indices, [n for n in nodes if n != "n05"], 18)
    assert after.indices["n18"] == 5
    assert all(after.indices[n] == placement.indices[n] for n in nodes if n not in ("n05", "n18"))


def test_an_index_from_a_clique_object_that_is_out_of_range_or_taken_twice_is_replaced() -> None:
    placement = assign_indices({"a": 20, "b": 1, "c": 1}, ["a", "b", "c"], 18)
    assert placement.indices["b"] == 1  # the first holder in member order keeps it
    assert placement.indices["a"] == 0
    assert placement.indices["c"] == 2


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_nodes"):
        assign_indices({}, ["n1"], 0)
