DROP TABLE backfill_worker;
