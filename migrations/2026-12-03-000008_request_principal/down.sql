-- Keys become global again: of the responses stored under one key, the
-- oldest stays.
ALTER TABLE backfill_request DROP CONSTRAINT backfill_request_pkey;
DELETE FROM backfill_request r
 USING backfill_request older
 WHERE older.idempotency_key = r.idempotency_key
   AND (older.created_at, older.principal) < (r.created_at, r.principal);
ALTER TABLE backfill_request ADD PRIMARY KEY (idempotency_key);
ALTER TABLE backfill_request DROP COLUMN principal;
