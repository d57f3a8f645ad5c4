//! Each `backfill ctl` command: what it sends to the admin API and how it
//! prints the answer, as tables or as the API's own JSON (`--json`).

use super::args::{
    checked_id, in_flag_words, CtlArgs, CtlCommand, FleetCommand, JournalCommand, SetArgs,
};
use super::client::{decode, list_all, Client};
use super::detail::{detail, settings_line};
use super::error::{one_line, CtlError};
use super::output::print_json;
use super::table::table;
use super::watch::watch;
use crate::screen;
use backfill::admin::{ActionResponse, AuditPage, BackfillView, Timeline, ValidationResponse};
use serde_json::Value;
use std::io::IsTerminal;

/// Run one command against the API at `args.url`.
pub(super) async fn dispatch(args: CtlArgs) -> Result<(), CtlError> {
    if !(args.url.starts_with("http://") || args.url.starts_with("https://")) {
        return Err(CtlError::Usage(
            "--url must start with http:// or https://".into(),
        ));
    }
    let reason = checked_reason(&args)?;
    let token = match &args.token_file {
        Some(path) => Some(token_from_file(path)?),
        None => args.token.clone(),
    };
    if args.token_on_argv {
        // AUTH-5, as the server warns of its own: /proc/<pid>/cmdline is
        // readable by every local user.
        eprintln!(
            "backfill ctl: warning: --token on the command line is readable by every local \
             user of this machine; pass it in BACKFILL_TOKEN or in a file named by --token-file"
        );
    }
    let client = Client::new(args.url.clone(), token).with_reason(reason);
    let json = args.json;
    match &args.command {
        CtlCommand::List => list(&client, json).await,
        CtlCommand::Show { id } => show(&client, id, json).await,
        CtlCommand::Start { id } => act(&client, "start", id, json).await,
        CtlCommand::Pause { id } => act(&client, "pause", id, json).await,
        CtlCommand::Resume { id } => act(&client, "resume", id, json).await,
        CtlCommand::Retry { id } => act(&client, "retry", id, json).await,
        CtlCommand::Validate { id } => validate(&client, id, json).await,
        CtlCommand::DryRun {
            id,
            batches,
            sample,
        } => dry_run(&client, id, *batches, *sample, json).await,
        CtlCommand::Undo { id } => undo(&client, id, json).await,
        CtlCommand::Journal(JournalCommand::Prune { id }) => prune(&client, id, json).await,
        CtlCommand::Set(set) => set_settings(&client, set, json).await,
        CtlCommand::Fleet(command) => super::fleet::run(&client, command, json).await,
        CtlCommand::Audit { id, limit } => audit(&client, id, *limit, json).await,
        CtlCommand::History { id, limit } => history(&client, id, *limit, json).await,
        CtlCommand::Watch {
            id,
            interval,
            count,
        } => {
            let interval = checked_interval(*interval)?;
            let id = id.as_deref().map(checked_id).transpose()?;
            watch(&client, id, interval, *count, json).await
        }
    }
}

/// `--reason`, checked as the server checks it, and only where the
/// command is an action.
fn checked_reason(args: &CtlArgs) -> Result<Option<&str>, CtlError> {
    let Some(reason) = args.reason.as_deref() else {
        return Ok(None);
    };
    let action = matches!(
        args.command,
        CtlCommand::Start { .. }
            | CtlCommand::Pause { .. }
            | CtlCommand::Resume { .. }
            | CtlCommand::Retry { .. }
            | CtlCommand::Validate { .. }
            | CtlCommand::Undo { .. }
            | CtlCommand::Journal(_)
            | CtlCommand::Set(_)
            | CtlCommand::Fleet(
                FleetCommand::Start(_)
                    | FleetCommand::Pause(_)
                    | FleetCommand::Resume(_)
                    | FleetCommand::Retry(_)
            )
    );
    if !action {
        return Err(CtlError::Usage(
            "--reason goes with an action (start, pause, resume, retry, validate, undo, journal prune, set)"
                .into(),
        ));
    }
    let sent = backfill::admin::encode_reason(reason);
    if sent.len() > backfill::admin::MAX_REASON_HEADER {
        return Err(CtlError::Usage(format!(
            "--reason is too long: {} characters once percent-encoded, at most {}",
            sent.len(),
            backfill::admin::MAX_REASON_HEADER
        )));
    }
    if reason.trim().is_empty() {
        return Err(CtlError::Usage("--reason is empty".into()));
    }
    Ok(Some(reason))
}

/// The seconds between `watch` refreshes, if they make sense.
fn checked_interval(interval: f64) -> Result<f64, CtlError> {
    // A day at most: `Duration` cannot hold every float, and an operator
    // watching wants refreshes, not a sleep of years.
    if !(interval.is_finite() && interval > 0.0 && interval <= 86_400.0) {
        return Err(CtlError::Usage(
            "--interval must be a number of seconds above 0 and at most 86400".into(),
        ));
    }
    Ok(interval)
}

/// `list`: every backfill, page after page.
async fn list(client: &Client, json: bool) -> Result<(), CtlError> {
    let items = list_all(client).await?;
    if json {
        print_json(&serde_json::json!({ "items": items, "next_after": null }));
    } else {
        let items: Vec<BackfillView> = decode(Value::Array(items))?;
        // On a terminal the table fits its width; a pipe gets every
        // column.
        let max = std::io::stdout()
            .is_terminal()
            .then(|| screen::usable(screen::size().cols));
        for line in table(&items, None, max) {
            println!("{line}");
        }
    }
    Ok(())
}

/// `show`: one backfill in detail.
async fn show(client: &Client, id: &str, json: bool) -> Result<(), CtlError> {
    let body = client
        .get(&format!("/admin/backfills/{}", checked_id(id)?))
        .await?;
    if json {
        print_json(&body);
    } else {
        print!("{}", detail(&decode(body)?));
    }
    Ok(())
}

/// `start`, `pause`, `resume`, `retry`: one operator action.
async fn act(client: &Client, action: &str, id: &str, json: bool) -> Result<(), CtlError> {
    let path = format!("/admin/backfills/{}/{action}", checked_id(id)?);
    send_action(client, &path, json, |r| action_line(action, r)).await
}

/// POST the action at `path` once (with one idempotency key) and print
/// the API's JSON, or the answer as `line` words it.
async fn send_action(
    client: &Client,
    path: &str,
    json: bool,
    line: impl FnOnce(&ActionResponse) -> String,
) -> Result<(), CtlError> {
    let body = client.act(path).await?;
    if json {
        print_json(&body);
    } else {
        println!("{}", line(&decode(body)?));
    }
    Ok(())
}

/// How an action's answer reads. A converged action changed nothing: it
/// says so, and for a retry of a backfill that is neither blocked nor
/// failed, what retry is for, rather than reading like a transition.
fn action_line(action: &str, r: &ActionResponse) -> String {
    let id = &r.backfill.id;
    let state = r.backfill.state;
    if r.outcome != "converged" {
        return format!(
            "{action} {id}: {} ({} -> {state}), generation {}",
            r.outcome, r.prior_state, r.backfill.generation
        );
    }
    if action == "retry" {
        format!(
            "retry {id}: no change, it is {state}; retry applies only to a blocked or failed \
             backfill"
        )
    } else {
        format!("{action} {id}: no change, it is already {state}")
    }
}

/// `undo`: start the reverse backfill of a journaled backfill.
async fn undo(client: &Client, id: &str, json: bool) -> Result<(), CtlError> {
    let path = format!("/admin/backfills/{}/undo", checked_id(id)?);
    send_action(client, &path, json, |r| {
        format!(
            "undo {id}: {}; {} is {} (it restores the rows that still hold what the repair \
             wrote; rows changed since are left alone as conflicts)",
            r.outcome, r.backfill.id, r.backfill.state
        )
    })
    .await
}

/// `journal prune`: delete a backfill's journal.
async fn prune(client: &Client, id: &str, json: bool) -> Result<(), CtlError> {
    let path = format!("/admin/backfills/{}/journal/prune", checked_id(id)?);
    send_action(client, &path, json, |r| {
        format!(
            "journal prune {id}: {}; the journal is deleted and {id} can no longer be undone",
            r.outcome
        )
    })
    .await
}

/// `validate`: an explicit validation and its outcome.
async fn validate(client: &Client, id: &str, json: bool) -> Result<(), CtlError> {
    let body = client
        .act(&format!("/admin/backfills/{}/validate", checked_id(id)?))
        .await?;
    if json {
        print_json(&body);
    } else {
        let r: ValidationResponse = decode(body.clone())?;
        let tail = r
            .detail
            .or(r.reason)
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        println!(
            "validate {}: {} (state {}){tail}",
            r.backfill_id, r.outcome, r.state
        );
    }
    // A validation that ran and found the postcondition false is an
    // answer a script must not mistake for success.
    if body["outcome"] == "failure" {
        return Err(CtlError::Failed(format!(
            "validation of {id} failed: the postcondition does not hold"
        )));
    }
    Ok(())
}

/// The token in the first line of `path` (`--token-file`), as the server
/// reads its operator token file.
fn token_from_file(path: &std::path::Path) -> Result<String, CtlError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CtlError::Usage(one_line(&format!(
            "--token-file: cannot read {}: {}",
            path.display(),
            e.kind()
        )))
    })?;
    match text.lines().next().map(str::trim) {
        Some(token) if !token.is_empty() => Ok(token.to_string()),
        _ => Err(CtlError::Usage(one_line(&format!(
            "--token-file: the first line of {} is empty",
            path.display()
        )))),
    }
}

/// `dry-run`: the batches run and rolled back, and the report. Sent once,
/// without an idempotency key: it changes nothing.
async fn dry_run(
    client: &Client,
    id: &str,
    batches: Option<u32>,
    sample: Option<u32>,
    json: bool,
) -> Result<(), CtlError> {
    let body = client
        .post(&super::dry_run::path(&checked_id(id)?, batches, sample))
        .await?;
    if json {
        print_json(&body);
    } else {
        print!("{}", super::dry_run::report(&decode(body.clone())?));
    }
    // A batch that failed is what the dry run is for; a script must not
    // read it as a clean preview.
    if let Some(batch) = body["error"]["batch"].as_u64() {
        return Err(CtlError::DryRunFailed(format!(
            "dry run {id}: batch {batch} failed ({}); nothing was changed",
            body["error"]["kind"].as_str().unwrap_or("error")
        )));
    }
    Ok(())
}

/// `set`: a settings change, and the settings that result.
async fn set_settings(client: &Client, set: &SetArgs, json: bool) -> Result<(), CtlError> {
    let change = Value::Object(set.change()?);
    let body = client
        .idempotent(
            "PATCH",
            &format!("/admin/backfills/{}/settings", checked_id(&set.id)?),
            Some(&change),
        )
        .await
        .map_err(|e| match e {
            CtlError::Usage(message) => CtlError::Usage(in_flag_words(&message)),
            other => other,
        })?;
    if json {
        print_json(&body);
    } else {
        let b: BackfillView = decode(body)?;
        println!("settings {}: {}", b.id, settings_line(&b.settings));
    }
    Ok(())
}

/// `audit`: the last `limit` audit records of one backfill.
async fn audit(client: &Client, id: &str, limit: i64, json: bool) -> Result<(), CtlError> {
    let body = client
        .get(&format!(
            "/admin/audit?backfill={}&limit={limit}",
            checked_id(id)?
        ))
        .await?;
    if json {
        print_json(&body);
        return Ok(());
    }
    let page: AuditPage = decode(body)?;
    if page.items.is_empty() {
        println!("no audit records for {id}");
        return Ok(());
    }
    println!(
        "{:<6} {:<20} {:<9} {:<12} {:<24} {:<23} {:>4} CORRELATION",
        "SEQ", "AT", "ACTION", "ACTOR", "OUTCOME", "TRANSITION", "GEN"
    );
    // Escaped again here (AUD-3): a server that did not would otherwise
    // let stored escape sequences reach the operator's terminal.
    let shown = |t: &str| backfill::admin::audit_text(t);
    for e in page.items {
        let transition = match (&e.prior_state, &e.resulting_state) {
            (Some(p), Some(r)) => format!("{p} -> {r}"),
            _ => "-".into(),
        };
        println!(
            "{:<6} {:<20} {:<9} {:<12} {:<24} {:<23} {:>4} {}",
            e.seq,
            e.at.format("%Y-%m-%d %H:%M:%S"),
            shown(&e.action),
            shown(&e.actor.unwrap_or_else(|| format!("({})", e.authority))),
            shown(&e.outcome),
            transition,
            e.generation
                .map(|g| g.to_string())
                .unwrap_or_else(|| "-".into()),
            shown(&e.correlation.unwrap_or_default())
        );
        // What changed (a settings change's old and new values) or why it
        // was refused: on its own line, under the row it belongs to.
        if let Some(detail) = e.detail.as_deref().filter(|d| !d.is_empty()) {
            println!("       detail: {}", shown(detail));
        }
        if let Some(reason) = e.reason.as_deref() {
            println!("       reason: {}", shown(reason));
        }
    }
    Ok(())
}

/// `history`: the newest `limit` timeline entries of one backfill (OBS-4),
/// printed oldest first so the story reads down the screen.
async fn history(client: &Client, id: &str, limit: i64, json: bool) -> Result<(), CtlError> {
    let body = client
        .get(&format!(
            "/admin/backfills/{}/timeline?limit={limit}",
            checked_id(id)?
        ))
        .await?;
    if json {
        print_json(&body);
        return Ok(());
    }
    let timeline: Timeline = decode(body)?;
    if timeline.items.is_empty() {
        println!("nothing recorded for {id} yet");
        return Ok(());
    }
    println!(
        "{:<23} {:<9} {:<12} {:<25} {:<14} DETAIL",
        "AT", "BY", "WHAT", "STATE", "WHO"
    );
    // Escaped again here (AUD-3), as `audit` does.
    let shown = |t: &str| backfill::admin::audit_text(t);
    for e in timeline.items.into_iter().rev() {
        let what = match e.partition {
            Some(part) => format!("{} p{part}", shown(&e.kind)),
            None => shown(&e.kind),
        };
        let state = match (&e.from_state, &e.state) {
            (Some(from), Some(to)) => format!("{from} -> {to}"),
            (None, Some(to)) => to.clone(),
            _ => "-".into(),
        };
        let mut detail = match (e.outcome.as_deref(), e.detail.as_deref()) {
            (Some(outcome), Some(detail)) => format!("{outcome}: {}", shown(detail)),
            (Some(outcome), None) => outcome.to_string(),
            (None, Some(detail)) => shown(detail),
            (None, None) => String::new(),
        };
        if let Some(reason) = e.reason.as_deref() {
            detail.push_str(&format!("; reason: {}", shown(reason)));
        }
        println!(
            "{:<23} {:<9} {:<12} {:<25} {:<14} {}",
            e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            e.source,
            what,
            state,
            shown(e.actor.as_deref().unwrap_or("-")),
            detail
        );
    }
    Ok(())
}
