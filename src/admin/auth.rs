//! Operator authorization (AUTH-1, AUTH-2).
//!
//! Principals come from `--operator-token` and a tokens file; each carries a
//! set of capability strings. Only [`Capability::Read`] (`backfill:read`),
//! [`Capability::Operate`] (`backfill:operate`) and [`Capability::Inspect`]
//! (`backfill:inspect`) grant anything: community,
//! channel or membership roles a principal may also carry are kept as
//! strings and never consulted. Tokens are stored and compared as SHA-256
//! digests, in constant time, and every principal is compared so the time
//! taken does not reveal which one matched.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::Path;
use subtle::ConstantTimeEq;

/// A deployment-operator capability (AUTH-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// `backfill:read`: list, detail, audit.
    Read,
    /// `backfill:operate`: start, pause, resume, retry, validate, dry run.
    Operate,
    /// `backfill:inspect`: see row data, the one deliberate exception to
    /// diagnostics without it: a dry run's sample of changed rows with
    /// their values (DRY-3). Granted only by name, never implied by
    /// another capability.
    Inspect,
}

impl Capability {
    /// The capability's name in token files.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Read => "backfill:read",
            Capability::Operate => "backfill:operate",
            Capability::Inspect => "backfill:inspect",
        }
    }

    /// The capability a tokens-file name stands for; `None` for any other
    /// string. The one list of names the server knows: the tokens file's
    /// check of `backfill:*` names (AUTH-5) asks here.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "backfill:read" => Some(Capability::Read),
            "backfill:operate" => Some(Capability::Operate),
            "backfill:inspect" => Some(Capability::Inspect),
            _ => None,
        }
    }
}

/// One principal: a name for audit, the SHA-256 of its token, and the
/// capabilities it holds. Roles that are not capabilities are dropped here.
#[derive(Clone)]
pub struct Principal {
    /// The principal's name, recorded as the actor in audit (AUD-1); 1 to
    /// 128 bytes, without control, invisible, bidirectional or markup
    /// characters.
    pub name: String,
    digest: [u8; 32],
    capabilities: BTreeSet<Capability>,
}

impl std::fmt::Debug for Principal {
    // The digest is not a secret by itself, but nothing needs to see it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .field("capabilities", &self.capabilities)
            .finish()
    }
}

impl Principal {
    /// A principal for a plaintext token (e.g. `--operator-token`).
    pub fn from_token(name: &str, token: &str, capabilities: &[&str]) -> Result<Self, AuthError> {
        Self::from_digest(name, sha256(token), capabilities)
    }

    fn from_digest(name: &str, digest: [u8; 32], capabilities: &[&str]) -> Result<Self, AuthError> {
        if name.is_empty() || name.len() > 128 {
            return Err(AuthError::Config(
                "a principal name must be 1..=128 bytes".into(),
            ));
        }
        // The name is written into every audit row of the principal and
        // shown by the API, the web client and `ctl` (AUTH-5, AUD-3).
        if name.chars().any(unsafe_in_name) {
            return Err(AuthError::Config(
                "a principal name may not hold control, invisible, bidirectional or markup \
                 characters"
                    .into(),
            ));
        }
        Ok(Self {
            name: name.to_string(),
            digest,
            capabilities: capabilities
                .iter()
                .filter_map(|c| Capability::parse(c))
                .collect(),
        })
    }

    /// Whether the principal holds `capability`.
    pub fn can(&self, capability: Capability) -> bool {
        self.capabilities.contains(&capability)
    }
}

/// How the admin boundary authenticates.
#[derive(Debug, Clone)]
pub enum AuthConfig {
    /// Bearer tokens of the listed principals (the default).
    Tokens(Vec<Principal>),
    /// AUTH-2: the network boundary stands in for authentication. Every
    /// request holds every capability and audit names no individual actor.
    TrustedNetwork,
}

/// Errors of authorization and of its configuration.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The auth configuration (a tokens file, the operator token) cannot be
    /// used; the message names the problem (AUTH-5).
    #[error("invalid admin auth configuration: {0}")]
    Config(String),
}

/// The name of the principal `--operator-token` authenticates; no tokens
/// file principal may take it, or the audit could not tell them apart.
pub const OPERATOR: &str = "operator";

/// Characters a principal name may not hold: controls, invisible and
/// bidirectional formatting characters, and HTML/shell markup.
fn unsafe_in_name(c: char) -> bool {
    c.is_control()
        || matches!(c, '<' | '>' | '&' | '"' | '\'' | '`')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{061c}')
}

/// Read the operator token from a file (`--operator-token-file`): its
/// first line, without surrounding whitespace. The error names the kind
/// of failure only, never the path's content.
pub fn read_token_file(path: &Path) -> Result<String, AuthError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        AuthError::Config(format!("cannot read the operator token file: {}", e.kind()))
    })?;
    let token = text.lines().next().unwrap_or_default().trim();
    if token.is_empty() {
        return Err(AuthError::Config(
            "the operator token file's first line is empty".into(),
        ));
    }
    Ok(token.to_string())
}

/// The line on which each top-level element of a JSON array starts, in
/// order, so a problem with an entry can name its line. A small scan of
/// brackets outside strings: the text already parsed as JSON.
fn element_lines(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let (mut line, mut depth) = (1usize, 0usize);
    let (mut in_string, mut escaped, mut expecting) = (false, false, false);
    for c in text.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if depth == 1 && expecting && !c.is_whitespace() && c != ']' {
            lines.push(line);
            expecting = false;
        }
        match c {
            '"' => in_string = true,
            '[' | '{' => {
                depth += 1;
                if depth == 1 {
                    expecting = true;
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => expecting = true,
            _ => {}
        }
    }
    lines
}

/// One entry of the tokens file (`--admin-tokens-file`), a JSON array:
/// `[{"name": "alice", "sha256": "<64 hex>", "capabilities": ["backfill:read"]}]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: String,
    #[serde(default)]
    capabilities: Vec<String>,
}

impl AuthConfig {
    /// Parse the contents of a tokens file.
    pub fn parse_tokens_file(text: &str) -> Result<Vec<Principal>, AuthError> {
        // The serde error can quote file content (a token digest); keep only
        // its position.
        let entries: Vec<TokenEntry> = serde_json::from_str(text).map_err(|e| {
            AuthError::Config(format!(
                "tokens file is not a JSON array of {{name, sha256, capabilities}} (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        // AUTH-5: every entry is checked, and a problem names the line its
        // entry starts on (not its content: a digest stays out of logs).
        let lines = element_lines(text);
        let mut principals: Vec<(usize, Principal)> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let line = lines.get(i).copied().unwrap_or(0);
            let at =
                |problem: String| AuthError::Config(format!("tokens file line {line}: {problem}"));
            let bytes = hex::decode(entry.sha256.trim()).ok();
            let digest: [u8; 32] = bytes
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| at("sha256 must be 64 hex digits".into()))?;
            if entry.name.eq_ignore_ascii_case(OPERATOR) {
                return Err(at(format!(
                    "the name {OPERATOR:?} is the --operator-token principal's; choose another"
                )));
            }
            if let Some(unknown) = entry
                .capabilities
                .iter()
                .find(|c| c.starts_with("backfill:") && Capability::parse(c).is_none())
            {
                return Err(at(format!(
                    "unknown capability {:?}",
                    crate::repair::bounded(unknown.escape_debug().to_string())
                )));
            }
            let caps: Vec<&str> = entry.capabilities.iter().map(String::as_str).collect();
            let principal = Principal::from_digest(&entry.name, digest, &caps)
                .map_err(|AuthError::Config(problem)| at(problem))?;
            for (first, other) in &principals {
                if other.name == principal.name {
                    return Err(at(format!(
                        "the name is already that of the principal on line {first}"
                    )));
                }
                if other.digest == principal.digest {
                    return Err(at(format!(
                        "the sha256 is already that of the principal on line {first}: one \
                         token would authenticate both"
                    )));
                }
            }
            principals.push((line, principal));
        }
        Ok(principals.into_iter().map(|(_, p)| p).collect())
    }

    /// Build the configuration from the command-line sources. `trusted`
    /// selects AUTH-2 mode and excludes tokens.
    pub fn from_sources(
        operator_token: Option<&str>,
        tokens_file: Option<&Path>,
        trusted: bool,
    ) -> Result<Self, AuthError> {
        if trusted {
            if operator_token.is_some() || tokens_file.is_some() {
                return Err(AuthError::Config(
                    "trusted-network mode takes no tokens".into(),
                ));
            }
            return Ok(AuthConfig::TrustedNetwork);
        }
        let mut principals = Vec::new();
        if let Some(token) = operator_token {
            if token.len() < 16 {
                return Err(AuthError::Config(
                    "the operator token must be at least 16 characters".into(),
                ));
            }
            principals.push(Principal::from_token(
                OPERATOR,
                token,
                &["backfill:read", "backfill:operate", "backfill:inspect"],
            )?);
        }
        if let Some(path) = tokens_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                AuthError::Config(format!("cannot read the tokens file: {}", e.kind()))
            })?;
            principals.extend(Self::parse_tokens_file(&text)?);
        }
        Ok(AuthConfig::Tokens(principals))
    }
}

/// Who is asking, as established from the request.
#[derive(Debug, Clone)]
pub struct Authority {
    /// The individual principal, when one was authenticated.
    pub actor: Option<String>,
    /// The authority source recorded in audit: `token`, `trusted-network`
    /// or `none`.
    pub source: &'static str,
    capabilities: BTreeSet<Capability>,
}

impl Authority {
    /// An unauthenticated caller.
    pub fn anonymous() -> Self {
        Self {
            actor: None,
            source: "none",
            capabilities: BTreeSet::new(),
        }
    }

    /// Whether the caller holds `capability`.
    pub fn can(&self, capability: Capability) -> bool {
        self.capabilities.contains(&capability)
    }

    /// The capabilities the caller holds, by name, in a stable order.
    pub fn capability_names(&self) -> Vec<String> {
        self.capabilities
            .iter()
            .map(|c| c.as_str().to_string())
            .collect()
    }

    /// The scope of the caller's idempotency keys: the principal's name,
    /// or '' when the authority names no individual. Principal names are
    /// never empty, so no principal shares another's keys.
    pub fn principal(&self) -> &str {
        self.actor.as_deref().unwrap_or("")
    }
}

/// SHA-256 of a token.
pub fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl AuthConfig {
    /// Establish the authority of a request from its bearer token. `None`
    /// means the request is unauthenticated (401).
    pub fn authenticate(&self, bearer: Option<&str>) -> Option<Authority> {
        match self {
            AuthConfig::TrustedNetwork => Some(Authority {
                actor: None,
                source: "trusted-network",
                capabilities: [Capability::Read, Capability::Operate, Capability::Inspect].into(),
            }),
            AuthConfig::Tokens(principals) => {
                let presented = sha256(bearer.filter(|t| !t.is_empty())?);
                // Compare against every principal, without early exit.
                let mut found: Option<&Principal> = None;
                for principal in principals {
                    let equal: bool = principal.digest.ct_eq(&presented).into();
                    if equal && found.is_none() {
                        found = Some(principal);
                    }
                }
                found.map(|p| Authority {
                    actor: Some(p.name.clone()),
                    source: "token",
                    capabilities: p.capabilities.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth01_roles_grant_nothing_and_tokens_match_by_digest() {
        let file = format!(
            r#"[{{"name":"mod","sha256":"{}","capabilities":["community:owner","channel:admin","member"]}},
                {{"name":"ro","sha256":"{}","capabilities":["backfill:read"]}}]"#,
            hex::encode(sha256("mod-token")),
            hex::encode(sha256("ro-token"))
        );
        let config = AuthConfig::Tokens(AuthConfig::parse_tokens_file(&file).expect("parse"));
        let m = config.authenticate(Some("mod-token")).expect("known");
        assert!(!m.can(Capability::Read) && !m.can(Capability::Operate));
        let r = config.authenticate(Some("ro-token")).expect("known");
        assert!(r.can(Capability::Read) && !r.can(Capability::Operate));
        assert!(config.authenticate(Some("other")).is_none());
        assert!(config.authenticate(None).is_none());
        assert!(config.authenticate(Some("")).is_none());
    }

    #[test]
    fn auth05_bad_tokens_file_is_rejected_without_echoing_it() {
        let err = AuthConfig::parse_tokens_file(r#"[{"name":"x","sha256":"secretish"}]"#)
            .expect_err("bad digest");
        assert!(!err.to_string().contains("secretish"));
    }

    /// AUTH-1: a principal's name, recorded in audit, is 1 to 128 bytes.
    #[test]
    fn auth01_principal_names_are_one_to_128_bytes() {
        let caps = ["backfill:read"];
        assert!(Principal::from_token("", "token", &caps).is_err());
        assert!(Principal::from_token("a", "token", &caps).is_ok());
        assert!(Principal::from_token(&"n".repeat(128), "token", &caps).is_ok());
        let err = Principal::from_token(&"n".repeat(129), "token", &caps).expect_err("129 bytes");
        assert!(err.to_string().contains("1..=128 bytes"), "{err}");
    }

    /// AUTH-1: `--operator-token` needs at least 16 characters and grants
    /// every capability (read, operate, inspect) to the principal `operator`.
    #[test]
    fn auth01_operator_token_has_sixteen_characters_and_both_capabilities() {
        let err = AuthConfig::from_sources(Some(&"t".repeat(15)), None, false)
            .expect_err("15 characters");
        assert!(err.to_string().contains("at least 16"), "{err}");
        // An embedder's service has no such flag: the error names the token.
        assert!(!err.to_string().contains("--"), "{err}");
        let token = "t".repeat(16);
        let config = AuthConfig::from_sources(Some(&token), None, false).expect("16 characters");
        let authority = config.authenticate(Some(&token)).expect("known token");
        assert_eq!(authority.actor.as_deref(), Some("operator"));
        assert_eq!(authority.source, "token");
        assert!(authority.can(Capability::Read) && authority.can(Capability::Operate));
        assert!(
            authority.can(Capability::Inspect),
            "the operator token holds every capability"
        );
        let AuthConfig::Tokens(principals) =
            AuthConfig::from_sources(None, None, false).expect("no sources")
        else {
            panic!("tokens mode without tokens");
        };
        assert!(principals.is_empty(), "nobody is authorized by default");
    }

    /// AUTH-2: trusted-network mode takes no tokens; every request holds
    /// every capability and is recorded with no individual actor.
    #[test]
    fn auth02_trusted_network_takes_no_tokens_and_grants_both_capabilities() {
        let token = "t".repeat(16);
        assert!(AuthConfig::from_sources(Some(&token), None, true).is_err());
        let path = Path::new("/nonexistent/tokens.json");
        let err = AuthConfig::from_sources(None, Some(path), true).expect_err("file and trust");
        assert!(err.to_string().contains("takes no tokens"), "{err}");
        let config = AuthConfig::from_sources(None, None, true).expect("trusted");
        assert!(matches!(config, AuthConfig::TrustedNetwork));
        let authority = config.authenticate(None).expect("trusted");
        assert_eq!(authority.actor, None);
        assert_eq!(authority.source, "trusted-network");
        assert!(authority.can(Capability::Read) && authority.can(Capability::Operate));
    }

    /// AUTH-1: a tokens file is read from its path; one that cannot be read
    /// is a configuration error that names the kind of failure only.
    #[test]
    fn auth01_tokens_file_is_read_and_an_unreadable_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("backfill-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tokens.json");
        let file = format!(
            r#"[{{"name":"ro","sha256":" {} ","capabilities":["backfill:read"]}}]"#,
            hex::encode(sha256("ro-token"))
        );
        std::fs::write(&path, file).expect("write tokens file");
        let token = "t".repeat(16);
        let config = AuthConfig::from_sources(Some(&token), Some(&path), false).expect("both");
        let ro = config
            .authenticate(Some("ro-token"))
            .expect("from the file");
        assert_eq!(ro.actor.as_deref(), Some("ro"));
        assert!(ro.can(Capability::Read) && !ro.can(Capability::Operate));
        assert!(
            config.authenticate(Some(&token)).is_some(),
            "and the flag's"
        );
        std::fs::remove_dir_all(&dir).expect("remove temp dir");
        let err = AuthConfig::from_sources(None, Some(&path), false).expect_err("gone");
        assert!(
            err.to_string().contains("cannot read the tokens file"),
            "{err}"
        );
        assert!(!err.to_string().contains("backfill-auth"), "no path: {err}");
    }

    /// AUTH-1: when two principals share a token the first listed is the
    /// one recorded, whichever order the comparison loop finishes in.
    #[test]
    fn auth01_first_principal_with_a_token_is_the_one_recorded() {
        let caps = ["backfill:read"];
        let config = AuthConfig::Tokens(vec![
            Principal::from_token("first", "shared-token", &caps).expect("first"),
            Principal::from_token("second", "shared-token", &["backfill:operate"]).expect("second"),
        ]);
        let authority = config.authenticate(Some("shared-token")).expect("known");
        assert_eq!(authority.actor.as_deref(), Some("first"));
        assert!(authority.can(Capability::Read) && !authority.can(Capability::Operate));
    }

    /// AUTH-1: capability names are exactly those of the tokens file; a
    /// principal's debug output names it and its capabilities, never its
    /// digest; an anonymous caller holds nothing.
    #[test]
    fn auth01_capability_names_debug_output_and_anonymous_callers() {
        for capability in [Capability::Read, Capability::Operate, Capability::Inspect] {
            assert_eq!(Capability::parse(capability.as_str()), Some(capability));
        }
        assert_eq!(Capability::Read.as_str(), "backfill:read");
        assert_eq!(Capability::Operate.as_str(), "backfill:operate");
        assert_eq!(Capability::Inspect.as_str(), "backfill:inspect");
        let principal = Principal::from_token("alice", "alice-token", &["backfill:operate"])
            .expect("principal");
        let debug = format!("{principal:?}");
        assert!(
            debug.contains("alice") && debug.contains("Operate"),
            "{debug}"
        );
        assert!(
            !debug.contains(&hex::encode(sha256("alice-token"))),
            "{debug}"
        );
        assert!(!debug.contains("digest"), "{debug}");
        let anonymous = Authority::anonymous();
        assert_eq!(
            (anonymous.actor.as_deref(), anonymous.source),
            (None, "none")
        );
        assert!(!anonymous.can(Capability::Read) && !anonymous.can(Capability::Operate));
    }

    /// AUTH-1: a parsed principal holds exactly the capabilities its entry
    /// names, for an embedder that inspects a tokens file before serving.
    #[test]
    fn auth01_a_principal_holds_exactly_its_named_capabilities() {
        let reader = Principal::from_token("r", "reader-token", &["backfill:read", "member"])
            .expect("principal");
        assert!(reader.can(Capability::Read));
        assert!(!reader.can(Capability::Operate));
        assert!(!reader.can(Capability::Inspect));
        let inspector =
            Principal::from_token("i", "inspect-token", &["backfill:inspect"]).expect("principal");
        assert!(inspector.can(Capability::Inspect) && !inspector.can(Capability::Read));
        let none = Principal::from_token("n", "none-token", &[]).expect("principal");
        assert!(!none.can(Capability::Read) && !none.can(Capability::Operate));
    }
}

#[cfg(test)]
mod tokens_file_checks {
    use super::*;

    fn entry(name: &str, token: &str, caps: &str) -> String {
        format!(
            r#"  {{"name": "{name}", "sha256": "{}", "capabilities": [{caps}]}}"#,
            hex::encode(sha256(token))
        )
    }

    fn file(entries: &[String]) -> String {
        format!("[\n{}\n]", entries.join(",\n"))
    }

    fn refused(text: &str) -> String {
        AuthConfig::parse_tokens_file(text)
            .expect_err("refused")
            .to_string()
    }

    /// AUTH-5: each malformed entry is refused naming the line it starts
    /// on: a duplicate name, a duplicate digest, an unknown `backfill:*`
    /// capability, a name with control, bidirectional or markup
    /// characters, and the built-in principal's name; other roles are
    /// still kept as strings that grant nothing.
    #[test]
    fn auth05_each_malformed_tokens_file_is_refused_naming_its_line() {
        let ok = entry(
            "ops",
            "ops-token",
            r#""backfill:operate", "community:owner""#,
        );
        assert!(AuthConfig::parse_tokens_file(&file(std::slice::from_ref(&ok))).is_ok());
        let cases = [
            (
                entry("ops", "other-token", ""),
                "already that of the principal on line 2",
            ),
            (
                entry("two", "ops-token", ""),
                "sha256 is already that of the principal on line 2",
            ),
            (
                entry("ro", "ro-token", r#""backfill:raed""#),
                "unknown capability \"backfill:raed\"",
            ),
            (entry("a\\u001b[31m", "ro-token", ""), "control"),
            (entry("a\\u202eb", "ro-token", ""), "bidirectional"),
            (entry("<b>x</b>", "ro-token", ""), "markup"),
            (
                entry("operator", "ro-token", ""),
                "--operator-token principal",
            ),
            (
                entry("Operator", "ro-token", ""),
                "--operator-token principal",
            ),
        ];
        for (bad, problem) in cases {
            let text = file(&[ok.clone(), bad]);
            let err = refused(&text);
            assert!(err.contains("tokens file line 3:"), "{err}");
            assert!(err.contains(problem), "{problem}: {err}");
            assert!(!err.contains(&hex::encode(sha256("ro-token"))), "{err}");
        }
    }

    /// AUTH-5: an entry's line is the line it starts on, whether entries
    /// share a line or spread over several, and whatever strings with
    /// brackets they hold.
    #[test]
    fn auth05_lines_are_where_entries_start() {
        let text = "[{\"a\": \"[{,\\\"\"},\n\n  {\"b\": [1, {\"c\": 2}]}, {\"d\": 3}\n]";
        assert_eq!(element_lines(text), [1, 3, 3]);
        assert_eq!(element_lines("[]"), Vec::<usize>::new());
    }

    /// AUTH-5: the operator token file's first line is the token; an
    /// empty or unreadable file is refused without its content or path.
    #[test]
    fn auth05_operator_token_file_is_read_from_its_first_line() {
        let dir = std::env::temp_dir().join(format!("backfill-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("token");
        std::fs::write(&path, "  secret-token-0123456789  \nrest\n").expect("write");
        assert_eq!(
            read_token_file(&path).expect("read"),
            "secret-token-0123456789"
        );
        std::fs::write(&path, "\n").expect("write");
        let err = read_token_file(&path).expect_err("empty").to_string();
        assert!(err.contains("empty"), "{err}");
        std::fs::remove_dir_all(&dir).expect("remove");
        let err = read_token_file(&path).expect_err("gone").to_string();
        assert!(err.contains("cannot read the operator token file"), "{err}");
        assert!(!err.contains("backfill-token"), "{err}");
    }
}
