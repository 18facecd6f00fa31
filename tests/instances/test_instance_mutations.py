"""The fuzz's mutation strategies draw the same files on a replay: they never edit shared state."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.instance_mutations import ODD_VALUES, _odd_value, scaled

MUTABLE_ODD_VALUES = [v for v in ODD_VALUES if isinstance(v, list | dict)]


@given(data=st.data(), old=st.sampled_from([None, "x", 3, [1]]))
def test_an_odd_value_is_a_fresh_object(data: st.DataObject, old: Any) -> None:
    # A document edited after the draw must not edit the module's table of odd values: the next
    # draw would see another table, and hypothesis fails the replay with FlakyStrategyDefinition.
    value = data.draw(_odd_value(old))
    assert not any(value is shared for shared in MUTABLE_ODD_VALUES)


def test_an_integer_past_float_range_is_scaled_without_overflow() -> None:
    # An earlier edit may leave 10**400 in a field; scaling it by 1e-300 raised OverflowError
    # inside the strategy and failed the slow 10k fuzz in CI.
    assert scaled(10**400, 1e-300) == 0
    assert scaled(-(10**400), 2.0) == -2 * 10**400
    assert scaled(3, 0.5) == 1.5
