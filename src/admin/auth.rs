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

    fn parse(name: &str) -> Option<Self> {
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
    #[error("invalid admin auth configuration: {0}")]
    Config(String),
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
        let mut principals = Vec::with_capacity(entries.len());
        for entry in entries {
            let bytes = hex::decode(entry.sha256.trim()).ok();
            let digest: [u8; 32] = bytes.and_then(|b| b.try_into().ok()).ok_or_else(|| {
                AuthError::Config(format!(
                    "principal {:?}: sha256 must be 64 hex digits",
                    crate::repair::bounded(entry.name.as_str())
                ))
            })?;
            let caps: Vec<&str> = entry.capabilities.iter().map(String::as_str).collect();
            principals.push(Principal::from_digest(&entry.name, digest, &caps)?);
        }
        Ok(principals)
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
                    "--operator-token must be at least 16 characters".into(),
                ));
            }
            principals.push(Principal::from_token(
                "operator",
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
    fn roles_grant_nothing_and_tokens_match_by_digest() {
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
    fn bad_tokens_file_is_rejected_without_echoing_it() {
        let err = AuthConfig::parse_tokens_file(r#"[{"name":"x","sha256":"secretish"}]"#)
            .expect_err("bad digest");
        assert!(!err.to_string().contains("secretish"));
    }

    /// AUTH-1: a principal's name, recorded in audit, is 1 to 128 bytes.
    #[test]
    fn auth1_principal_names_are_one_to_128_bytes() {
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
    fn auth1_operator_token_has_sixteen_characters_and_both_capabilities() {
        let err = AuthConfig::from_sources(Some(&"t".repeat(15)), None, false)
            .expect_err("15 characters");
        assert!(err.to_string().contains("at least 16"), "{err}");
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
    fn auth2_trusted_network_takes_no_tokens_and_grants_both_capabilities() {
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
    fn auth1_tokens_file_is_read_and_an_unreadable_one_is_refused() {
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
    fn auth1_first_principal_with_a_token_is_the_one_recorded() {
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
    fn auth1_capability_names_debug_output_and_anonymous_callers() {
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
    fn auth1_a_principal_holds_exactly_its_named_capabilities() {
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
