-- The example application's own table. It lives apart from the framework's
-- migrations (top-level migrations/) so that "schema auto-migration" can be
-- switched off and tested independently: a backfill never changes schema.
CREATE TABLE events (
    id          bigserial PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    author      text NOT NULL,
    kind        integer NOT NULL,
    content     text NOT NULL,
    tags        jsonb NOT NULL DEFAULT '[]',
    -- Columns the example repairs fill for rows that existed before them.
    -- NULL means "not repaired yet"; readers compute the value on read
    -- (EX-7), writers of new rows fill them directly.
    author_norm text,
    content_len integer,
    tag_count   integer,
    -- The deliberately non-idempotent repair increments this; any value
    -- other than 1 up to its bound proves a batch was applied twice (or not
    -- at all).
    touch_count integer NOT NULL DEFAULT 0
);

-- The compound ordering key of the content-length repair (EX-2) and of the
-- newest-first feed.
CREATE INDEX events_created_at_id ON events (created_at, id);
