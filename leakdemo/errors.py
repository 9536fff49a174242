"""The one error type users see: a single line that names the parameter and what is allowed."""


class LeakdemoError(Exception):
    """A problem with user input or the environment, worded for the person who caused it."""


class ParamError(LeakdemoError, ValueError):
    """A parameter value (or combination) that the catalog does not allow."""

    def __init__(self, name: str, message: str, short: str | None = None, foreign: bool = False):
        self.name = name
        # the name is none of the scenario's own parameters (unknown, or another component's): a page that drops
        # it from a link has no value of its own that a default would replace
        self.foreign = foreign
        super().__init__(f"{name}: {message}")
        # what a page's note about a link needs, where the whole message (every name a scenario takes) would crowd it
        self.short = f"{name}: {short}" if short else str(self)
