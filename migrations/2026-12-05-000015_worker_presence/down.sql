DROP INDEX backfill_partition_owner;
DROP TABLE backfill_worker;
