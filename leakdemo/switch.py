"""A protocol, attack or defense switched as the Lab's sidebar switches it: the new component with its own
defaults, the values both take kept; and a source of data switched, with what it refuses made to fit. The
engine's, not the page's: the run store reads a run switched in the Lab against the same switch (what it changed
beyond the new protocol's defaults), and the page's links are read through it."""
from __future__ import annotations

import re

from . import catalog
from .errors import ParamError
from .scenario import Scenario, presets, resolve
from .words import value_text

COMPONENTS = ("protocol", "attack", "defense")


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
    new, notes = refit(base, change, current.preset)
    return new, [dropped] * bool(dropped) + notes


def refit(base: dict, change: dict, preset: str | None, check=None) -> tuple[Scenario, list[str]]:
    """resolve(base, change), where each value of base that change makes refused goes back to its default and
    is said; where the default is refused too, it takes the value a preset made for the change gives it
    (PLI's 10 private classes of 40 faces, switched to the 10 digits: pli-digits' 5). check: what else the
    scenario must pass (data.check_source: CAFE's 200 samples on the 100 faces)."""
    wanted, base, change, notes, borrowed = change, dict(base), dict(change), [], {}
    while True:
        try:
            new = resolve(base, change, preset=preset)
            if check is not None:
                check(new)
            break
        except ParamError as e:  # one kept value the new component refuses: its default instead, said
            if e.name in COMPONENTS or e.name in change:
                raise
            if e.name in base:
                old = base.pop(e.name)
            elif e.name not in borrowed and (made := _made_for(wanted, {**base, **change}, e.name)):
                borrowed[e.name], change[e.name] = made  # the default refused too
                if any(key == e.name for key, _, _ in notes):
                    continue
                old = catalog.params_for(*({**base, **change}[k] for k in COMPONENTS))[e.name].default
            else:
                raise
            # the note says the refused value first: the message's closing "got 8" goes
            got = rf"[;,]? \(?got (?:{re.escape(e.name)}=)?{re.escape(value_text(old))}\)?$"
            notes.append((e.name, old, re.sub(got, "", str(e).removeprefix(f"{e.name}: "))))
    return new, [f"{key} is {_now(key, new, borrowed)} — {value_text(old)} is refused there: {why}"
                 for key, old, why in notes]


def _made_for(wanted: dict, kind: dict, key: str) -> tuple[str, object] | None:
    """(preset, its value for key) of the first preset of kind's protocol and attack that sets wanted's values
    (those beyond the components) as wanted does, and key."""
    values = {k: v for k, v in wanted.items() if k not in COMPONENTS}
    for name, p in presets().items():
        if (values and key in p.params and all(p.params.get(k) == kind[k] for k in ("protocol", "attack"))
                and all(p.params.get(k) == v for k, v in values.items())):
            return name, p.params[key]
    return None


def _now(key: str, new: Scenario, borrowed: dict) -> str:
    if key in borrowed:
        return f"now {value_text(new[key])}, as preset {borrowed[key]} has it"
    return f"back at its default, {value_text(new[key])}"
