"""The scenario as the page holds it: query string <-> Scenario <-> widget values (no layout here)."""
from __future__ import annotations

from typing import Mapping, NamedTuple

from .. import catalog
from ..errors import LeakdemoError, ParamError
from ..scenario import Scenario, load_preset, presets, resolve, unknown_preset_hint
from ..switch import refit, switch

DEFAULT_PRESET = "dlg"


class Ignored(NamedTuple):
    """A link's value the page did not take: why, and whether a value of the page's own stands in its place (a
    bad seed: the preset's seed); a name that nothing here takes (`bogus=1`) has no value for one to replace."""
    text: str
    replaced: bool = True


def one_each(link) -> tuple[dict[str, str], dict[str, str]]:
    """A link's keys with one value each, and a note for each key given twice with different values: ambiguous,
    as `--set` twice is on the command line, so it is dropped and said (Streamlit alone keeps the last in
    silence). The same value given twice is kept. link: st.query_params (its keys, and get_all of each)."""
    query, notes = {}, {}
    for key in link:
        values = link.get_all(key)
        distinct = list(dict.fromkeys(values))
        if len(distinct) == 1:
            query[key] = distinct[0]
        else:  # get_all of a key the link has is never empty
            notes[key] = f"{key} (given {len(values)} times: {' and '.join(repr(v) for v in distinct)})"
    return query, notes


def refused(key: str, value, e: LeakdemoError) -> Ignored:
    """Why a link's `key=value` was dropped. A value refused for another parameter's sake is named as given, with
    the other one's rule as why: `?preset=cafe&n_samples=10` read "Ignored from the link: batch_size: must be at
    most n_samples (10), got 40. Using the default instead.", as if batch_size had gone, where n_samples went
    back to 200."""
    if not isinstance(e, ParamError):
        return Ignored(str(e))
    if e.name == key:
        return Ignored(e.short, not e.foreign)
    return Ignored(f"{key}={value} ({e.short})")


def one_by_one(check, values: dict) -> tuple[dict, dict[str, Ignored]]:
    """The link's values that `check` (values -> None, raising LeakdemoError) accepts, added one at a time, and
    why each other one was refused. Values that only fit together (n_samples=24 with batch_size=6) get another
    pass, as long as one more fits."""
    accepted, errors, keys = {}, {}, list(values)
    while keys:
        left = []
        for key in keys:
            trial = {**accepted, key: values[key]}
            try:
                check(trial)
                accepted = trial
                errors.pop(key, None)  # refused on an earlier pass, taken on this one
            except LeakdemoError as e:
                errors[key] = refused(key, values[key], e)
                left.append(key)
        if len(left) == len(keys):
            break
        keys = left
    return accepted, errors


def from_query(query: Mapping[str, str], said: list[str] | None = None) -> tuple[Scenario, list[Ignored]]:
    """The scenario a shared URL describes. Bad values fall back to defaults and are reported, not fatal.
    said: where to add what the link's source of data changed besides (`?preset=pli-10-clients&data=digits`:
    "clients is back at its default, 1 — 10 is refused there: …"), as the sidebar's Source box says it."""
    ignored = []
    name = query.get("preset", DEFAULT_PRESET)
    if name not in presets():
        why = unknown_preset_hint(name, presets())  # `vfl`: its presets; `dgl`: did you mean dlg or dlm?
        ignored.append(Ignored(f"preset={name!r} (unknown{': ' + why if why else ''}; "
                               f"available: {', '.join(presets())})"))
        name = DEFAULT_PRESET
    base = load_preset(name).params
    proto, start = query.get("protocol"), resolve(base, preset=name)
    homes = _homes(query)
    if "protocol" not in query and homes and start["protocol"] not in homes:
        # a link that names an attack or a defense the preset's protocol lacks (`?attack=cafe`, `?defense=top-k`)
        proto = homes[0]
    elif proto not in catalog.PROTOCOLS or proto == start["protocol"]:
        proto = None  # the preset's protocol, or one the check below names (`?protocol=bogus`)
    if proto:
        # a link that names another protocol than the preset's (`?protocol=vfl`, `?protocol=fedmd&attack=tbi`), or
        # only an attack or a defense of another protocol's (`?attack=cafe`): the sidebar's switch, with that
        # protocol's own attack and defaults, and the link's values on top — as the sidebar's clicks give.
        # (`?protocol=vfl` gave DLG on the preset's one coffee photo where the sidebar gives CAFE on 200 digits)
        base = switch(start, "protocol", proto)[0].params
    if query.get("data") not in (None, resolve(base, preset=name)["data"]):
        base, notes = _with_data(base, query["data"], name)
        # each note begins with the value it speaks of ("target_classes is now 5, …"): one the link sets says nothing
        if said is not None:
            said.extend(n for n in notes if n.split(" ", 1)[0] not in query)
    accepted = {}
    # choices first, so that each parameter is checked against the right components
    keys = sorted((k for k in query if k != "preset"), key=lambda k: k not in ("protocol", "attack", "defense"))
    order, errors = list(keys), {}
    # The whole link first, less each value that the check names: a protocol switched away from the preset's
    # (DLM on FedAvg over `dlg`) fits only with its attack and data, never one value at a time.
    trial = {k: query[k] for k in keys}
    while True:
        try:
            resolve(base, trial, preset=name)
            accepted, keys = trial, []
            break
        except ParamError as e:
            if e.name not in trial:  # a value the link did not set: find the culprits one at a time, below
                errors.clear()
                break
            errors[e.name] = Ignored(e.short, not e.foreign)
            del trial[e.name]
        except LeakdemoError:
            errors.clear()
            break
    if keys:
        accepted, errors = one_by_one(lambda values: resolve(base, values, preset=name), {k: query[k] for k in keys})
    ignored += [errors[k] for k in order if k in errors]
    scenario = resolve(base, accepted, preset=name)
    if "images" in accepted:  # what only the data can say (an unknown photo): the gallery would drop it unsaid
        from ..data import check_source
        try:
            check_source(scenario)
        except ParamError as e:
            if e.name == "images":
                ignored.append(Ignored(str(e)))
                accepted.pop("images")
                scenario = resolve(base, accepted, preset=name)
    return scenario, ignored


def _with_data(base: dict, data: str, preset: str) -> tuple[dict, list[str]]:
    """base on another source of data, made to fit as the sidebar's Source box makes it (lab._on_data): a typed
    `?preset=pli&data=digits` dropped the digits ("target_classes: must be below the number of classes (10)"),
    where picking them in the sidebar gives pli-digits' 5 private classes; `?preset=cafe&data=faces` kept 200
    samples of the 100 faces beside a greyed Run. A source that still does not fit is left to the check below,
    which names it. Returns the values and what else changed, in words."""
    from ..data import check_source
    values = {k: v for k, v in base.items() if k != "images"}  # names belong to their source
    try:
        new, notes = refit(values, {"data": data}, preset, check_source)
    except LeakdemoError:
        return base, []
    return new.params, notes


def _homes(query: Mapping[str, str]) -> list[str]:
    """The protocols that take both the attack and the defense a link names (those it names), the attack's own
    first; where none takes both, the attack's (the page then says why the defense was ignored)."""
    attack = catalog.ATTACKS[query["attack"]].protocols if query.get("attack") in catalog.ATTACKS else None
    defense = query.get("defense")
    defended = None if defense in (None, "none") or defense not in catalog.DEFENSES else \
        [p for p in catalog.PROTOCOLS if defense in catalog.defenses_for(p)]
    both = [p for p in (attack or defended or ()) if defended is None or p in defended]
    return both or list(attack or ())


_SHORTEST: dict = {}


def to_query(s: Scenario) -> dict[str, str]:
    """The shortest query string that reproduces `s`: the preset plus what differs from it — and, where the
    protocol is not the preset's, less each value the link brings back anyway (that protocol's own attack and
    defaults: `?preset=dlg&protocol=ds-fl&clients=3`, not twenty values more), each drop checked by reading
    the link back; so is each default of a component the preset lacks (`?preset=dlg&defense=dp-gaussian`, not
    its σ, clip and δ too). Remembered per scenario: the page asks on every redraw."""
    query = {"preset": s.preset, **{k: str(v) for k, v in s.diff_from_preset().items()}}
    if s.preset not in presets() or ("protocol" not in query and not s.beyond_preset()):
        return query
    key = (s.preset, tuple(sorted((k, str(v)) for k, v in s.params.items())))
    if key in _SHORTEST:
        return dict(_SHORTEST[key])
    if "protocol" in query:  # read back on that protocol's own defaults (from_query's switch): a value the
        again = from_query(query)[0]  # preset has that they lack
        query.update({k: str(v) for k, v in s.params.items() if k not in query and again.params.get(k) != v})
    # the values that protocol's own defaults bring back (its attack: `?protocol=vfl`, not `&attack=cafe`), then
    # the protocol where the attack alone names it (DLM+ on FedAvg: `?attack=dlm-plus`), and then the rest again
    rest = [k for k in query if k not in ("preset", "protocol")]
    for name in rest + ["protocol"] + rest:
        if name not in query:
            continue
        trial = {k: v for k, v in query.items() if k != name}
        again, ignored = from_query(trial)
        if not ignored and again.params == s.params:
            query = trial
    if len(_SHORTEST) >= 256:
        _SHORTEST.clear()
    _SHORTEST[key] = query
    return dict(_SHORTEST[key])


def visible_params(s: Scenario) -> dict[str, list]:
    """Parameters grouped for the sidebar, in catalog order."""
    groups: dict[str, list] = {}
    for p in catalog.params_for(s["protocol"], s["attack"], s["defense"]).values():
        if p.group == "scenario":
            continue
        groups.setdefault(p.group, []).append(p)
    return groups
