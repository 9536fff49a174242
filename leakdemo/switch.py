"""A protocol, attack or defense switched as the Lab's sidebar switches it: the new component with its own
defaults, the values both take kept. The engine's, not the page's: the run store reads a run switched in the Lab
against the same switch (what it changed beyond the new protocol's defaults), and the page's links are read
through it."""
from __future__ import annotations

import re

from . import catalog
from .errors import ParamError
from .scenario import Scenario, resolve
from .words import value_text


def switch(current: Scenario, name: str, value) -> tuple[Scenario, list[str]]:
    """A protocol/attack/defense change: the new component starts from its own defaults; and a note for each
    value kept that the new component refuses, which goes back to its default instead.

    A new protocol brings its own attack (the first one made for it: DLM on FedAvg, CAFE on vertical FL),
    keeps the defense when it applies, and takes its own defaults wherever they differ from the old
    protocol's (vertical FL's digits, 16 px and batches of 40 replace FedSGD's photo, 32 px and batch 1). A value
    both take but only the old one allows — 8-px images, switching to FedGEMS — left the switch half done: the
    protocol list said FedGEMS, the attack stayed DLG, and two errors stood beside Run."""
    change = {name: value}
    base = dict(current.params)
    dropped = None
    if name == "protocol" and value != current["protocol"]:
        native = [a for a in catalog.attacks_for(value) if catalog.ATTACKS[a].protocols[0] == value]
        if catalog.ATTACKS[current["attack"]].protocols[0] != value:
            change["attack"] = (native or catalog.attacks_for(value))[0]
        if current["defense"] not in catalog.defenses_for(value):  # said: a defense gone without a word read as
            change["defense"] = catalog.defenses_for(value)[0]  # a result that holds under it
            theirs = ", ".join(catalog.defense_name(d) for d in catalog.defenses_for(value) if d != "none")
            dropped = (f"{catalog.defense_name(current['defense'])} does not apply to "
                       f"{catalog.PROTOCOLS[value].title.split(' — ')[0]}, so no defense now (its own: {theirs})")
        old, new = catalog.PROTOCOLS[current["protocol"]], catalog.PROTOCOLS[value]
        for p in new.params:
            before = old.param(p.name)
            if before is None or before.default != p.default:
                base.pop(p.name, None)
        if base.get("data") != current["data"] or "data" not in base:
            base.pop("images", None)
    notes = []
    while True:
        try:
            new = resolve(base, change, preset=current.preset)
            break
        except ParamError as e:  # one kept value the new component refuses: its default instead, said
            if e.name not in base or e.name in change or e.name in ("protocol", "attack", "defense"):
                raise
            old = base.pop(e.name)  # the note says the refused value first: the message's closing "got 8" goes
            got = rf"[;,]? \(?got (?:{re.escape(e.name)}=)?{re.escape(value_text(old))}\)?$"
            notes.append((e.name, old, re.sub(got, "", str(e).removeprefix(f"{e.name}: "))))
    return new, [dropped] * bool(dropped) + [
        f"{key} is back at its default, {value_text(new[key])} — {value_text(old)} is refused there: {why}"
        for key, old, why in notes]
