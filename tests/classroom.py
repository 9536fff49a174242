"""A classroom against one dashboard server: many Chromium tabs clicking Run at once.

Used by the browser tests (12 tabs, asserted) and, run directly, as the load benchmark whose figures the
README quotes (never asserted as times):

    .venv/bin/python tests/classroom.py --tabs 30 --rounds 5      # one server, five rounds in a row
    .venv/bin/python tests/classroom.py --memory 300              # RSS of the server and its workers
    .venv/bin/python tests/classroom.py --abandon                 # a closed tab's worker, freed how fast
    .venv/bin/python tests/classroom.py --lone                    # a lone DLG run: page vs CLI time

Traffic goes only to the server this script starts on 127.0.0.1.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = os.environ.get("LEAKDEMO_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]
QUERY = "preset=dlg&iterations=15&image_size=16&seed={tab}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workers: int = 2) -> tuple[subprocess.Popen, str]:
    """`streamlit run app.py` on a free loopback port. Its output goes to a file (never an unread pipe,
    whose full buffer would block the server the first time it logs more than 64 KB)."""
    port = free_port()
    env = {**os.environ, "LEAKDEMO_MAX_RUNS": str(workers)}
    log = tempfile.NamedTemporaryFile("w+", prefix="leakdemo-server-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                             "--server.address", "127.0.0.1", "--server.headless", "true"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    log.close()  # the server writes through its own copy of the file
    proc.log_path = log.name
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    with open(proc.log_path, encoding="utf-8", errors="replace") as fh:
        tail = fh.read()[-4000:]
    os.unlink(proc.log_path)
    raise RuntimeError("streamlit did not start:\n" + tail)


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to the server alone, as a service manager would; its workers must go with it. Its log goes too:
    every test run left one in /tmp (252 on this machine after a day of `make test`)."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
    os.unlink(proc.log_path)


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)


def watch_errors(page, errors: list, tab) -> None:
    """Page errors (uncaught exceptions: what blanked tabs before) and console errors, per tab."""
    page.on("pageerror", lambda e: errors.append((tab, f"pageerror: {e}")))
    page.on("console", lambda m: errors.append((tab, f"console: {m.text}")) if m.type == "error" else None)


def wait_until_warm(page, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if re.search(r"Engine: [1-9]\d* of \d+ workers ready", page.inner_text("body")):
            return
        page.wait_for_timeout(1000)
        page.reload()
        page.get_by_role("button", name="Run attack").wait_for(timeout=90_000)
    raise AssertionError("the engine's workers never became ready")


def classroom_round(browser, url: str, tabs: int, timeout: float = 300, query: str = QUERY,
                    progress=None) -> dict:
    """Open `tabs` tabs, click Run in all of them at once, watch until every one says Finished.

    Returns what a teacher would want to know: how many finished, any blank page, the queue positions
    the waiting tabs showed, every page/console error, and the slowest tab's time."""
    errors: list = []
    pages = []
    for i in range(tabs):
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        watch_errors(page, errors, i)
        page.goto(f"{url}/?{query.format(tab=i)}")
        pages.append(page)
    for page in pages:
        page.get_by_role("button", name="Run attack").wait_for(timeout=120_000)
    wait_until_warm(pages[0])
    t0 = time.time()
    for page in pages:
        page.get_by_role("button", name="Run attack").click(no_wait_after=True)
    finished, blank, positions, tracebacks, last = {}, set(), set(), set(), {}
    deadline = t0 + timeout
    while len(finished) < tabs and time.time() < deadline:
        for i, page in enumerate(pages):
            if i in finished:
                continue
            body = page.inner_text("body")
            last[i] = _status(body)
            if "Attack Lab" not in body:
                blank.add(i)
            if "Traceback" in body or page.locator('[data-testid="stException"]').count():
                tracebacks.add(i)
            # "… for 12 s — 2 runs ahead": without the clock, only a tab seen in its first second counted
            m = re.search(r"Waiting for a free worker(?: for \d+ s)? — (?:next in line|(\d+) runs? ahead)", body)
            if m:
                positions.add(int(m.group(1) or 0) + 1)
            if re.search(r"Finished\s+after \d+ iterations", body):
                finished[i] = time.time() - t0
        if progress is not None:
            progress(f"{time.time() - t0:5.0f} s: {_cpu()} {len(finished)}/{tabs} finished; waiting: "
                     + "; ".join(f"{i}: {last[i]}" for i in sorted(set(last) - set(finished))))
        time.sleep(0.5)
    for i, page in enumerate(pages):  # a tab that finished must stay drawn (the old bug blanked it then)
        if "Attack Lab" not in page.inner_text("body"):
            blank.add(i)
    for page in pages:
        page.close()
    return {"tabs": tabs, "finished": len(finished),
            "unfinished": {i: last.get(i) for i in range(tabs) if i not in finished}, "blank": sorted(blank), "tracebacks": sorted(tracebacks),
            "queue_positions_seen": sorted(positions), "errors": errors,
            "slowest_s": round(max(finished.values()), 1) if finished else None,
            "median_s": round(sorted(finished.values())[len(finished) // 2], 1) if finished else None}


def spawned() -> set[int]:
    """Pids of multiprocessing's spawned children on this machine (the dashboard's workers among them)."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as fh:
                    if b"spawn_main" in fh.read():
                        out.add(int(d))
            except OSError:
                continue
    return out


def _cpu() -> str:
    """CPU seconds used so far by the server and by the browser (for progress reports)."""
    def total(pred):
        t = 0.0
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as fh:
                        cmd = fh.read()
                    if pred(cmd):
                        with open(f"/proc/{d}/stat") as fh:
                            f = fh.read().rsplit(")", 1)[1].split()
                        t += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
                except OSError:
                    continue
        return t
    return (f"server {total(lambda c: b'streamlit' in c and b'run' in c):.0f}s "
            f"workers {total(lambda c: b'spawn_main' in c):.0f}s chromium {total(lambda c: b'chrom' in c):.0f}s")


def _status(body: str) -> str:
    """The live panel's first line, for progress reports."""
    tail = body.split("reproduces it.", 1)[-1].strip()
    return tail.splitlines()[0][:80] if tail else "(empty)"


def tree_rss_mb(pid: int) -> dict:
    """RSS of a process and its descendants, from /proc (MB)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except OSError:
                continue
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            out[p] = kb / 1024
        except (OSError, StopIteration):
            pass
        todo += children.get(p, [])
    return out


def pss_mb(pid: int) -> float:
    """Proportional set size (MB): shared pages counted once across the processes sharing them."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("Pss:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def _memory(browser, url, proc, seconds: int) -> dict:
    """Idle RSS, then one long CAFE run sampled every 10 s: is the busy worker flat after warm-up?"""
    page = browser.new_page()
    page.goto(f"{url}/?preset=cafe&iterations=100000")
    page.get_by_role("button", name="Run attack").wait_for(timeout=90_000)
    wait_until_warm(page)
    time.sleep(5)
    idle = tree_rss_mb(proc.pid)
    idle_pss = sum(pss_mb(p) for p in idle)
    page.get_by_role("button", name="Run attack").click()
    samples = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        time.sleep(10)
        samples.append(round(max(v for k, v in tree_rss_mb(proc.pid).items() if k != proc.pid)))
    page.get_by_role("button", name="Stop").click()
    page.close()
    warm = samples[len(samples) // 5:]  # after the first fifth of the run
    return {"idle_total_mb": round(sum(idle.values())), "idle_total_pss_mb": round(idle_pss),
            "idle_server_mb": round(idle.get(proc.pid, 0)),
            "idle_per_worker_mb": sorted(round(v) for k, v in idle.items() if k != proc.pid),
            "busy_worker_mb": samples, "after_warmup_spread_pct":
            round(100 * (max(warm) - min(warm)) / min(warm), 1) if warm else None}


def _abandon(browser, url) -> dict:
    """With one worker: tab A runs a long attack, tab B waits; A is closed. How soon does B start?"""
    a, b = browser.new_page(), browser.new_page()
    a.goto(f"{url}/?preset=invgrad&iterations=24000")
    a.get_by_role("button", name="Run attack").wait_for(timeout=90_000)
    wait_until_warm(a)
    a.get_by_role("button", name="Run attack").click()
    a.get_by_text(re.compile(r"^Iteration \d+ / 24000")).first.wait_for(timeout=60_000)
    b.goto(f"{url}/?preset=dlg&iterations=5&image_size=16")
    b.get_by_role("button", name="Run attack").click()
    b.get_by_text("Waiting for a free worker").first.wait_for(timeout=30_000)
    t0 = time.time()
    a.close()
    b.get_by_text(re.compile(r"^Iteration \d+ / 5|Finished")).first.wait_for(timeout=60_000)
    freed = time.time() - t0
    b.close()
    return {"worker_free_after_tab_closed_s": round(freed, 2)}


def _lone(browser, url) -> dict:
    """A lone DLG run in the page against the same scenario from the CLI (the attack's own seconds)."""
    query = "preset=dlg&images=coffee&seed=1"
    page = browser.new_page()
    page.goto(f"{url}/?{query}")
    page.get_by_role("button", name="Run attack").wait_for(timeout=90_000)
    wait_until_warm(page)
    page.get_by_role("button", name="Run attack").click()
    page.get_by_text("Finished", exact=False).first.wait_for(timeout=300_000)
    page_s = float(re.search(r"iterations in ([\d.]+) s", page.inner_text("body")).group(1))
    page.close()
    out = subprocess.run([sys.executable, "-m", "leakdemo", "run", "dlg", "--set", "images=coffee",
                          "--set", "seed=1", "--jsonl"], cwd=ROOT, capture_output=True, text=True, check=True)
    cli_s = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    return {"page_s": page_s, "cli_s": cli_s, "ratio": round(page_s / cli_s, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tabs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--memory", type=int, metavar="SECONDS", default=0)
    ap.add_argument("--abandon", action="store_true")
    ap.add_argument("--lone", action="store_true")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright
    before = spawned()
    proc, url = start_server(workers=1 if args.abandon else 2)
    try:
        with sync_playwright() as p:
            browser = launch(p)
            for r in range(args.rounds):
                res = classroom_round(browser, url, args.tabs, timeout=900,
                                      progress=lambda m: print(m, file=sys.stderr, flush=True))
                res["errors"] = res["errors"][:5] + ([f"... {len(res['errors']) - 5} more"] if len(res["errors"]) > 5 else [])
                print(json.dumps({"round": r + 1, **res}), flush=True)
            if args.memory:
                print(json.dumps(_memory(browser, url, proc, args.memory)), flush=True)
            if args.abandon:
                print(json.dumps(_abandon(browser, url)), flush=True)
            if args.lone:
                print(json.dumps(_lone(browser, url)), flush=True)
            browser.close()
    finally:
        stop_server(proc)
        time.sleep(7)
        print(json.dumps({"worker_processes_left_7s_after_sigterm": len(spawned() - before)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
