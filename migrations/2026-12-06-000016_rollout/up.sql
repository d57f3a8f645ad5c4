-- The rollout caps an operator set for a fleet (FLT-2): how many
-- databases may run a repair at once. Each database of the fleet keeps
-- the caps it was told, so a process that serves it again after a
-- restart holds a repair to the cap it had, not to its configuration.
-- `max_databases` NULL: the cap was lifted. `set_at` is the setting
-- process's clock: the newest setting a process finds among its
-- databases wins.
CREATE TABLE backfill_rollout (
    repair_id     text PRIMARY KEY CHECK (octet_length(repair_id) BETWEEN 1 AND 128),
    max_databases integer CHECK (max_databases IS NULL OR max_databases >= 1),
    set_at        timestamptz NOT NULL
);
