//! `backfill ctl`: the operator CLI over the admin HTTP API (ADM-1).
//!
//! It only projects what the API returns and sends the actions of CONTRACT
//! section 3; it keeps no lifecycle of its own and never synthesises an
//! outcome. Unknown stays unknown and a failed refresh is shown as stale,
//! never as zero (ADM-3).
//!
//! Exit codes ([`error`]'s constants, listed in the operating guide): 0
//! ok, 2 usage (also 400/422, and a `--url` that is a fleet's listener
//! for a single-database command), 3 conflict (409), 4 unauthorized
//! (401/403), 5 server or network error (also a fleet database's 503),
//! 6 no such backfill (404), 7 a validation that found the postcondition
//! false, 8 a dry run whose batch failed.

mod args;
mod client;
mod detail;
mod dispatch;
mod dry_run;
mod error;
mod fleet;
mod output;
mod partitions;
#[cfg(test)]
mod sample;
mod table;
mod watch;

pub use args::{CtlArgs, CtlCommand, FleetAction, FleetCommand, SetArgs};
pub use error::{
    CtlError, EXIT_CONFLICT, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_SERVER, EXIT_UNAUTHORIZED,
    EXIT_USAGE,
};

/// Run `backfill ctl`; returns the process exit code.
pub fn run(args: CtlArgs) -> i32 {
    let system = actix_rt::System::new();
    match system.block_on(dispatch::dispatch(args)) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("backfill ctl: {e}");
            e.code()
        }
    }
}
