//! `backfill ctl` (placeholder, filled in below).
