-- Idempotency keys belong to the principal that sent them: a second
-- operator who happens to reuse a key gets an answer to their own request,
-- never the first one's stored response. `principal` is the authenticated
-- principal's name, or '' when the authority names no individual
-- (trusted-network mode); principal names are never empty.
ALTER TABLE backfill_request
    ADD COLUMN principal text NOT NULL DEFAULT '' CHECK (octet_length(principal) <= 128);
ALTER TABLE backfill_request DROP CONSTRAINT backfill_request_pkey;
ALTER TABLE backfill_request ADD PRIMARY KEY (principal, idempotency_key);
