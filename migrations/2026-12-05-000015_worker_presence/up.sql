-- The processes that serve backfills (PAR-6): each one's presence, which
-- its lease renewer refreshes every renewal round, claims or not. A
-- partitioned backfill's fair share per process is its unfinished
-- partitions over the live processes that serve it (`ids` holds the
-- stable IDs the process has registered, REG-4) and have room for a
-- runner or already run one of its partitions. A process that dies
-- stops refreshing and drops out when `expires_at` passes.
CREATE TABLE backfill_worker (
    worker_id    text PRIMARY KEY CHECK (octet_length(worker_id) BETWEEN 1 AND 200),
    ids          text[] NOT NULL,
    free_runners integer NOT NULL CHECK (free_runners >= 0),
    expires_at   timestamptz NOT NULL
);

-- A process's own partition claims, found by owner: its presence round
-- reads them every renewal round, and the partition table keeps every
-- partition of every backfill ever run.
CREATE INDEX backfill_partition_owner ON backfill_partition (owner) WHERE owner IS NOT NULL;
