//! A throwaway PgBouncer in front of the test server, for the pooler tests.
//!
//! Debian's `pgbouncer` ([`super::prereq::pgbouncer`]) runs in the
//! foreground on a free loopback port with a configuration of its own in a
//! fresh directory: every database of the test server, trust
//! authentication, the pool mode and pool size the test asks for. As root
//! it runs as the `postgres` user (PgBouncer refuses to run as root). It
//! is killed and its directory removed when the value is dropped.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running PgBouncer.
pub struct Pgbouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Pgbouncer {
    /// Start PgBouncer in `mode` (`transaction`, `session`) with
    /// `pool_size` server sessions per database and user, in front of the
    /// server of `server_url` (a `postgres://user@host:port/db` URL).
    /// Panics when it cannot start: a pooler test never silently skips.
    pub fn start(server_url: &str, mode: &str, pool_size: u32) -> Pgbouncer {
        let binary = super::prereq::pgbouncer();
        let (host, port) = host_and_port(server_url);
        let listen = free_port();
        let dir = std::env::temp_dir().join(format!(
            "bft-pgbouncer-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("the pooler's directory");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("auth file");
        let ini = format!(
            "[databases]\n* = host={host} port={port}\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {listen}\n\
             unix_socket_dir =\nauth_type = trust\nauth_file = {dir}/users.txt\n\
             pool_mode = {mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {dir}/pgbouncer.log\npidfile = {dir}/pgbouncer.pid\n",
            dir = dir.display()
        );
        let config = dir.join("pgbouncer.ini");
        std::fs::write(&config, ini).expect("the pooler's configuration");
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let mut command = if root {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .expect("chown the pooler's directory");
            assert!(status.success(), "chown the pooler's directory");
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&binary);
            c
        } else {
            Command::new(&binary)
        };
        let child = command
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let pooler = Pgbouncer {
            child,
            dir,
            port: listen,
        };
        pooler.wait_listening();
        pooler
    }

    /// The URL of `database` through the pooler.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The pooler's log, for a failing assertion's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    fn wait_listening(&self) {
        let until = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < until,
                "PgBouncer did not listen on {}: {}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        // PgBouncer itself (its pid file), and the runuser wrapping it.
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pgbouncer.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The host and port of a `postgres://user@host:port/db` URL (port 5432
/// when it names none).
fn host_and_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match hostport.rsplit_once(':') {
        Some((host, port)) => (host.to_string(), port.parse().expect("a numeric port")),
        None => (hostport.to_string(), 5432),
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
