-- A sample of the keys that hold a blocked repair back (RT-4): at most 10
-- keys, as JSON in the key's own type, recorded when a batch or the
-- lifecycle validation blocked, as the definition reported them. Keys
-- only, never the rows' values. Meaningful only while the row is
-- `blocked`; the next block records its own sample.
ALTER TABLE backfill ADD COLUMN blocking_keys jsonb
    CHECK (blocking_keys IS NULL OR (jsonb_typeof(blocking_keys) = 'array'
        AND jsonb_array_length(blocking_keys) <= 10
        AND octet_length(blocking_keys::text) <= 8192));
