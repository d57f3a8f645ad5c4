//! The programs the suites drive from outside Rust, provided on first use
//! so that `cargo test --workspace` passes on a fresh machine with nothing
//! typed before it: Debian's `chromium` and the pinned `playwright-core`
//! for `tests/ui_browser.rs`, `node` for `tests/ui.rs`, `tmux` for
//! `cli/tests/terminal.rs`, `pgbouncer` for the pooler tests.
//!
//! A missing Debian package is installed with `apt-get` when the tests run
//! as root; a missing `tests/ui/node_modules` is filled with `npm ci` from
//! `tests/ui/package-lock.json`. Each install says on the terminal what it
//! runs, and writes the tool's own output to a log under `target/tmp`.
//! What cannot be provided (not root, no network, no apt-get, or
//! `BACKFILL_TEST_NO_INSTALL` set) fails the test with one line naming the
//! command that would fix it; nothing is skipped.
//!
//! Each provision runs once per test binary (a `OnceLock`, so parallel
//! tests wait for the first one's result and all fail with the same line),
//! and under an exclusive lock file in `target/tmp`, so that test
//! binaries running at the same time neither install twice nor see a half
//! written `node_modules`. apt-get additionally waits for dpkg's own lock,
//! which other work on the machine may hold.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Set (to anything) to forbid installing: a missing program then fails
/// with the command that would install it.
pub const NO_INSTALL: &str = "BACKFILL_TEST_NO_INSTALL";

/// Where the browser tests look for Chromium instead of Debian's path.
pub const CHROMIUM_ENV: &str = "BACKFILL_CHROMIUM";

/// Debian's `chromium` package puts the browser here.
const DEBIAN_CHROMIUM: &str = "/usr/bin/chromium";

/// A provision's outcome: the program's path, or the one line to fail with.
type Provided = Result<PathBuf, String>;

/// The browser for the browser tests: `BACKFILL_CHROMIUM` when set (which
/// must exist; nothing is installed for a path the user chose), otherwise
/// Debian's, installed when missing.
pub fn chromium() -> PathBuf {
    static CELL: OnceLock<Provided> = OnceLock::new();
    provided(&CELL, || match std::env::var_os(CHROMIUM_ENV) {
        Some(path) => {
            let path = PathBuf::from(path);
            if path.exists() {
                Ok(path)
            } else {
                Err(format!(
                    "{CHROMIUM_ENV}={} does not exist: point it at a Chromium binary, or \
                     unset it to use Debian's (apt-get install -y chromium)",
                    path.display()
                ))
            }
        }
        None => debian_package("the browser tests", "chromium", || {
            Some(PathBuf::from(DEBIAN_CHROMIUM)).filter(|p| p.exists())
        }),
    })
}

/// `playwright-core` in `ui_dir/node_modules`, as `ui_dir/package-lock.json`
/// pins it; `npm ci` when it is missing (npm itself installed when missing).
pub fn playwright(ui_dir: &Path) -> PathBuf {
    static CELL: OnceLock<Provided> = OnceLock::new();
    provided(&CELL, || npm_ci(ui_dir))
}

/// `node`, from `PATH`; Debian's `nodejs` when missing.
pub fn node() -> PathBuf {
    static CELL: OnceLock<Provided> = OnceLock::new();
    provided(&CELL, || {
        debian_package("the web client's tests", "nodejs", || on_path("node"))
    })
}

/// `tmux`, from `PATH`; Debian's `tmux` when missing.
pub fn tmux() -> PathBuf {
    static CELL: OnceLock<Provided> = OnceLock::new();
    provided(&CELL, || {
        debian_package("the terminal tests", "tmux", || on_path("tmux"))
    })
}

/// `pgbouncer`, Debian's (in `/usr/sbin`, off a user's `PATH`), installed
/// when missing.
pub fn pgbouncer() -> PathBuf {
    static CELL: OnceLock<Provided> = OnceLock::new();
    provided(&CELL, || {
        debian_package("the pooler tests", "pgbouncer", || {
            on_path("pgbouncer")
                .or_else(|| Some(PathBuf::from("/usr/sbin/pgbouncer")).filter(|p| p.exists()))
        })
    })
}

/// The first caller in this process computes the outcome; every caller
/// gets it, or fails with its line.
fn provided(cell: &OnceLock<Provided>, provide: impl FnOnce() -> Provided) -> PathBuf {
    match cell.get_or_init(provide) {
        Ok(path) => path.clone(),
        Err(line) => panic!("{line}"),
    }
}

/// `name` in a directory of `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The program `find` looks for, installing Debian's `package` when it is
/// missing and installing is possible.
fn debian_package(who: &str, package: &str, find: impl Fn() -> Option<PathBuf>) -> Provided {
    if let Some(path) = find() {
        return Ok(path);
    }
    let fix = format!("apt-get install -y {package}");
    let missing = format!("{who} need Debian's {package}, which is not installed");
    if std::env::var_os(NO_INSTALL).is_some() {
        return Err(format!(
            "{missing} ({NO_INSTALL} is set): run `{fix}` as root"
        ));
    }
    if !is_root() {
        return Err(format!(
            "{missing} and the tests are not root: run `sudo {fix}`"
        ));
    }
    if on_path("apt-get").is_none() {
        return Err(format!(
            "{missing} and this machine has no apt-get: install {package} with its package manager"
        ));
    }
    let _lock = SetupLock::take()?;
    // Another test binary may have installed it while this one waited.
    if let Some(path) = find() {
        return Ok(path);
    }
    let log = fresh_log(&format!("apt-{package}"))?;
    say(&format!(
        "{missing}; installing it: {fix} (output in {})",
        log.display()
    ));
    // A fresh machine's package lists may be empty or stale: install
    // first, and only when that fails update the lists and install again.
    let installed = apt(&["install", "-y", package], &log)
        || (apt(&["update"], &log) && apt(&["install", "-y", package], &log));
    match find() {
        Some(path) if installed => Ok(path),
        _ => Err(format!(
            "{missing} and `{fix}` failed ({}): run it by hand, with network access",
            last_error(&log)
        )),
    }
}

/// `npm ci` into `ui_dir`, unless its `node_modules` is complete.
fn npm_ci(ui_dir: &Path) -> Provided {
    let package = ui_dir.join("node_modules/playwright-core");
    // npm writes its own lock file into node_modules last, so its presence
    // with the package means an install that finished.
    let complete = || {
        (package.join("package.json").exists()
            && ui_dir.join("node_modules/.package-lock.json").exists())
        .then(|| package.clone())
    };
    if let Some(path) = complete() {
        return Ok(path);
    }
    let fix = format!("npm ci --prefix {}", ui_dir.display());
    let missing = format!(
        "the browser tests need playwright-core in {}/node_modules, which is not installed",
        ui_dir.display()
    );
    if std::env::var_os(NO_INSTALL).is_some() {
        return Err(format!("{missing} ({NO_INSTALL} is set): run `{fix}`"));
    }
    let npm = match on_path("npm") {
        Some(npm) => npm,
        None => debian_package("the browser tests", "npm", || on_path("npm"))?,
    };
    let _lock = SetupLock::take()?;
    if let Some(path) = complete() {
        return Ok(path);
    }
    let log = fresh_log("npm-ci")?;
    say(&format!(
        "{missing}; installing it: {fix} (output in {})",
        log.display()
    ));
    let ran = Command::new(&npm)
        .args(["ci", "--no-audit", "--no-fund", "--prefix"])
        .arg(ui_dir)
        .stdin(Stdio::null())
        .stdout(log_file(&log)?)
        .stderr(log_file(&log)?)
        .status();
    match (ran, complete()) {
        (Ok(status), Some(path)) if status.success() => Ok(path),
        (Err(e), _) => Err(format!("{missing} and `{fix}` could not start ({e})")),
        _ => Err(format!(
            "{missing} and `{fix}` failed ({}): run it by hand, with access to the npm registry",
            last_error(&log)
        )),
    }
}

/// One apt-get run, its output appended to `log`; whether it succeeded.
fn apt(args: &[&str], log: &Path) -> bool {
    let (Ok(out), Ok(err)) = (log_file(log), log_file(log)) else {
        return false;
    };
    Command::new("apt-get")
        // Wait for dpkg's lock rather than fail when other work holds it.
        .args(["-o", "DPkg::Lock::Timeout=600", "-q"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .is_ok_and(|s| s.success())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `target/tmp/setup-<name>.log`, emptied: it holds one provision's
/// output, which its failure line is read from.
fn fresh_log(name: &str) -> Result<PathBuf, String> {
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("setup-{name}.log"));
    File::create(&log)
        .map_err(|e| format!("cannot write the set-up log {}: {e}", log.display()))?;
    Ok(log)
}

fn log_file(log: &Path) -> Result<File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("cannot write the set-up log {}: {e}", log.display()))
}

/// The line of the log that says what went wrong, for the one-line
/// failure: apt's last `E:` line (after an update, its own failure), or
/// npm's first `npm error` line that is not a field of the error object,
/// its stack or the pointer to its debug log; else the log's last line.
fn last_error(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let apt = lines.iter().rev().find(|l| l.starts_with("E:"));
    let npm = lines.iter().find(|l| {
        l.strip_prefix("npm error").is_some_and(|rest| {
            let rest = rest.trim_start();
            !rest.is_empty()
                && !["code ", "syscall ", "errno ", "at ", "A complete log", "}"]
                    .iter()
                    .any(|p| rest.starts_with(p))
        })
    });
    apt.or(npm)
        .or(lines.last())
        .map_or_else(|| format!("see {}", log.display()), |l| l.to_string())
}

/// What the set-up does, on the terminal: written to the process's
/// standard error directly, past the test harness's capture of
/// `eprintln!`, because an install takes minutes and the reader should
/// know why.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "backfill tests: {line}");
}

/// An exclusive lock, held while one process installs: the file
/// `target/tmp/setup.lock`, created only if absent and holding its
/// owner's PID, removed when dropped (a failed provision unwinds through
/// the drop too). The file of a process that died holding it (its PID
/// gone from `/proc`) is removed by the next one to wait. A lock file
/// rather than `File::lock` because the crate's minimum Rust predates it.
/// An exclusive lock file in `target/tmp`, held while one test binary
/// sets something up that others share; released when dropped.
pub struct SetupLock(PathBuf);

impl SetupLock {
    /// Wait for the lock (taking over one whose holder is gone).
    pub fn take() -> Result<Self, String> {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("setup.lock");
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    let _ = write!(file, "{}", std::process::id());
                    return Ok(Self(path));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if abandoned(&path) {
                        let _ = std::fs::remove_file(&path);
                    } else {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                Err(e) => {
                    return Err(format!(
                        "cannot create the set-up lock {}: {e}",
                        path.display()
                    ))
                }
            }
        }
    }
}

impl Drop for SetupLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether the lock file's owner is gone. A file without a PID yet is one
/// whose owner is between creating and writing it, unless it is older than
/// that could take; without `/proc` only age tells, and an install takes
/// minutes, not an hour.
fn abandoned(path: &Path) -> bool {
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default();
    let pid = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok());
    match pid {
        Some(pid) if Path::new("/proc/self").exists() => {
            !Path::new("/proc").join(pid.to_string()).exists()
        }
        Some(_) => age > Duration::from_secs(3600),
        None => age > Duration::from_secs(10),
    }
}
