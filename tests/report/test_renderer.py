"""The report's renderer is started ahead of the report step by a CLI call that runs in one
process: a thread draws one point and ends; a failure there is left to the report step."""

import threading

import pytest

from trajectory_assets.report import renderer


@pytest.fixture(autouse=True)
def not_started(monkeypatch):
    monkeypatch.setattr(renderer, "_started", None)


def test_warm_up_draws_in_a_thread_of_its_own_and_ends(monkeypatch):
    import vl_convert

    drawn = []
    real = vl_convert.vegalite_to_svg
    monkeypatch.setattr(vl_convert, "vegalite_to_svg",
                        lambda spec, **kwargs: drawn.append(threading.current_thread().name) or real(spec, **kwargs))
    thread = renderer.warm_up()
    thread.join(timeout=60)
    assert not thread.is_alive() and thread.daemon
    assert drawn == ["vl-convert warm-up"]
    assert renderer.warm_up() is thread and drawn == ["vl-convert warm-up"]  # once per process


def test_a_failed_warm_up_raises_nothing_anywhere(monkeypatch):
    import vl_convert

    def broken(spec, **kwargs):
        raise RuntimeError("no renderer")

    raised = []
    monkeypatch.setattr(vl_convert, "vegalite_to_svg", broken)
    monkeypatch.setattr(threading, "excepthook", raised.append)
    thread = renderer.warm_up()
    thread.join(timeout=60)
    assert not thread.is_alive() and raised == []  # left to the report step, which meets it as its own
