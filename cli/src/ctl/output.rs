//! Output shared by the commands: the API's JSON as `--json` prints it.

use serde_json::Value;

/// Print `value` as indented JSON (compact if that fails).
pub(super) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}
