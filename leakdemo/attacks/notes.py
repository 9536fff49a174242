"""The notes DLG's loop gives while it runs, named once for the loop and for the Lab that shows them (which
drops them once the run is done: the run's summary says how its starts ended). Torch-free: the web server,
which never loads torch, imports it."""

RESTARTING = "restarting from a new random start"
BACK_TO_BEST = "diverged — back to the best estimate so far"
PASSING_NOTES = (RESTARTING, BACK_TO_BEST)
KEPT_BEST = "kept the estimate with the lowest gradient distance"
