"""Scenario: one complete, validated, JSON-serialisable description of a run. Presets are named ones.

Resolution order: component defaults ← preset (or scenario file) ← the user's overrides. Values the
user typed are checked strictly (unknown names are errors); values inherited from a preset for a
component the user switched away from are dropped, so the new component starts from its own defaults.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Mapping

from . import catalog
from .errors import LeakdemoError, ParamError
from .words import alike, hint, meant_question, plural, value_text

PRESET_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "presets")
FORMAT = "leakdemo-scenario/1"


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    description: str
    params: dict
    standard: bool = True  # part of `bench`'s default table


@dataclass(frozen=True)
class Scenario:
    params: Mapping[str, Any]
    preset: str = "custom"
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def get(self, key: str, default=None):
        return self.params.get(key, default)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "preset": self.preset, "params": dict(self.params)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def diff_from_preset(self) -> dict:
        """Parameters that differ from the preset's resolved values (what a shareable URL needs)."""
        base = _preset_values(self.preset) if self.preset in presets() else None
        return {k: v for k, v in self.params.items() if base is None or base.get(k) != v}

    def beyond_preset(self) -> set[str]:
        """Parameters its preset lacks: those of a component set over it (a defense's σ and clip), at their
        defaults or not."""
        return set(self.params) - set(_preset_values(self.preset)) if self.preset in presets() else set()


@lru_cache(maxsize=1)
def presets() -> dict[str, Preset]:
    out = {}
    # a family's base preset first: agic, agic-multiround, cafe, cafe-faces, ...
    for f in sorted(os.listdir(PRESET_DIR), key=lambda f: f.removesuffix(".json").replace("-", "~")):
        if f.endswith(".json"):
            with open(os.path.join(PRESET_DIR, f), encoding="utf-8") as fh:
                d = json.load(fh)
            out[d["name"]] = Preset(d["name"], d["title"], d["description"], d["params"], d.get("standard", True))
    return out


def load_preset(name: str) -> Preset:
    table = presets()
    if name not in table:
        why = unknown_preset_hint(name, table)
        raise ParamError("preset", f"unknown preset {name!r}{f' ({why})' if why else ''}; "
                                   f"available: {', '.join(table)}")
    return table[name]


def unknown_preset_hint(name: str, known) -> str:
    """Why 'unknown preset NAME', in words for the CLI's message and a link's note alike: the presets of the
    protocol, attack or defense it names, else the likeliest of `known` meant (the sweep command also offers
    the sweeps' names), else ''."""
    return part_named_as_preset(name) or meant_question(alike(name, known))


def part_named_as_preset(name: str) -> str:
    """Where a protocol, attack or defense was named as the preset (`run vfl`, `run tbi`): the presets with it,
    or one to start from that takes it (in words both the CLI and a link's message can use)."""
    for kind, parts in (("protocol", catalog.PROTOCOLS), ("attack", catalog.ATTACKS), ("defense", catalog.DEFENSES)):
        if name not in parts or name == "none":
            continue
        a = "an" if kind == "attack" else "a"
        with_it = [p for p, preset in presets().items() if preset.params.get(kind) == name]
        if with_it:
            return f"{name} is {a} {kind}: its presets are {', '.join(with_it)}"
        # the presets of its own first attack (a protocol) or first protocol (an attack, a defense) come first
        key, wanted = (("attack", catalog.attacks_for(name)) if kind == "protocol"
                       else ("protocol", parts[name].protocols))
        base = next((p for w in wanted for p, preset in presets().items() if preset.params.get(key) == w), None)
        if base is not None:
            return f"{name} is {a} {kind} that no preset has: start from {base} and set {kind}={name}"
    return ""


def _choice(name: str, merged: dict) -> str:
    p = next(q for q in catalog.CHOICE_PARAMS if q.name == name)
    return p.coerce(merged.get(name, p.default))


def _homes(protocols: tuple[str, ...]) -> str:
    """Where a component that does not apply belongs, and the fix: 'vfl: set protocol=vfl too'."""
    fix = f"protocol={protocols[0]}" if len(protocols) == 1 else "protocol to one of them"
    return f"{', '.join(protocols)}: set {fix} too"


def resolve(base: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None,
            preset: str = "custom") -> Scenario:
    """Validate base (trusted: a preset or scenario file) plus overrides (typed by a user)."""
    base, overrides = dict(base or {}), dict(overrides or {})
    merged = {**base, **overrides}
    known = catalog.all_param_names()
    for name in list(base) + list(overrides):
        if name not in known:
            raise ParamError(name, *_unknown(name, merged), foreign=True)
    protocol = _choice("protocol", merged)
    attack = _choice("attack", merged)
    defense = _choice("defense", merged)
    if attack not in catalog.attacks_for(protocol):
        raise ParamError("attack", f"{attack} does not apply to protocol {protocol}; allowed: "
                         f"{', '.join(catalog.attacks_for(protocol))} ({attack} attacks "
                         f"{_homes(catalog.ATTACKS[attack].protocols)})")
    if defense not in catalog.defenses_for(protocol):
        raise ParamError("defense", f"{defense} does not apply to protocol {protocol}; allowed: "
                         f"{', '.join(catalog.defenses_for(protocol))} ({defense} defends "
                         f"{_homes(catalog.DEFENSES[defense].protocols)})")
    specs = catalog.params_for(protocol, attack, defense)

    # inherited values for a component the user switched away from do not carry over
    switched = {k for k in ("protocol", "attack", "defense") if k in overrides and base.get(k) not in (None, merged[k])}
    kept_base = {}
    for name, value in base.items():
        if name not in specs:
            continue
        owned_by = set(catalog.owners(name))
        if "attack" in switched and owned_by and owned_by <= set(catalog.ATTACKS):
            continue
        if "defense" in switched and owned_by and owned_by <= set(catalog.DEFENSES):
            continue
        if name == "images" and "data" in overrides and base.get("data", "samples") != overrides["data"]:
            continue  # the preset's items name another source's (coffee is no digit), as the Lab's sidebar does
        kept_base[name] = value
    for name in overrides:
        if name not in specs:
            where = ", ".join(catalog.owners(name))
            raise ParamError(name, f"does not apply to protocol={protocol}, attack={attack}, defense={defense} "
                             f"(it belongs to: {where}{catalog.instead_note(name, protocol, attack, defense)})",
                             foreign=True)
    values = {}
    for name, spec in specs.items():
        raw = overrides.get(name, kept_base.get(name, spec.default))
        try:
            values[name] = spec.coerce(raw)
        except ParamError as e:  # not typed but kept over a protocol switch: `run dlg --set protocol=fedmd`
            if name in overrides or name not in kept_base or "protocol" not in switched:
                raise
            origin = (f"the value of preset {preset}" if preset in presets() and base == dict(load_preset(preset).params)
                      else "kept from the scenario")
            raise ParamError(name, f"{str(e).removeprefix(name + ': ')} ({origin}; set {name} too when switching to "
                             f"protocol={protocol})") from None
    values["protocol"], values["attack"], values["defense"] = protocol, attack, defense
    if "images" in values:  # one spelling of a list: `coffee, rocket` and `,,` ran as `coffee,rocket` and as none
        # named, but were kept as typed — another run in the store, and `,,` listed as a change from the preset
        values["images"] = ",".join(x.strip() for x in values["images"].split(",") if x.strip())
    for comp in catalog.components(protocol, attack, defense):
        if comp.check is not None:
            comp.check(values)
    warnings = [w for w in [_unused_named_images(values)] if w]
    bad = catalog.KNOWN_BAD.get((attack, values.get("model")))
    if bad:
        warnings.append(bad)
    warnings += [w for w in [catalog.too_few_equations(values), catalog.short_of_the_paper(values),
                             catalog.idle_defense(values)] if w]
    warnings += catalog.cost_warnings(values)
    return Scenario(values, preset, tuple(warnings))


_SAID_FOR = {  # the papers', Opacus's and common code's words for ours
    **dict.fromkeys(("steps", "iters", "iter", "max_iter", "n_iter", "niter", "num_steps"), "iterations"),
    **dict.fromkeys(("batch", "bs"), "batch_size"),
    **dict.fromkeys(("learning_rate", "step_size"), "lr"),
    **dict.fromkeys(("noise", "sigma", "noise_sigma", "noise_std", "noise_scale", "noise_level"), "dp_sigma"),
    **dict.fromkeys(("clip", "clip_norm", "clipping", "max_grad_norm", "max_norm"), "dp_clip"),
    "delta": "dp_delta",
    **dict.fromkeys(("sparsity", "pruning", "prune", "prune_rate"), "prune_ratio"),
    **dict.fromkeys(("k", "topk"), "top_k"),
    **dict.fromkeys(("tv", "total_variation"), "tv_weight"),
}


def likeliest(name: str, own: list[str], protocol: str | None = None) -> list[str]:
    """The names a user probably meant by `name`: of this scenario's `own` if any fits, else other components'
    (`sigma` on an undefended run: dp_sigma, which the DP defenses take). A word of the field's is read as what
    it means before any spelling alike — `clip` was offered clients, `delta` data or model, and `noise_sigma`
    nothing — and as the name its role goes by on `protocol` (`sigma` on FedMD: logit-noise's logit_sigma)."""
    meant = _SAID_FOR.get(name)
    if meant is not None:
        role = (meant, *next((g for g in catalog.SAME_ROLE if meant in g), ()))
        fits = [k for k in role if k in own] or [k for k in role if protocol is None or any(
            c == protocol or c in catalog.attacks_for(protocol) + catalog.defenses_for(protocol)
            for c in catalog.owners(k))]
        if fits:
            return fits[:1]
    close = alike(name, own) or [k for k in own if len(name) >= 3 and (name in k or k[:3] == name[:3])]  # `k`: attack
    if close:
        return close
    others = sorted(catalog.all_param_names() - {name})  # a name of another component's is not its own hint
    return alike(name, others, cutoff=0.75)


def did_you_mean(name: str, own: list[str], meant: list[str] | None = None, protocol: str | None = None) -> str:
    """' (did you mean iterations?)', or '' when nothing is alike; a name of another component's is said as
    whose: ' (did you mean dp_sigma (of dp-gaussian, dp-laplace)?)'. `meant`: likeliest(name, own), if known."""
    said = [k if k in own or not catalog.owners(k) else f"{k} (of {', '.join(catalog.owners(k))})"
            for k in (likeliest(name, own, protocol) if meant is None else meant)]
    return hint(said)


def _unknown(name: str, merged: Mapping[str, Any]) -> tuple[str, str]:
    """Why `name` is refused, with the likeliest name meant (`--set steps=50` on dlg: its steps are
    `iterations`) and the names this scenario does take; and the same without those names, for a page."""
    try:
        protocol, attack, defense = (_choice(k, merged) for k in ("protocol", "attack", "defense"))
        own = sorted(catalog.params_for(protocol, attack, defense))
    except ParamError:  # the combination itself is bad: suggest from every name
        protocol, own = None, sorted(catalog.all_param_names())
    short = "unknown parameter" + did_you_mean(name, own, protocol=protocol)
    if protocol is None:
        return f"{short}; `python -m leakdemo list` shows them all", short
    return f"{short}; {attack} on {protocol} takes: {', '.join(own)}", short


def _unused_named_images(values: Mapping[str, Any]) -> str | None:
    """The batch starts with the named images (the Lab's picker says so), and where more are named than the
    client holds — a batch of four cut to one in the Lab, the small end of a batch-size sweep, a round of eight
    clients cut to two — it takes the first ones (data.load_batch) rather than refusing the scenario, so the
    Lab's picker keeps them all for a larger batch. This says which are left out."""
    named = [x.strip() for x in str(values.get("images") or "").split(",") if x.strip()]
    if not named or values["protocol"] in catalog.LOGIT_PROTOCOLS:
        return None
    need = catalog.private_images(values)
    if len(named) <= need:
        return None
    first = "the first named image" if need == 1 else f"the first {need} named images"
    return (f"images: {catalog.private_images_name(values)} is {need}, so the run takes {first} "
            f"({', '.join(named[:need])}) and leaves out {', '.join(named[need:])}")


@lru_cache(maxsize=64)
def _preset_values(name: str) -> Mapping[str, Any]:
    """A preset's resolved parameters."""
    return resolve(load_preset(name).params, preset=name).params


@lru_cache(maxsize=256)
def _switched_values(name: str, switched: tuple) -> Mapping[str, Any]:
    """A preset with protocol, attack and defense switched, one after another, as the Lab's sidebar switches
    them: a new protocol brings its own defaults (FedMD's faces, 40 classes, rounds …). Set over the preset as
    plain values, they kept the preset's where theirs differ, and a PLI run switched to from `dlg` listed
    seventeen "changes" — every one of them FedMD's own default — in `runs list` and Compare's picker."""
    from .switch import switch  # it resolves through this module
    s = from_preset(name)
    for key, value in switched:  # in the order protocol, attack, defense
        s = switch(s, key, value)[0] if s[key] != value else s
    return s.params


def changed_settings(params: Mapping[str, Any], preset: str | None) -> dict:
    """What a recorded run changed from its preset, beside the protocol, attack and defense that the run list
    names anyway (and the device): a component switched to brings its own defaults, which are no change — but
    a defense the preset lacks comes with its strength ('dp_sigma=0.01'). Sweeps record many runs of one
    preset: 'batch_size=16' is what tells them apart (`runs list`, Compare). Empty where the preset is
    unknown here (a custom run, an older store)."""
    if preset not in presets():
        return {}
    own = _preset_values(preset)
    switched = tuple((k, params[k]) for k in ("protocol", "attack", "defense")
                     if k in params and own.get(k) != params[k])
    try:
        base = _switched_values(preset, switched)
    except LeakdemoError:  # a combination this version refuses (an older store's run): against the preset as is
        base = own
    strengths = catalog.strengths(dict(switched).get("defense"))
    return {k: v for k, v in params.items() if k not in ("protocol", "attack", "defense", "device") and v != ""
            and (base.get(k) != v or k in strengths)}


def from_preset(name: str, overrides: Mapping[str, Any] | None = None) -> Scenario:
    return resolve(load_preset(name).params, overrides, preset=name)


MAX_SCENARIO_BYTES = 2**20  # a scenario.json is about 1 KB: a larger file is something else


def from_file(path: str, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """A scenario.json written by `run --out` (or a preset file); or the folder `run --out` or `runs export`
    wrote it in (`run runs/a` read as 'Is a directory')."""
    if os.path.isdir(path):
        inside = os.path.join(path, "scenario.json")
        if not os.path.isfile(inside):
            raise LeakdemoError(f"scenario: {path!r} is a folder with no scenario.json in it (give the scenario.json "
                                "that `run --out` or `runs export` wrote, or its folder)")
        path = inside
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SCENARIO_BYTES + 1)  # bounded: `run /dev/zero` ran out of memory
    except OSError as e:
        raise LeakdemoError(f"scenario: cannot read {path!r} ({e.strerror or e.__class__.__name__})") from None
    return from_dict(scenario_json(data, repr(path)), overrides)


def scenario_json(data: bytes, name: str) -> Any:
    """A scenario file's bytes as JSON, or one line saying why not: over 1 MB, not UTF-8, not JSON, or nested
    past what the parser can take (a RecursionError's traceback, in the CLI and the Lab's file box alike)."""
    if len(data) > MAX_SCENARIO_BYTES:
        raise LeakdemoError(f"scenario: {name} is over 1 MB; a scenario.json, as `run --out` writes it, is about 1 KB")
    try:
        return json.loads(data.decode("utf-8-sig"))  # Notepad saves UTF-8 with a BOM, which json refuses
    except UnicodeDecodeError:
        raise LeakdemoError(f"scenario: {name} is not UTF-8 text (a scenario.json is JSON)") from None
    except json.JSONDecodeError as e:
        raise LeakdemoError(f"scenario: {name} is not valid JSON ({e.msg}, line {e.lineno})") from None
    except RecursionError:
        raise LeakdemoError(f"scenario: {name} is not a scenario (JSON nested too deeply to read)") from None


def from_dict(d: Any, overrides: Mapping[str, Any] | None = None) -> Scenario:
    if not isinstance(d, dict) or not isinstance(d.get("params"), dict):
        if isinstance(d, dict):
            got = f"an object with keys {', '.join(map(str, d))[:80]}" if d else "an empty object"
        else:  # what json.load gives back, in JSON's words
            got = {list: "a JSON array", str: "a JSON string", bool: "a JSON boolean",
                   type(None): "null"}.get(type(d), "a JSON number")
        raise LeakdemoError(f"scenario: expected a JSON object with a 'params' object, "
                            f'{{"preset": NAME, "params": {{NAME: VALUE, …}}}} as `run --out` writes; got {got}')
    name = d.get("preset") or d.get("name") or "custom"
    sc = resolve(d["params"], overrides, preset=str(name))
    notes = tuple(n for n in (format_note(d), uploads_note(d)) if n)
    return replace(sc, warnings=(*notes, *sc.warnings)) if notes else sc


def file_dict(sc: Scenario, uploads: list[str] | None = None) -> dict:
    """What a run's scenario.json holds: the scenario, and the names of the photos uploaded for it. The file
    cannot hold the photos, and without their names a replay ran the data source's own images in silence, as
    if it were the same run (uploads_note says so instead)."""
    d = sc.to_dict()
    if uploads:
        d["uploads"] = list(uploads)
    return d


def uploads_note(d: dict) -> str | None:
    """What replaying a file of a run on uploaded photos is told (None for any other file)."""
    names = d.get("uploads")
    if not names:
        return None
    names = [str(n) for n in names] if isinstance(names, list) else [str(names)]
    shown = ", ".join(names[:3]) + (" …" if len(names) > 3 else "")
    return (f"uploads: this scenario ran on {plural(len(names), 'uploaded photo')} ({shown}), which its file does "
            "not hold: without them it runs on the data source's own images (in the Attack Lab, upload them again "
            "to replay it)")


def format_note(d: dict) -> str | None:
    """What a file of another format (a newer leakdemo's: its settings may mean more than this one reads in
    them) is told; None for this format, or none (a preset file)."""
    fmt = d.get("format", FORMAT)
    if fmt == FORMAT:
        return None
    return f"format: {fmt!r} is not {FORMAT} (what this leakdemo writes and reads); the params were read as {FORMAT}"


def load(spec: str, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """PRESET_OR_JSON, as the CLI takes it."""
    sc = from_file(spec, overrides) if spec.endswith(".json") or os.path.sep in spec else from_preset(spec, overrides)
    said = unread(sc, overrides or ())
    return replace(sc, warnings=(*said, *sc.warnings)) if said else sc


def unread(sc: Scenario, names) -> list[str]:
    """What is said of the named settings that `sc` never reads (`--set tv_dataset=SVHN` on the photos)."""
    return [f"{name}={value_text(sc[name])} changes nothing: {why}" for name in names
            if (why := catalog.without_effect(sc, name))]
