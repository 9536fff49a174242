"""The run store: every finished run (CLI, dashboard, sweep) in one SQLite file, so an identical scenario
of the same code version comes back at once, and Compare, replay and sweeps never recompute it.

One row per run: the resolved scenario, the code version, the Started/Finished events as JSON, the
curves, and images as PNG strips (originals, final reconstruction, a few keyframes). A small `cache`
table keeps other results worth remembering (a defense's utility). WAL mode and short transactions let
several worker processes write at once. A file that is not ours (another SQLite database, a text file, a
damaged one) is refused with one line and never written to.

    store = open_store()                  # $LEAKDEMO_STORE, else the cache folder; None when turned off
    run_id = store.find(key)              # the newest finished run of this scenario and code version
    stored = store.load(run_id)           # StoredRun: scenario, Started, Finished, keyframes
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from .errors import LeakdemoError
from .events import Finished, Started, without_views

APP_ID = 0x4C4B444D  # "LKDM" in the SQLite header: how we know a file is ours
SCHEMA = 1
STORED_KEYFRAMES = 24  # replay needs a few frames, not all 48 the run kept
FRAME_PIXELS = 24 * 4096  # ... and runs with many images fewer still (CAFE's 200 noisy digits: ~110 KB a frame)
OFF = ("off", "none", "0", "false")
_SQLITE_MAGIC = b"SQLite format 3\x00"

_TABLES = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL, code_version TEXT NOT NULL, created REAL NOT NULL, source TEXT NOT NULL,
    preset TEXT, protocol TEXT, attack TEXT, defense TEXT, status TEXT NOT NULL,
    psnr REAL, ssim REAL, lpips REAL, seconds REAL, iterations INTEGER,
    scenario TEXT NOT NULL, started TEXT NOT NULL, finished TEXT NOT NULL, history TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_key ON runs (key, code_version, status);
CREATE TABLE IF NOT EXISTS images (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL, idx INTEGER NOT NULL, iteration INTEGER, png BLOB NOT NULL,
    PRIMARY KEY (run_id, kind, idx));
CREATE TABLE IF NOT EXISTS cache (
    kind TEXT NOT NULL, key TEXT NOT NULL, code_version TEXT NOT NULL, created REAL NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (kind, key, code_version));
"""


class StoreError(LeakdemoError):
    """The run store cannot be used, in one line."""


def default_path() -> str | None:
    """$LEAKDEMO_STORE (a file; 'off' turns the store off), else runs.sqlite in leakdemo's cache folder."""
    from .settings import cache_dir
    env = os.environ.get("LEAKDEMO_STORE")
    if env is not None and env.strip().lower() in OFF:
        return None
    return env or os.path.join(cache_dir(), "runs.sqlite")


@lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the engine's source (not the dashboard's) and of torch's version: results computed by
    other code are never served as ours."""
    from importlib.metadata import version
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(version("torch").encode())  # read without importing torch (the web server never does)
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("dashboard", "__pycache__")]  # pruned while walking
        paths += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    for path in sorted(paths):
        h.update(os.path.relpath(path, root).encode())
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


# Parameters added after runs were recorded, with the value that means "as before": a scenario at that value
# keeps the key it had before the parameter existed, so the runs already recorded (the gallery, a user's own
# store) are still found. (protocol, parameter) -> value.
ADDED_LATER = {("fedsgd", "clients"): 1, ("fedsgd", "secure_aggregation"): False}


def scenario_key(params: dict, device: str, uploads=None) -> str:
    """What makes two runs the same: every resolved parameter, where it ran, the uploaded pixels, and for an
    image folder what its files are now."""
    protocol = params.get("protocol")
    spec = {"params": {k: params[k] for k in sorted(params)
                       if k != "device" and ADDED_LATER.get((protocol, k), ()) != params[k]}, "device": device}
    if uploads:
        spec["uploads"] = [(name, hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest(), list(a.shape))
                           for name, a in uploads]
    if params.get("data") == "folder":
        from .data import folder_fingerprint
        spec["folder_files"] = folder_fingerprint(str(params.get("folder") or ""))
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------- images as PNG strips


def _strip_png(images: np.ndarray) -> bytes:
    """(B, H, W, C) in [0, 1] -> one PNG, the images side by side (C = 1: a grayscale PNG)."""
    from .artifacts import png_bytes
    arr = np.asarray(images, dtype=np.float32)
    strip = np.concatenate(list(arr), axis=1)
    if strip.shape[-1] == 1:
        strip = strip[..., 0]
    return png_bytes((np.clip(strip, 0, 1) * 255).round().astype(np.uint8))


def _strip_images(png: bytes, count: int) -> np.ndarray:
    """The PNG strip back as (count, H, W, C), C as it was written (1 or 3)."""
    import imageio.v3 as iio
    strip = iio.imread(png, extension=".png").astype(np.float32) / 255.0
    strip = strip[..., None] if strip.ndim == 2 else strip[..., :3]
    return np.stack(np.split(strip, count, axis=1))


# ---------------------------------------------------------------- the store


@dataclass
class StoredRun:
    id: int
    created: float
    source: str
    code_version: str
    scenario: dict
    started: Started
    finished: Finished
    keyframes: list[tuple[int, np.ndarray]]


class RunStore:
    def __init__(self, path: str, read_only: bool = False, any_version: bool = False):
        """read_only: a shipped store (the gallery) — opened for reading, never created or changed.
        any_version: `find` and `cached` answer with what any code version recorded — for a recording that is
        replayed as such (the gallery's sweep behind the presenter's chart), never for results served as ours."""
        self.path = os.path.abspath(os.path.expanduser(path))
        self.read_only, self.any_version = read_only, any_version
        if read_only:
            if not os.path.isfile(self.path):
                raise StoreError(f"run store: {self.path} does not exist")
            with _closing(self._connect()) as conn:
                try:
                    if conn.execute("PRAGMA application_id").fetchone()[0] != APP_ID:
                        self._refuse("is not a leakdemo run store")
                except sqlite3.DatabaseError as e:
                    self._refuse(f"is damaged or not a database ({e})")
            return
        with _closing(self._connect()) as conn:
            self._check_or_create(conn)

    # -- opening

    def _refuse(self, why: str):
        raise StoreError(f"run store: {self.path} {why}; it is left untouched — move it away or set "
                         "LEAKDEMO_STORE to another file (LEAKDEMO_STORE=off runs without a store)")

    def _connect(self) -> sqlite3.Connection:
        if os.path.isdir(self.path):
            self._refuse("is a folder, not a file")
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            try:
                with open(self.path, "rb") as fh:
                    head = fh.read(len(_SQLITE_MAGIC))
            except OSError as e:
                raise StoreError(f"run store: cannot read {self.path} ({e.strerror})") from None
            if head != _SQLITE_MAGIC:
                self._refuse("is not a SQLite database")
        else:
            try:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
            except OSError as e:
                raise StoreError(f"run store: cannot create {os.path.dirname(self.path)} ({e.strerror})") from None
        if self.read_only:
            from urllib.parse import quote
            try:
                return sqlite3.connect(f"file:{quote(self.path)}?mode=ro&immutable=1", uri=True, isolation_level=None)
            except sqlite3.Error as e:
                raise StoreError(f"run store: cannot open {self.path} ({e})") from None
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as e:
            raise StoreError(f"run store: cannot open {self.path} ({e})") from None
        return conn

    def _check_or_create(self, conn: sqlite3.Connection) -> None:
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != APP_ID:
                self._create(conn)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA:
                self._refuse(f"was written by a newer leakdemo (store format {version}, this one reads {SCHEMA})")
            self._use_wal(conn)
        except sqlite3.DatabaseError as e:
            self._refuse(f"is damaged or not a database ({e})")

    @staticmethod
    def _use_wal(conn: sqlite3.Connection, patience_s: float = 30.0) -> None:
        """Write-ahead logging, so readers never wait on a writer. Switching needs the file to itself, and when
        another process opening the new store holds a lock this one would deadlock against, SQLite answers
        "database is locked" at once, without waiting on busy_timeout: several workers opening a new store
        together saw it about once in 100 (CI refused the store as damaged). Such a clash clears in a moment."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _create(self, conn: sqlite3.Connection) -> None:
        """The tables of a new store, unless another process made them meanwhile; a file with other tables is
        refused. Read under the write lock: several workers open a new store at once, and one that read the
        id (not set yet) before another committed, and the tables after, refused the fresh store as "another
        program's SQLite database"."""
        conn.execute("BEGIN IMMEDIATE")  # (WAL only once it is ours: another program's file stays as it was)
        try:
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
            if app != APP_ID:
                if app != 0 or tables:
                    self._refuse("is another program's SQLite database")
                for statement in filter(str.strip, _TABLES.split(";")):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APP_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA}")
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def _db(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != APP_ID:
                self._refuse("was replaced by a file that is not a leakdemo run store")
        except sqlite3.DatabaseError as e:
            conn.close()
            self._refuse(f"is damaged ({e})")
        return conn

    # -- runs

    def find(self, key: str, version: str | None = None) -> int | None:
        """The newest finished run of this scenario key recorded by this code version."""
        with _closing(self._db()) as conn:
            if self.any_version:
                row = conn.execute("SELECT id FROM runs WHERE key = ? AND status = 'finished' ORDER BY id DESC "
                                   "LIMIT 1", (key,)).fetchone()
            else:
                row = conn.execute("SELECT id FROM runs WHERE key = ? AND code_version = ? AND status = 'finished' "
                                   "ORDER BY id DESC LIMIT 1", (key, version or code_version())).fetchone()
        return None if row is None else int(row[0])

    def find_scenario(self, params: dict, device: str) -> int | None:
        """`find` for a scenario run on `device` ('cpu' or 'cuda'). A recording (any_version: the gallery) was
        made on another machine anyway, so it answers for the same scenario recorded on either device: a fresh
        install with a GPU draws the gallery's CPU-recorded sweeps at once too."""
        devices = [device] + ([d for d in ("cpu", "cuda") if d != device] if self.any_version else [])
        for d in devices:
            found = self.find(scenario_key(params, d))
            if found is not None:
                return found
        return None

    def record(self, key: str, source: str, scenario: dict, started: Started, finished: Finished,
               keyframes: list[tuple[int, np.ndarray]]) -> int:
        """Keep one finished (or stopped) run; returns its id."""
        m = finished.metrics
        started_json = {k: v for k, v in asdict(started).items() if not isinstance(v, np.ndarray)}
        finished_json = {"status": finished.status, "metrics": without_views(m), "seconds": finished.seconds,
                         "iterations": finished.iterations, "n_images": int(len(finished.images)),
                         "has_baseline": finished.baseline is not None}
        images = [("originals", 0, None, _strip_png(started.originals)),
                  ("final", 0, finished.iterations, _strip_png(finished.images))]
        if finished.baseline is not None:
            images.append(("baseline", 0, None, _strip_png(finished.baseline)))
        for i, view in enumerate((m.get("matching") or {}).get("views") or []):
            images.append(("matching", i, None, _strip_png(view)))
        for i, (iteration, frame) in enumerate(_thin(keyframes, keyframe_cap(finished.images))):
            images.append(("keyframe", i, int(iteration), _strip_png(frame)))
        p = scenario.get("params", {})
        with _closing(self._db()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                cur = conn.execute(
                    "INSERT INTO runs (key, code_version, created, source, preset, protocol, attack, defense, status, "
                    "psnr, ssim, lpips, seconds, iterations, scenario, started, finished, history) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, code_version(), time.time(), source, scenario.get("preset"), p.get("protocol"),
                     p.get("attack"), p.get("defense"), finished.status, m.get("psnr"), m.get("ssim"),
                     m.get("lpips"), finished.seconds, finished.iterations, json.dumps(scenario),
                     json.dumps(started_json), json.dumps(finished_json), json.dumps(finished.history)))
                run_id = int(cur.lastrowid)
                conn.executemany("INSERT INTO images (run_id, kind, idx, iteration, png) VALUES (?, ?, ?, ?, ?)",
                                 [(run_id, k, i, it, sqlite3.Binary(png)) for k, i, it, png in images])
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return run_id

    def load(self, run_id: int, keyframes: bool = True) -> StoredRun:
        """A recorded run whole; keyframes=False skips the replay frames (a sweep needs only the result)."""
        with _closing(self._db()) as conn:
            row = conn.execute("SELECT id, created, source, code_version, scenario, started, finished, history "
                               "FROM runs WHERE id = ?", (int(run_id),)).fetchone()
            if row is None:
                raise LeakdemoError(f"run {run_id}: no such run in {self.path} (`python -m leakdemo runs list`)")
            pngs = conn.execute("SELECT kind, idx, iteration, png FROM images WHERE run_id = ? AND kind != ? "
                                "ORDER BY kind, idx", (int(run_id), "" if keyframes else "keyframe")).fetchall()
        st, fin = json.loads(row[5]), json.loads(row[6])
        n_orig = len(st["names"])
        n = fin["n_images"]
        by_kind: dict[str, list] = {}
        for kind, idx, iteration, png in pngs:
            by_kind.setdefault(kind, []).append((iteration, bytes(png)))
        originals = _strip_images(by_kind["originals"][0][1], n_orig)
        started = Started(**{**st, "originals": originals})
        metrics = dict(fin["metrics"])
        scenario = json.loads(row[4])
        if "privacy_note" in metrics:  # a function of the scenario, not a measurement: said as today's code says it
            from .privacy import guarantee  # (the showcases' said "Fake gradients is not a …" in an older wording)
            try:
                metrics["privacy_note"] = guarantee(scenario.get("params", scenario))["note"]
            except (KeyError, TypeError, ValueError):  # a scenario recorded before a setting it needs existed
                pass  # keeps the note it was recorded with
        if metrics.get("matching") and "matching" in by_kind:
            views = [_strip_images(png, _views_count(png, originals)) for _, png in by_kind["matching"]]
            metrics["matching"] = {**metrics["matching"], "views": views}
        baseline = _strip_images(by_kind["baseline"][0][1], n) if "baseline" in by_kind else None
        finished = Finished(fin["status"], metrics, _strip_images(by_kind["final"][0][1], n), fin["seconds"],
                            fin["iterations"], json.loads(row[7]), baseline)
        keyframes = [(it, _strip_images(png, n)) for it, png in by_kind.get("keyframe", [])]
        return StoredRun(int(row[0]), row[1], row[2], row[3], scenario, started, finished, keyframes)

    def runs(self, limit: int = 50, milestones: bool = False, ids=None) -> list[dict]:
        """The newest runs, one summary dict each (what `runs list` prints); `changes`: what each changed from
        its preset (`scenario.changed_settings`: the points of a sweep differ in nothing else). milestones: add
        `to_20db_s`/`to_30db_s` (milestones.figures, read off each run's history: only where they are shown).
        ids: those runs instead, however old (those that exist), newest first."""
        from .milestones import figures
        from .scenario import changed_settings
        if ids is None:
            which, args = "ORDER BY id DESC LIMIT ?", (int(limit),)
        else:
            ids = sorted({int(i) for i in ids})
            which, args = f"WHERE id IN ({','.join('?' * len(ids))}) ORDER BY id DESC", tuple(ids)
        with _closing(self._db()) as conn:
            rows = conn.execute("SELECT id, created, source, preset, protocol, attack, defense, status, psnr, ssim, "
                                "lpips, seconds, iterations, code_version, "
                                + ("history, " if milestones else "") + "scenario, finished FROM runs " + which,
                                args).fetchall()
        keys = ("id", "created", "source", "preset", "protocol", "attack", "defense", "status", "psnr", "ssim",
                "lpips", "seconds", "iterations", "code_version")
        out = []
        for r in rows:
            try:
                params = json.loads(r[-2]).get("params", {})
            except (ValueError, AttributeError):
                params = {}
            try:  # a logit-sharing run is judged by its attack accuracy (PLI/TBI), not by PSNR
                metrics = json.loads(r[-1])["metrics"]
                accuracy = metrics.get("attack_accuracy")
            except (ValueError, KeyError, TypeError, AttributeError):
                metrics, accuracy = {}, None
            row = {**dict(zip(keys, r)), "attack_accuracy": accuracy, "changes": changed_settings(params, r[3])}
            if milestones:
                try:
                    history = json.loads(r[-3])
                except ValueError:
                    history = {}
                row.update({"to_20db_s": None, "to_30db_s": None, **figures(history, metrics)})
            out.append(row)
        return out

    def delete(self, run_id: int) -> bool:
        with _closing(self._db()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM images WHERE run_id = ?", (int(run_id),))
            gone = conn.execute("DELETE FROM runs WHERE id = ?", (int(run_id),)).rowcount
            conn.execute("COMMIT")
        return gone > 0

    # -- other results worth keeping (e.g. a defense's utility)

    def cached(self, kind: str, key: str):
        with _closing(self._db()) as conn:
            if self.any_version:
                row = conn.execute("SELECT value FROM cache WHERE kind = ? AND key = ? ORDER BY created DESC LIMIT 1",
                                   (kind, key)).fetchone()
            else:
                row = conn.execute("SELECT value FROM cache WHERE kind = ? AND key = ? AND code_version = ?",
                                   (kind, key, code_version())).fetchone()
        return None if row is None else json.loads(row[0])

    def kept(self, kind: str, limit: int = 100) -> list[tuple[str, object]]:
        """Every `kind` kept (this code version's; any version's where any_version), newest first, as (key, value):
        the Trade-offs page's finished custom sweeps, for the presenter's chooser."""
        with _closing(self._db()) as conn:
            if self.any_version:
                rows = conn.execute("SELECT key, value FROM cache WHERE kind = ? ORDER BY created DESC",
                                    (kind,)).fetchall()
            else:
                rows = conn.execute("SELECT key, value FROM cache WHERE kind = ? AND code_version = ? "
                                    "ORDER BY created DESC", (kind, code_version())).fetchall()
        newest = {}
        for k, v in rows:  # a key kept by several versions: its newest value, in its place
            newest.setdefault(k, v)
        return [(k, json.loads(v)) for k, v in list(newest.items())[:limit]]

    def keep(self, kind: str, key: str, value) -> None:
        with _closing(self._db()) as conn:
            conn.execute("INSERT OR REPLACE INTO cache (kind, key, code_version, created, value) VALUES (?, ?, ?, ?, ?)",
                         (kind, key, code_version(), time.time(), json.dumps(value)))


def _views_count(png: bytes, originals: np.ndarray) -> int:
    """AGIC's per-slot view strips hold one image per observed epoch: their width says how many."""
    import imageio.v3 as iio
    return iio.improps(png, extension=".png").shape[1] // originals.shape[2]


def keyframe_cap(images: np.ndarray) -> int:
    """Keyframes kept for a run: 24 for a few small images, down to 6 for a data set of them."""
    pixels = int(np.prod(np.asarray(images).shape[:3]))
    return int(min(STORED_KEYFRAMES, max(6, FRAME_PIXELS // max(pixels, 1))))


def _thin(frames: list, cap: int) -> list:
    """At most `cap` frames, evenly spread, always keeping the first and the last."""
    if len(frames) <= cap:
        return list(frames)
    picks = np.linspace(0, len(frames) - 1, cap).round().astype(int)
    return [frames[i] for i in sorted(set(picks.tolist()))]


class _closing:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()


def open_store(path: str | None = None) -> RunStore | None:
    """The run store at `path` (default: $LEAKDEMO_STORE or the cache folder), or None when turned off."""
    path = path or default_path()
    return None if path is None else RunStore(path)
