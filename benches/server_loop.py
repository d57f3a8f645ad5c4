#!/usr/bin/env python3
"""The CPU per row of a batch loop run inside the server, with and without
the product's fence (hand-run, see README.md).

Usage: python3 benches/server_loop.py --backfill target/release/backfill
       [--server postgres://postgres@127.0.0.1:5432/postgres]
       [--rows 1000000] [--batch 100,1000] [--reps 3]

`backfill demo` creates and migrates a scratch database (dropped at the
end), to which a `running` backfill row is added. Each variant is a
PL/pgSQL procedure that repairs the bench's canonical table (the same
rows and the same change as `backfill bench`) in batches, committing each
batch inside the procedure:

- `loop`: the bench's `plpgsql` baseline (select at most B keys, update
  them, advance a plain progress row, COMMIT);
- `loop+fence`: the same, advancing the checkpoint of the `backfill` row
  through the product's fence (`backfill_checkpoint_advance`, with the
  key's stored encoding and its JSON) instead of the plain row;
- `engine-in-server`: the engine's one-statement batch (the array-form
  CTE) as static SQL, whose plan PL/pgSQL caches, and the product's
  fence. No `SET LOCAL` timeouts: inside a procedure they bound nothing
  (`statement_timeout` bounds the whole `CALL`);
- `dynamic`: the same statement passed as text and run with `EXECUTE`
  (parsed and planned for every batch), as one procedure shared by every
  repair would have to;
- `dynamic+subtransaction`: the same inside a block with an exception
  handler, so that a failing batch rolls back alone and the procedure
  can report what it committed before.

The backend's CPU comes from /proc/<pid>/schedstat before and after the
CALL (nanoseconds on a CPU), per row; medians of the repetitions, the
variants alternated. Each run gets a fresh table, vacuumed and analyzed.
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True
from fence_cost import psql, scratch_database  # noqa: E402  (the sibling hand-run bench)

DB = "bf_server_loop"
TABLE = "sl_items"

# The stored encoding of a bigint key (src/key.rs): its tag, then the
# value with the sign bit flipped, big-endian.
ENCODE = "('\\x12'::bytea || int8send(({k}) # (-9223372036854775808)::bigint))"

PLAIN_ADVANCE = """
        UPDATE sl_progress SET checkpoint = v_ckpt, batches = batches + 1 WHERE id = 1;"""

FENCE_ADVANCE = """
        v_next := """ + ENCODE.format(k="v_ckpt") + """;
        PERFORM backfill_checkpoint_advance(p_id, 'w', 1, v_expected, v_next,
            to_jsonb(v_ckpt), cardinality(v_keys)::bigint, {batch});
        v_expected := v_next;"""


# The engine's one-statement batch (the array-form CTE of src/repair/sql.rs),
# with the checkpoint and the bound as $1 and $2.
STATEMENT = (f"WITH k AS (SELECT array_agg(id ORDER BY id) AS a FROM ("
             f"SELECT id FROM {TABLE} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT {{batch}}) AS s), "
             f"u AS (UPDATE {TABLE} SET email_norm = lower(email), touched = touched + 1 "
             f"WHERE id = ANY((SELECT a FROM k)::bigint[])) SELECT a FROM k")


def loop_sql(name, batch, variant):
    """A procedure over TABLE in batches of `batch`, as `variant` says."""
    advance = PLAIN_ADVANCE if variant == "loop" else FENCE_ADVANCE.format(batch=batch)
    if variant in ("loop", "loop+fence"):
        batch_sql = f"""
        SELECT array_agg(id ORDER BY id) INTO v_keys FROM (
            SELECT id FROM {TABLE} WHERE id > v_ckpt AND id <= v_bound ORDER BY id LIMIT {batch}
        ) AS k;
        EXIT WHEN v_keys IS NULL;
        UPDATE {TABLE} SET email_norm = lower(email), touched = touched + 1 WHERE id = ANY(v_keys);"""
    elif variant == "engine-in-server":
        # Static SQL: PL/pgSQL caches its plan, as only a procedure written
        # for this one repair could.
        batch_sql = "\n        " + STATEMENT.format(batch=batch).replace(
            " SELECT a FROM k", " SELECT a INTO v_keys FROM k").replace(
            "$1", "v_ckpt").replace("$2", "v_bound") + ";\n        EXIT WHEN v_keys IS NULL;"
    else:
        # The repair's statement as text, as a procedure shared by every
        # repair would get it: parsed and planned for every batch.
        batch_sql = """
        EXECUTE p_statement INTO v_keys USING v_ckpt, v_bound;
        EXIT WHEN v_keys IS NULL;"""
    step = batch_sql + """
        v_ckpt := v_keys[array_upper(v_keys, 1)];""" + advance
    if variant == "dynamic+subtransaction":
        # A failing batch rolls back alone and the CALL returns what it
        # committed before (a block with EXCEPTION is a subtransaction).
        step = """
        BEGIN
            EXECUTE p_statement INTO v_keys USING v_ckpt, v_bound;
            IF v_keys IS NOT NULL THEN
                v_ckpt := v_keys[array_upper(v_keys, 1)];""" + advance.replace("\n", "\n        ") + """
            END IF;
        EXCEPTION WHEN OTHERS THEN
            v_failed := SQLSTATE;
        END;
        EXIT WHEN v_keys IS NULL OR v_failed IS NOT NULL;"""
    return f"""
CREATE OR REPLACE PROCEDURE {name}(p_id text, p_statement text) LANGUAGE plpgsql AS $$
DECLARE
    v_ckpt bigint := 0;
    v_bound bigint;
    v_keys bigint[];
    v_expected bytea;
    v_next bytea;
    v_failed text;
BEGIN
    SELECT coalesce(max(id), 0) INTO v_bound FROM {TABLE};
    SELECT checkpoint INTO v_expected FROM backfill WHERE id = p_id;
    LOOP{step}
        COMMIT;
    END LOOP;
    COMMIT;
    IF v_failed IS NOT NULL THEN
        RAISE EXCEPTION 'batch failed: %', v_failed;
    END IF;
END $$;"""


VARIANTS = ["loop", "loop+fence", "engine-in-server", "dynamic", "dynamic+subtransaction"]


def setup(url, batches):
    psql(url, """
CREATE TABLE sl_progress (id int PRIMARY KEY, checkpoint bigint, batches bigint);
INSERT INTO sl_progress VALUES (1, 0, 0);
""")
    for batch in batches:
        for name in VARIANTS:
            psql(url, loop_sql(proc(name, batch), batch, name))


def proc(name, batch):
    return "sl_" + name.replace("-", "_").replace("+", "_") + f"_{batch}"


def reset(url, rows, probe):
    psql(url, f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (id bigint PRIMARY KEY, email text NOT NULL, email_norm text,
    touched int NOT NULL DEFAULT 0) WITH (autovacuum_enabled = off);
INSERT INTO {TABLE} (id, email) SELECT g, 'User' || g || '@Example.COM' FROM generate_series(1, {rows}) AS g;
INSERT INTO backfill (id, state, bound, bound_json, empty_source, checkpoint, key_type,
    source_rows, generation, owner, lease_expires_at, attempts, rows_done, batches_done,
    description, build_info, registered_at, updated_at, started_at, settings, batch_size)
SELECT '{probe}', 'running', '\\x12ffffffffffffffff'::bytea, bound_json, false,
    NULL, key_type, source_rows, 1, 'w', now() + interval '1 day',
    0, 0, 0, description, build_info, registered_at, now(), now(), settings, batch_size
FROM backfill WHERE id NOT LIKE 'probe.%' ORDER BY id LIMIT 1;
UPDATE sl_progress SET checkpoint = 0, batches = 0;
VACUUM ANALYZE {TABLE};
VACUUM ANALYZE backfill;
CHECKPOINT;
""")


def run(url, name, batch, rows, probe):
    """(backend µs of CPU per row, rows per second) of one CALL, whose
    fence (if any) advances the fresh `running` row `probe`."""
    reset(url, rows, probe)
    script = (f"SELECT pg_backend_pid() AS pid \\gset\n"
              f"\\setenv BF_PID :pid\n"
              f"\\! cat /proc/$BF_PID/schedstat\n"
              f"\\! date +%s.%N\n"
              f"CALL {proc(name, batch)}('{probe}', '{STATEMENT.format(batch=batch)}');\n"
              f"\\! date +%s.%N\n"
              f"\\! cat /proc/$BF_PID/schedstat\n")
    out = psql(url, script).split()
    cpu0, t0, t1, cpu1 = int(out[0]), float(out[3]), float(out[4]), int(out[5])
    bad = psql(url, f"SELECT count(*) FROM {TABLE} WHERE email_norm IS DISTINCT FROM lower(email) "
                    f"OR touched <> 1", single=True).strip()
    if bad != "0":
        sys.exit(f"{name} at B = {batch} left {bad} rows not repaired exactly once")
    return (cpu1 - cpu0) / rows / 1000.0, rows / (t1 - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backfill", required=True, help="the backfill binary")
    parser.add_argument("--server", default=os.environ.get(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--rows", type=int, default=1000000)
    parser.add_argument("--batch", default="100,1000")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    url = scratch_database(args.backfill, args.server, DB)
    try:
        setup(url, batches)
        print("| B | variant | backend µs/row | vs `loop` | rows/s | vs `loop` |")
        print("|---:|---|---:|---:|---:|---:|")
        probes = 0
        for batch in batches:
            results = {name: [] for name in VARIANTS}
            for _ in range(args.reps):
                for name in VARIANTS:
                    probes += 1
                    results[name].append(run(url, name, batch, args.rows, f"probe.{probes}"))
            cpu = {k: sorted(c for c, _ in v)[len(v) // 2] for k, v in results.items()}
            rate = {k: sorted(r for _, r in v)[len(v) // 2] for k, v in results.items()}
            for name in VARIANTS:
                print(f"| {batch} | {name} | {cpu[name]:.2f} | {cpu[name] / cpu['loop']:.2f} | "
                      f"{rate[name]:,.0f} | {rate[name] / rate['loop']:.2f} |", flush=True)
    finally:
        psql(args.server, f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", single=True)


if __name__ == "__main__":
    main()
