"""Candidate grids 𝒯 and the endpoint (``pd:cor:depth``)."""

import pytest

from depthtraj.analysis.core.grid import Grid, format_depths, parse_grid, quarter_depths, resolve_endpoint

ALL32 = list(range(1, 33))


@pytest.mark.parametrize(
    "T, want",
    [(32, (8, 16, 24)), (4, (1, 2, 3)), (8, (2, 4, 6)), (6, (1, 3, 4)), (2, (1,)), (3, (1, 2)), (1, ())],
)
def test_quarter_is_floor_of_quarters(T, want):
    # T*j // 4 for j = 1..3, zeros dropped, duplicates merged (T=2: {0, 1, 1} -> {1})
    assert quarter_depths(T) == want


def test_spellings():
    assert parse_grid("quarter", ALL32, 32).depths == (8, 16, 24)
    assert parse_grid("native", ALL32, 32).depths == tuple(range(1, 32))
    assert parse_grid("native", [4, 8, 16, 32], 16).depths == (4, 8)
    assert parse_grid("24,8,16,8", ALL32, 32).depths == (8, 16, 24)
    assert parse_grid(" 4:31 ", ALL32, 32).depths == tuple(range(4, 32))  # inclusive both ends
    assert parse_grid("5:5", ALL32, 32).depths == (5,)
    g = parse_grid("quarter", ALL32, 32)
    assert g.name == "quarter" and g.endpoint == 32 and list(g.weights) == [8, 8, 8]


@pytest.mark.parametrize(
    "spec, recorded, T, message",
    [
        ("4:32", ALL32, 32, "grid '4:32': depth 32 is not below the endpoint T=32"),
        ("8,40", ALL32, 32, "grid '8,40': depth 40 is not below the endpoint T=32"),
        ("quarter", [1, 2, 4, 32], 32, "grid 'quarter': depths 8,16,24 are not recorded in the store (recorded: 1,2,4,32)"),
        ("1:5", [2, 4, 8], 8, "grid '1:5': depths 1,3,5 are not recorded in the store (recorded: 2,4,8)"),
        ("0,2", ALL32, 32, "grid '0,2': depth 0 is not recorded in the store"),
        ("9:3", ALL32, 32, "grid '9:3': range end 3 is below its start 9"),
        ("every", ALL32, 32, "grid 'every' not understood"),
        ("1;2", ALL32, 32, "grid '1;2' not understood"),
    ],
)
def test_bad_grids_name_the_depths(spec, recorded, T, message):
    with pytest.raises(ValueError) as exc:
        parse_grid(spec, recorded, T)
    assert str(exc.value).startswith(message)


def test_endpoint():
    assert resolve_endpoint([1, 2, 4], None) == 4
    assert resolve_endpoint([1, 2, 4], 2) == 2
    with pytest.raises(ValueError, match=r"endpoint 3 is not a recorded depth \(recorded: 1,2,4\)"):
        resolve_endpoint([1, 2, 4], 3)


def test_grid_checks_itself_and_formats():
    with pytest.raises(ValueError):
        Grid("x", (3, 2), 8)
    with pytest.raises(ValueError):
        Grid("x", (2, 8), 8)
    assert format_depths(range(1, 32)) == "1:31" and format_depths([8, 16]) == "8,16" and format_depths([]) == "{}"
