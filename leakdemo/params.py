"""Parameter specs: type, default, range, help. Validation here is the single gate for CLI and UI."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .errors import ParamError
from .words import alike, hint

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "int" | "float" | "bool" | "choice" | "text"
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple = ()
    unit: str = ""
    paper: str = ""
    log: bool = False  # a hint for sliders: the useful values span decades
    group: str = "attack"  # where the UI shows it: data, model, protocol, attack, defense, run
    defends: bool = False  # a protocol knob that also acts as a defense
    label: str = ""  # how people read the name (the UI); defaults to the name, capitalised
    shown: tuple = ()  # (choice, how the UI shows it) pairs: "LeNet", not "lenet"; links and the CLI keep the code

    @property
    def title(self) -> str:
        text = self.label or self.name.replace("_", " ").capitalize()
        return f"{text} ({self.unit})" if self.unit else text

    def show(self, choice) -> str:
        """A choice as the UI lists it: its name from `shown`, else the code with a capital."""
        text = dict(self.shown).get(choice, str(choice))
        return text[:1].upper() + text[1:]

    def allowed(self) -> str:
        """Human description of the allowed values, used in every error message."""
        if self.kind == "choice":
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind in ("int", "float"):
            noun = "an integer" if self.kind == "int" else "a number"
            lo = "-inf" if self.low is None else number_text(self.low)
            hi = "inf" if self.high is None else number_text(self.high)
            return f"{noun} in [{lo}, {hi}]"
        return "text"

    def coerce(self, value: Any) -> Any:
        """Turn a CLI string, JSON value or widget value into a valid value, or raise ParamError."""
        if self.kind == "int":
            v = _to_number(self, value, int)
        elif self.kind == "float":
            v = _to_number(self, value, float)
        elif self.kind == "bool":
            if isinstance(value, bool):
                v = value
            elif str(value).strip().lower() in _TRUE:
                v = True
            elif str(value).strip().lower() in _FALSE:
                v = False
            else:
                raise ParamError(self.name, f"must be {self.allowed()}, got {value!r}")
        elif self.kind == "choice":
            v = str(value).strip()
            if v not in self.choices:
                raise ParamError(self.name, f"must be {self.allowed()}; got {value!r}{hint(alike(v, self.choices))}")
        else:
            if not isinstance(value, (str, int, float)):
                raise ParamError(self.name, f"must be text, got {type(value).__name__}")
            v = str(value).strip()
            if len(v) > 2000:
                raise ParamError(self.name, "must be at most 2000 characters")
        if self.kind in ("int", "float"):
            if (self.low is not None and v < self.low) or (self.high is not None and v > self.high):
                # what the user wrote, not its value: '1e99' read back as a hundred-digit integer
                shown = value.strip() if isinstance(value, str) else number_text(value)
                raise ParamError(self.name, f"must be {self.allowed()}, got {shown}")
        return v

    def describe(self) -> dict:
        d = {"name": self.name, "type": self.kind, "default": self.default, "help": self.help}
        if self.kind in ("int", "float"):
            d["min"], d["max"] = self.low, self.high
        if self.choices:
            d["choices"] = list(self.choices)
        for key in ("unit", "paper"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        return d


def number_text(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _to_number(p: Param, value: Any, typ):
    noun = "an integer" if typ is int else "a number"
    if isinstance(value, bool):
        raise ParamError(p.name, f"must be {p.allowed()}, got {value!r}")
    try:
        if typ is int:
            number = value
            if not isinstance(value, (int, float)):  # "3.0" or "1e3" as 3.0 and 1e3 are, in JSON: whole numbers
                text = str(value).strip()
                number = int(text) if text.lstrip("+-").isdigit() else float(text)
            if isinstance(number, float):
                if not number.is_integer():
                    raise ValueError
                return int(number)
            return int(number)
        v = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except (TypeError, ValueError):
        raise ParamError(p.name, f"must be {p.allowed()}, got {value!r} (not {noun})") from None
    if not math.isfinite(v):
        raise ParamError(p.name, f"must be {p.allowed()}, got {value!r}")
    return v


@dataclass(frozen=True)
class Component:
    """A protocol, attack or defense: what the catalog lists and the UI offers."""
    kind: str  # protocol | attack | defense
    name: str
    title: str
    summary: str
    params: tuple[Param, ...] = ()
    paper: str = ""
    protocols: tuple[str, ...] = ()  # attacks/defenses: the protocols they work with
    knowledge: tuple[str, ...] = ()  # attacks: what the attacker is assumed to know, in plain words
    payload: str = ""  # protocols: the kind of payload sent; defenses: the kind they transform
    needs: tuple[str, ...] = ()  # attacks: the client settings they are given (Knowledge.extras keys)
    run: Any = field(default=None, repr=False, compare=False)
    receives: Any = field(default=None, repr=False, compare=False)  # protocols: params -> one sentence
    check: Any = field(default=None, repr=False, compare=False)  # params -> None; raises ParamError when
    # parameters conflict with each other (checked when a scenario is resolved: CLI and sidebar alike)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def short(self) -> str:
        """The name a headline uses: 'DLM+' of 'DLM+ — normalised model leakage', 'Simulation' of
        'Simulation (Inverting Gradients on FedAvg)'."""
        return self.title.split(" — ")[0].split(" (")[0]
