//! A throwaway PostgreSQL cluster from the machine's own binaries, for
//! `backfill demo` (and the tests) when no `DATABASE_URL` is given.
//!
//! `initdb -A trust --no-sync` then `pg_ctl start` on a free loopback port,
//! in a fresh temporary directory; as root, both run as the `postgres` user
//! (PostgreSQL refuses to run as root) in a directory that user owns. The
//! cluster is stopped and its directory removed when the value is dropped.
//!
//! [`EphemeralPostgres::standby_of`] adds a streaming standby of such a
//! cluster (`pg_basebackup -R -X stream`), for tests of what a primary
//! reports about its standbys; [`EphemeralPostgres::crash`] and
//! [`EphemeralPostgres::promote`] turn such a pair into a failover.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the throwaway cluster could not be started.
#[derive(Debug, thiserror::Error)]
pub enum EphemeralError {
    /// No PostgreSQL server binaries on this machine.
    #[error("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin: install them (apt-get install -y postgresql) or set DATABASE_URL")]
    NoBinaries,
    /// A step failed.
    #[error("starting a throwaway PostgreSQL failed: {0}")]
    Step(String),
}

/// A running throwaway cluster.
#[derive(Debug)]
pub struct EphemeralPostgres {
    dir: PathBuf,
    pg_ctl: PathBuf,
    port: u16,
    as_root: bool,
    stopped: bool,
}

/// Debian keeps each major version's server binaries in
/// `/usr/lib/postgresql/<version>/bin`, off `PATH`; the newest that has
/// `tool` is used.
fn find_pg_bin(tool: &str) -> Option<PathBuf> {
    find_pg_bin_under(Path::new("/usr/lib/postgresql"), tool)
}

fn find_pg_bin_under(root: &Path, tool: &str) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|dir| dir.join("bin").join(tool).exists())
        // By version number, so that 10 is newer than 9.6.
        .max_by_key(|dir| {
            let name = dir.file_name().unwrap_or_default().to_string_lossy();
            let version: Vec<u32> = name.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            version
        })
        .map(|dir| dir.join("bin").join(tool))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A directory suffix unique within this process (a counter) and across
/// processes that reuse a PID (the clock's nanoseconds).
fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl EphemeralPostgres {
    /// Start a cluster. Blocking (about a second); call it from a blocking
    /// context or before the async runtime starts.
    pub fn start(label: &str) -> Result<Self, EphemeralError> {
        Self::start_with(label, &[])
    }

    /// Start a cluster with extra server settings (`name`, `value`), given
    /// on the server's command line. Blocking, like [`Self::start`].
    pub fn start_with(label: &str, settings: &[(&str, &str)]) -> Result<Self, EphemeralError> {
        let initdb = find_pg_bin("initdb").ok_or(EphemeralError::NoBinaries)?;
        let me = Self::prepare(label)?;
        let data = me.dir.join("data");
        me.run(
            &initdb,
            &[
                "-A",
                "trust",
                "--no-sync",
                "-U",
                "postgres",
                "-D",
                &data.display().to_string(),
            ],
        )?;
        me.launch(settings)?;
        Ok(me)
    }

    /// Start a streaming standby of `primary`: a base backup taken with
    /// `pg_basebackup -R -X stream` (which writes `standby.signal` and the
    /// connection back to the primary), started on a port of its own with
    /// the extra `settings`. The primary must allow replication
    /// connections, which a cluster of [`Self::start`] does: `initdb`'s
    /// trust rules include them and PostgreSQL's defaults since 10
    /// (`wal_level = replica`, `max_wal_senders = 10`) stream. Blocking.
    pub fn standby_of(
        primary: &EphemeralPostgres,
        label: &str,
        settings: &[(&str, &str)],
    ) -> Result<Self, EphemeralError> {
        let basebackup = find_pg_bin("pg_basebackup").ok_or(EphemeralError::NoBinaries)?;
        let me = Self::prepare(label)?;
        me.run(
            &basebackup,
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &me.dir.join("data").display().to_string(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        )?;
        me.launch(settings)?;
        Ok(me)
    }

    /// A fresh directory the server user owns and a free port; nothing
    /// started yet. Dropping the value removes the directory.
    fn prepare(label: &str) -> Result<Self, EphemeralError> {
        let pg_ctl = find_pg_bin("pg_ctl").ok_or(EphemeralError::NoBinaries)?;
        let dir = std::env::temp_dir().join(format!(
            "backfill-{label}-pg-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| EphemeralError::Step(e.to_string()))?;
        let as_root = is_root();
        let mut me = Self {
            dir,
            pg_ctl,
            port: 0,
            as_root,
            stopped: false,
        };
        if as_root {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&me.dir)
                .status()
                .map_err(|e| EphemeralError::Step(e.to_string()))?;
            if !status.success() {
                return Err(EphemeralError::Step(
                    "cannot hand the data directory to the postgres user".into(),
                ));
            }
        }
        me.port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| EphemeralError::Step(e.to_string()))?
            .port();
        Ok(me)
    }

    /// Start the server on the data directory, waiting until it accepts
    /// connections.
    fn launch(&self, settings: &[(&str, &str)]) -> Result<(), EphemeralError> {
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c synchronous_commit=off -c max_connections=300",
            self.port,
            self.dir.display()
        );
        for (name, value) in settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        self.run(
            &self.pg_ctl,
            &[
                "-D",
                &self.dir.join("data").display().to_string(),
                "-l",
                &self.dir.join("log").display().to_string(),
                "-w",
                "-o",
                &options,
                "start",
            ],
        )
    }

    fn run(&self, program: &Path, args: &[&str]) -> Result<(), EphemeralError> {
        // As root the program runs through runuser (util-linux, in
        // /usr/sbin); a failure to start names which one was missing.
        let output = if self.as_root {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(program)
                .args(args)
                .output()
                .map_err(|e| EphemeralError::Step(format!("runuser (as root): {e}")))?
        } else {
            Command::new(program)
                .args(args)
                .output()
                .map_err(|e| EphemeralError::Step(format!("{}: {e}", program.display())))?
        };
        if output.status.success() {
            Ok(())
        } else {
            let tool = program
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Err(EphemeralError::Step(format!(
                "{tool} exited with {}",
                output.status
            )))
        }
    }

    /// The port the cluster listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Kill the server as a crash would (`pg_ctl stop -m immediate`: no
    /// shutdown checkpoint, every session cut off mid-transaction), keeping
    /// its directory (and log) until the value is dropped. Blocking.
    pub fn crash(&self) -> Result<(), EphemeralError> {
        let data = self.dir.join("data").display().to_string();
        self.run(&self.pg_ctl, &["-D", &data, "-m", "immediate", "stop"])
    }

    /// Promote a standby of [`Self::standby_of`] to a primary
    /// (`pg_ctl promote`), waiting until it has left recovery and accepts
    /// writes. Blocking.
    pub fn promote(&self) -> Result<(), EphemeralError> {
        let data = self.dir.join("data").display().to_string();
        self.run(&self.pg_ctl, &["-D", &data, "-w", "promote"])
    }

    /// Stop the cluster and remove its directory.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let data = self.dir.join("data").display().to_string();
        let _ = self.run(&self.pg_ctl, &["-D", &data, "-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Leave the cluster running after this value is dropped (the test
    /// binaries share one cluster for their whole run).
    pub fn keep(mut self) -> String {
        self.stopped = true;
        self.url()
    }
}

impl Drop for EphemeralPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binaries are found under Debian's versioned directories without
    /// `PATH`, the newest version by number that has the tool.
    #[test]
    fn emb01_finds_the_newest_versions_binary_without_path() {
        let root = std::env::temp_dir().join(format!("bf-pgbin-{}", unique()));
        for (version, tools) in [("9.6", &["initdb"][..]), ("10", &["initdb"]), ("17", &[])] {
            let bin = root.join(version).join("bin");
            std::fs::create_dir_all(&bin).expect("create bin");
            for tool in tools {
                std::fs::write(bin.join(tool), "").expect("write tool");
            }
        }
        let found = find_pg_bin_under(&root, "initdb");
        let missing = find_pg_bin_under(&root, "pg_ctl");
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(found, Some(root.join("10/bin/initdb")));
        assert_eq!(missing, None);
    }

    /// No binaries: one line that names the install command.
    #[test]
    fn emb01_missing_binaries_say_in_one_line_what_to_install() {
        let line = EphemeralError::NoBinaries.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("apt-get install -y postgresql"), "{line}");
        assert!(line.contains("DATABASE_URL"), "{line}");
        assert_eq!(find_pg_bin_under(Path::new("/nonexistent"), "initdb"), None);
    }
}
