-- API-3: rejected requests of one source and reason are audited as one row
-- per window. `request_count` is how many requests the row stands for (1
-- for every other row), `source` the peer address they came from, and
-- `last_at` when the latest of them was counted.
ALTER TABLE backfill_audit
    ADD COLUMN request_count bigint NOT NULL DEFAULT 1 CHECK (request_count >= 1),
    ADD COLUMN source text CHECK (source IS NULL OR octet_length(source) <= 64),
    ADD COLUMN last_at timestamptz;
