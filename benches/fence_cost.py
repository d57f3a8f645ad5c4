#!/usr/bin/env python3
"""The server CPU of one batch's fence, by part (hand-run, see README.md).

Usage: python3 benches/fence_cost.py --backfill target/release/backfill
       [--server postgres://postgres@127.0.0.1:5432/postgres] [--txns 30000]
       [--reps 3]

`backfill demo` creates and migrates a scratch database (dropped at the
end). A `running` backfill row is added, and copies of the `backfill`
table with and without its CHECK constraints and its triggers, each with
a copy of the fence function (`backfill_checkpoint_advance`), and a
narrow progress table with a fence of its own. pgbench (simple
protocol, one connection) then sends each variant as the engine sends a
batch's fence: one message holding BEGIN, the fence and COMMIT, the
checkpoint advancing by one each time. The backend's CPU comes from
/proc/<pid>/schedstat (nanoseconds on a CPU) over the whole run, per
transaction; medians of the repetitions. `write` is a transaction with
the same read and a one-column update: what any batch's commit costs,
against which each fence's own cost is read.
"""

import argparse
import os
import subprocess
import sys
import time

DB = "bf_fence_cost"

# The next checkpoint: the current one (8 bytes, big-endian) plus one.
NEXT = "int8send(('x' || encode(s.c, 'hex'))::bit(64)::bigint + 1)"
ARGS = ("convert_from(decode('70726f62652e78','hex'),'UTF8'), "
        "convert_from(decode('77','hex'),'UTF8'), 1, s.c, " + NEXT +
        ", (convert_from(decode('31','hex'),'UTF8'))::jsonb, 100, 100")


def current(table):
    return f"(SELECT checkpoint AS c FROM {table} WHERE id = 'probe.x') s"


def fence_call(function, table):
    return f"BEGIN \\; SELECT {function}({ARGS}) FROM {current(table)} \\; COMMIT"


VARIANTS = [
    ("empty", "`BEGIN`, `SELECT 1`, `COMMIT`", "BEGIN \\; SELECT 1 \\; COMMIT"),
    ("empty+timeouts", "the same with a batch's three `SET LOCAL` timeouts",
     "BEGIN \\; SET LOCAL statement_timeout = 10000 \\; SET LOCAL lock_timeout = 300 \\; "
     "SET LOCAL idle_in_transaction_session_timeout = 10000 \\; SELECT 1 \\; COMMIT"),
    ("read", "the read of the checkpoint alone (no write)",
     f"BEGIN \\; SELECT {NEXT} FROM {current('backfill')} \\; COMMIT"),
    ("write", "the read and a one-column update: a batch's commit",
     f"BEGIN \\; SELECT {NEXT} FROM {current('backfill')} \\; "
     "UPDATE probe_counter SET n = n + 1 WHERE id = 1 \\; COMMIT"),
    ("narrow", "fence on a narrow progress row", fence_call("probe_adv_narrow", "probe_progress")),
    ("wide", "fence on a copy of `backfill`, no CHECKs, no triggers",
     fence_call("probe_adv_bf_plain", "bf_plain")),
    ("wide+checks", "the copy with its CHECK constraints", fence_call("probe_adv_bf_checks", "bf_checks")),
    ("wide+triggers", "the copy with its guard and timeline triggers",
     fence_call("probe_adv_bf_trig", "bf_trig")),
    ("wide+both", "the copy with CHECKs and triggers", fence_call("probe_adv_bf_all", "bf_all")),
    ("backfill", "the product's fence on `backfill` itself",
     fence_call("backfill_checkpoint_advance", "backfill")),
]

NARROW_FENCE = """
CREATE TABLE probe_counter (id int PRIMARY KEY, n bigint);
INSERT INTO probe_counter VALUES (1, 0);
CREATE TABLE probe_progress (id text PRIMARY KEY, owner text, generation bigint,
    lease_expires_at timestamptz, checkpoint bytea, checkpoint_json jsonb,
    rows_done bigint, batches_done bigint, batch_size int, updated_at timestamptz);
INSERT INTO probe_progress VALUES ('probe.x', 'w', 1, now() + interval '1 day',
    int8send(4611686018427387904), NULL, 0, 0, 100, now());
CREATE FUNCTION probe_adv_narrow(p_id text, p_owner text, p_generation bigint,
    p_expected bytea, p_checkpoint bytea, p_checkpoint_json jsonb, p_rows bigint,
    p_batch_size integer) RETURNS text LANGUAGE plpgsql AS $$
DECLARE v text;
BEGIN
    UPDATE probe_progress SET checkpoint = p_checkpoint, checkpoint_json = p_checkpoint_json,
        rows_done = rows_done + p_rows, batches_done = batches_done + 1,
        batch_size = p_batch_size, updated_at = now()
    WHERE id = p_id AND owner = p_owner AND generation = p_generation
      AND lease_expires_at > clock_timestamp()
      AND checkpoint IS NOT DISTINCT FROM p_expected
      AND p_checkpoint > coalesce(checkpoint, ''::bytea)
    RETURNING id INTO v;
    IF NOT FOUND THEN RAISE EXCEPTION 'stale'; END IF;
    RETURN v;
END $$;
"""


def psql(url, sql, single=False):
    args = ["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt"]
    args += ["-c", sql] if single else []
    out = subprocess.run(args, input=None if single else sql, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"psql failed: {out.stderr.strip()}")
    return out.stdout


def setup(url):
    psql(url, """
INSERT INTO backfill (id, state, bound, bound_json, empty_source, checkpoint, key_type,
    source_rows, generation, owner, lease_expires_at, attempts, rows_done, batches_done,
    description, build_info, registered_at, updated_at, started_at, settings, batch_size)
SELECT 'probe.x', 'running', '\\xffffffffffffffff'::bytea, bound_json, false,
    int8send(4611686018427387904), key_type, source_rows, 1, 'w', now() + interval '1 day',
    0, 0, 0, description, build_info, registered_at, now(), now(), settings, batch_size
FROM backfill ORDER BY id LIMIT 1;
""" + NARROW_FENCE)
    fence = psql(url, "SELECT pg_get_functiondef(p.oid) FROM pg_proc p "
                 "WHERE proname = 'backfill_checkpoint_advance' AND pronargs = 8", single=True)
    triggers = psql(url, "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = "
                    "'backfill'::regclass AND NOT tgisinternal AND tgname <> 'backfill_no_delete'",
                    single=True).splitlines()
    for table, like, with_triggers in [("bf_plain", "", False), ("bf_checks", "INCLUDING CONSTRAINTS", False),
                                       ("bf_trig", "", True), ("bf_all", "INCLUDING CONSTRAINTS", True)]:
        sql = (f"CREATE TABLE {table} (LIKE backfill INCLUDING DEFAULTS {like}); "
               f"ALTER TABLE {table} ADD PRIMARY KEY (id); "
               f"INSERT INTO {table} SELECT * FROM backfill WHERE id = 'probe.x'; ")
        sql += fence.replace("public.backfill_checkpoint_advance(", f"probe_adv_{table}(").replace(
            "UPDATE backfill SET", f"UPDATE {table} SET") + ";\n"
        if with_triggers:
            sql += "".join(t.replace("ON public.backfill ", f"ON public.{table} ") + ";\n" for t in triggers)
            sql += (f"CREATE INDEX ON {table} (next_attempt_at NULLS FIRST, id) "
                    f"WHERE state IN ('running', 'validating'); CREATE UNIQUE INDEX ON {table} (undo_of);")
        psql(url, sql)


def scratch_database(backfill, server, name):
    """Create database `name` on `server`, migrated and holding one
    completed demo backfill, with `backfill demo`; return its URL."""
    subprocess.run([backfill, "demo", "--database-url", server, "--rows", "1000",
                    "--exit-when-done", "--database-name", name, "--listen", "127.0.0.1:18380",
                    "--admin-listen", "127.0.0.1:18381"], check=True, capture_output=True)
    return server.rsplit("/", 1)[0] + "/" + name


def cpu_ns(pid):
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except OSError:
        return None


def run(url, script, txns, seen):
    path = f"/tmp/{DB}_{os.getpid()}.sql"
    with open(path, "w") as f:
        f.write(script + "\n")
    env = dict(os.environ, PGAPPNAME="fence_cost")
    bench = subprocess.Popen(["pgbench", "-n", "-M", "simple", "-c", "1", "-t", str(txns), "-f", path, url],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    pid = None
    while pid is None and bench.poll() is None:
        for p in psql(url, "SELECT pid FROM pg_stat_activity WHERE application_name = 'fence_cost'",
                      single=True).split():
            if int(p) not in seen and cpu_ns(int(p)) is not None:
                pid = int(p)
                seen.add(pid)
    first = last = cpu_ns(pid) if pid else None
    while bench.poll() is None:
        now = cpu_ns(pid)
        last = now if now is not None else last
        time.sleep(0.02)
    output = bench.stdout.read().decode()
    if bench.returncode != 0 or first is None:
        sys.exit(f"pgbench failed: {output[-500:]}")
    return (last - first) / txns / 1000.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backfill", required=True, help="the backfill binary")
    parser.add_argument("--server", default=os.environ.get(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--txns", type=int, default=30000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    url = scratch_database(args.backfill, args.server, DB)
    try:
        setup(url)
        seen = set()
        results = {name: [] for name, _, _ in VARIANTS}
        for _ in range(args.reps):
            for name, _, script in VARIANTS:
                results[name].append(run(url, script, args.txns, seen))
        median = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
        print("| variant | what | backend µs per transaction | above `write` |")
        print("|---|---|---:|---:|")
        for name, what, _ in VARIANTS:
            above = "" if name in ("empty", "empty+timeouts", "read") else \
                f"{median[name] - median['write']:.0f}"
            print(f"| {name} | {what} | {median[name]:.0f} | {above} |")
    finally:
        psql(args.server, f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", single=True)


if __name__ == "__main__":
    main()
