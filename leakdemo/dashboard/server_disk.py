"""What a browser on another machine may read of the server's disk.

A classroom's students open the teacher's dashboard from their own laptops. `data=folder` (and a torchvision
`data_root`) read images from the disk of the machine the server runs on: from a student's browser, a link
such as `?data=folder&folder=/home/teacher/Pictures` showed the teacher's photos as "the private data", and
its error messages listed the folder's files. A browser on the server's own machine (a loopback connection:
the user's own laptop) may read any folder, as the command line does; any other only under the folders the
server's operator shares with LEAKDEMO_DATA_DIRS=DIR[:DIR…].

Who is on this machine is told by the connection's TCP peer (Streamlit's `st.context.ip_address`: None over
loopback), which a browser cannot choose. Behind a reverse proxy on the same machine every browser looks
local: such a server should share no folders it would not show everyone (README).
"""
from __future__ import annotations

import ipaddress
import itertools
import os

import streamlit as st

from ..errors import ParamError

DATA_DIRS_ENV = "LEAKDEMO_DATA_DIRS"
READS_DISK = {"folder": "folder", "torchvision": "data_root"}  # data source -> the parameter naming its path


def on_this_machine() -> bool:
    """Whether this session's browser runs on the server's machine."""
    return local_peer(st.context.ip_address)  # None over 127.0.0.1 and ::1


def local_peer(peer) -> bool:
    """Whether a connection's peer address is this machine: a loopback address (no client at all, as in AppTest
    or bare mode, counts as this machine)."""
    if not isinstance(peer, str):
        return True
    try:
        address = ipaddress.ip_address(peer.split("%")[0])  # an IPv6 zone ("fe80::1%eth0") is no part of it
    except ValueError:
        return False
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def shared_dirs() -> list[str]:
    """The folders the operator shares with every browser (LEAKDEMO_DATA_DIRS, joined by ':'), resolved."""
    return [os.path.realpath(d.strip()) for d in os.environ.get(DATA_DIRS_ENV, "").split(os.pathsep) if d.strip()]


def disk_problem(params: dict) -> ParamError | None:
    """Why this session may not run `params` (a source that reads a folder this browser may not read), naming
    the parameter; None where it may."""
    source = params.get("data")
    name = READS_DISK.get(source)
    if name is None or on_this_machine():
        return None
    shared, path = shared_dirs(), str(params.get(name) or "")
    if shared and not path:
        return None  # the source's own message asks for a path
    real = os.path.realpath(path) if path else ""
    if path and any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in shared):
        return None
    where = (f"only folders under {', '.join(shared)}" if shared else
             f"none (the server's operator can share some: {DATA_DIRS_ENV}=DIR)")
    return ParamError(name, f"data={source} reads the disk of the server's machine, and this browser is on another "
                            f"one: it may read {where}; upload your own photos instead")


def check_disk(params: dict, axes=()) -> None:
    """Raise disk_problem's error for `params`, or for any point of a sweep over `axes` of it."""
    for values in itertools.product(*[[(a.name, v) for v in a.values] for a in axes]):
        error = disk_problem({**params, **dict(values)})
        if error is not None:
            raise error
