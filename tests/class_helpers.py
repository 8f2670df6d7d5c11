"""A student's page without a browser, for the classroom tests: the page's events chained as gradio chains them (the
timer's script reads the stage key from ``/class/stage`` into a box; a key that changed runs its redraw), every
output kept as the page would hold it, and everything the page was sent kept for the secret checks."""
from __future__ import annotations

import json
from typing import Any

import gradio as gr
from gradio.components.plot import PlotData

from components.pages.classroom import student as st
from components.serving.classroom.http import stage_key

SKIP = gr.skip()


def plain(value: Any) -> Any:
    """An output as the page would be sent it (components as their updates, PlotData as its JSON)."""
    if isinstance(value, (gr.components.Component, gr.blocks.BlockContext)):
        return {k: plain(v) for k, v in value._constructor_args[0].items()}
    if isinstance(value, PlotData):
        return value.model_dump()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def sent_text(outputs: Any) -> str:
    return json.dumps(plain(outputs), default=repr)


KEYS = {"live_key": (st.live_of, st.LIVE)}        # a key that changed, and the redraw its change event runs


class Page:
    """One student's page: join on load, then ``tick()`` as its timer does."""

    def __init__(self, store: Any, code: Any, ids: Any = None) -> None:
        self.store = store
        self.shown: dict[str, Any] = {}
        self.props_of: dict[str, dict] = {}          # each output's properties as the page holds them
        self.state: dict[str, Any] = {"me": None, "code": "", "stage": "", "live_key": None, "gone": False,
                                      "ids": ids}
        self.sent: list[Any] = []
        self.redraws = 0
        self._take(st.JOIN, st.join_class(store, code, ids))

    # what the page holds
    @property
    def me(self) -> Any:
        return self.state["me"]

    @property
    def ids(self) -> Any:
        return self.state["ids"]

    def __getitem__(self, name: str) -> Any:
        """The value of an output as drawn (a component update's ``value`` where it has one)."""
        v = self.shown.get(name)
        return plain(v)["value"] if isinstance(v, gr.components.Component) and "value" in plain(v) else v

    def props(self, name: str) -> dict:
        """An output's properties as the page holds them (its updates and values merged)."""
        return self.props_of.get(name, {})

    # the events
    def _take(self, names: tuple[str, ...], outputs: Any) -> None:
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        self.sent.append(outputs)
        changed = []
        for name, value in zip(names, outputs):
            if value == SKIP:
                continue
            if name in self.state:
                if self.state[name] != value:
                    changed.append(name)
                self.state[name] = value
            elif isinstance(value, (gr.components.Component, gr.blocks.BlockContext)):
                self.shown[name] = value
                self.props_of[name] = {**self.props_of.get(name, {}), **plain(value)}
            else:
                self.shown[name] = value
                self.props_of[name] = {**self.props_of.get(name, {}), "value": plain(value)}
        for name in changed:
            self._changed(name)

    def _changed(self, name: str) -> None:
        if name == "stage":
            self.redraws += 1
            self._take(st.REFRESH, st.refresh_class(self.store, self.me))
        elif name in KEYS:
            fn, names = KEYS[name]
            self._take(names, fn(self.store, self.me))
        elif name == "gone":
            self._take(st.STOP, st.stop_following(self.state["gone"]))

    def tick(self) -> bool:
        """The timer's poll (the page's script, asking ``/class/stage``); whether the page redrew anything."""
        before = self.redraws
        if self.state["code"]:
            self._take(("stage",), stage_key(self.store, self.state["code"]))
        return self.redraws > before

    def send(self, slider: Any = None, radio: Any = None, touched: bool = True) -> str:
        said = st.send_guess(self.store, self.me, slider, radio, touched)
        self.sent.append(said)
        self.shown["status"] = said
        return said

    def everything_sent(self) -> str:
        return sent_text(self.sent)
