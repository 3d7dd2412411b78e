"""Request parsing shared by every route: one reader per parameter type, one error naming it."""

from __future__ import annotations

import pytest

from tb_plugin.requests import Query, RankQuery, RequestError, Window, event_id

BAD_WINDOWS = [
    ({"start": "abc"}, "start"),
    ({"end": "nan"}, "end"),
    ({"start": "5", "end": "1"}, "start"),
    ({"start": "-1.7e308", "end": "1.7e308"}, "too wide"),
    ({"width": "0"}, "width"),
    ({"width": "\u0663"}, "width"),  # an Arabic-Indic digit: int() takes it, the route must not
]


@pytest.mark.parametrize(("args", "name"), BAD_WINDOWS)
def test_both_views_refuse_a_bad_window_with_the_same_message(args, name):
    """The timeline's and the Ranks view's queries read the window alike and fail alike."""
    with pytest.raises(RequestError, match=name) as timeline:
        Query.from_args(args)
    with pytest.raises(RequestError) as ranks:
        RankQuery.from_args(args)
    assert str(timeline.value) == str(ranks.value)


def test_both_views_read_the_same_window():
    """The same start, end and width give both queries the same window."""
    args = {"start": "10", "end": "20.5", "width": "640", "kind": "worker", "generation": "3"}
    assert Window.parse(args) == {"start": 10.0, "end": 20.5, "width": 640}
    assert Query.from_args(args).start == RankQuery.from_args(args).start == 10.0
    assert RankQuery.from_args(args).generation == 3


@pytest.mark.parametrize("raw", ["-1", "x", "1" * 19, "\uff11"])
def test_a_bad_generation_names_the_parameter_and_its_value(raw):
    """A generation that is not a short run of ASCII digits is an error naming both."""
    with pytest.raises(RequestError, match=f"generation.*{raw[:10]}"):
        RankQuery.from_args({"generation": raw})


@pytest.mark.parametrize("raw", ["", "-1", "1e3", "9" * 19])
def test_a_bad_event_id_names_the_parameter(raw):
    """An event id that is absent or not a short run of ASCII digits is an error naming ``id``."""
    with pytest.raises(RequestError, match="id must be"):
        event_id({"id": raw})
