DROP TABLE backfill_outbox;
DROP TABLE backfill_notify_subscription;
