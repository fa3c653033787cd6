"""The hot path's regression guard (`make bench-guard`, and the end of `make bench`).

The register path through HTTP, on a hot limited event with `--existing` registrations
(100 000), at 1 and 32 clients, for this tree and for a baseline commit (`BASELINE`),
each served by a real `events-svc serve` of its own source on a database its own
migrations built. The baseline is checked out into a temporary worktree (`git worktree
add --detach`) and served from it with this environment's interpreter and packages.

The trees run in a-b-b-a order, `--rounds` times: every figure of a tree is the median of
its runs, and each is printed next to the baseline's as a ratio. The guard exits 1 when
this tree is more than `--tolerance` (20 %) slower than the baseline at 1 client or at 32
(the machine's own noise is about 15 % a run; the medians of a-b-b-a rounds keep it from
flapping).

The baseline moves forward only by a commit that says why (a faster register path
measured, or a deliberate cost accepted). Run the guard before and after a change to the
register path (`docs/performance.md`, "The hot path's guard").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import asyncpg

from bench.common import DB, NEW_EVENT, SEED, admin_server, http_cell, service, with_db

# The register path's cost before the waiting list and the other phase-3 work; the seat
# count in two halves (migration 0039) brought today's tree back to it.
BASELINE = "c3ee9d6"
CLIENTS = (1, 32)
ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """`commit` checked out in a temporary directory (removed on exit)."""
    with tempfile.TemporaryDirectory(prefix="events-guard-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), commit],
            check=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                check=False,
            )


def _env(tree: Path, url: str, **more: str) -> dict[str, str]:
    """The environment of a command of `tree`'s own source on `url`."""
    return {
        **os.environ,
        "PYTHONPATH": str(tree / "src"),
        "EVENTS_DATABASE_URL": url,
        "EVENTS_LOG_LEVEL": "WARNING",
        **more,
    }


def _token(tree: Path, url: str) -> str:
    """A `*` token minted by `tree`'s own CLI (its migrations applied first)."""
    env = _env(tree, url)
    cli = [sys.executable, "-m", "events_svc"]
    subprocess.run([*cli, "migrate"], env=env, cwd=tree, check=True, capture_output=True)
    made = subprocess.run(
        [*cli, "token", "create", "--name", "guard", "--scopes", "*"],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return made.stdout.strip().splitlines()[-1]


async def _fresh(admin_url: str) -> str:
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{DB}"')
    finally:
        await admin.close()
    return with_db(admin_url, DB)


async def _hot_event(url: str, existing: int) -> UUID:
    conn = await asyncpg.connect(url)
    try:
        event_id: UUID = await conn.fetchval(NEW_EVENT)
        if existing:
            await conn.execute(SEED, event_id, 1, existing)
        await conn.execute("VACUUM ANALYZE event.registrations")
        return event_id
    finally:
        await conn.close()


def run_tree(tree: Path, admin_url: str, existing: int, seconds: float) -> dict[int, float]:
    """One run of `tree`: registrations/s through HTTP at each of CLIENTS."""
    url = asyncio.run(_fresh(admin_url))
    token = _token(tree, url)
    event_id = asyncio.run(_hot_event(url, existing))
    rates: dict[int, float] = {}
    with service(url, 10, PYTHONPATH=str(tree / "src")) as base:  # `tree`'s own source
        asyncio.run(http_cell(base, token, event_id, 4, 1.0))  # warm: plans, connections
        for clients in CLIENTS:
            cell = asyncio.run(http_cell(base, token, event_id, clients, seconds))
            rates[clients] = cell.rate
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guard", description=__doc__)
    parser.add_argument("--baseline", default=BASELINE, help="the commit compared against")
    parser.add_argument("--rounds", type=int, default=2, help="a-b-b-a rounds")
    parser.add_argument("--seconds", type=float, default=3.0, help="each cell's time")
    parser.add_argument("--existing", type=int, default=100_000, help="the event's rows")
    parser.add_argument("--tolerance", type=float, default=0.20, help="slower than this fails")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[int, float]]] = {"today": [], "baseline": []}
    with admin_server() as admin_url, worktree(args.baseline) as base_tree:
        trees = {"today": ROOT, "baseline": base_tree}
        for n in range(args.rounds):
            for name in ("today", "baseline", "baseline", "today"):
                rates = run_tree(trees[name], admin_url, args.existing, args.seconds)
                runs[name].append(rates)
                shown = "  ".join(f"{c} client(s) {rates[c]:7.1f}/s" for c in CLIENTS)
                print(f"round {n + 1} {name:8} {shown}", flush=True)
    print(f"\n| clients | today reg/s | baseline ({args.baseline}) reg/s | ratio |")
    print("|---:|---:|---:|---:|")
    failed = False
    for clients in CLIENTS:
        today = statistics.median(r[clients] for r in runs["today"])
        base = statistics.median(r[clients] for r in runs["baseline"])
        ratio = today / base
        failed = failed or ratio < 1 - args.tolerance
        print(f"| {clients} | {today:.1f} | {base:.1f} | {ratio:.2f}x |")
    verdict = "SLOWER than the baseline allows" if failed else "within the tolerance"
    print(f"\nthe register path is {verdict} ({args.tolerance:.0%}, medians of "
          f"{args.rounds} a-b-b-a round(s), {args.existing} existing registrations)")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
