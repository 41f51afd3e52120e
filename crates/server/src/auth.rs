//! Bearer tokens with three roles, checked for every call by a tower layer.
//!
//! A client sends `authorization: Bearer <token>` in the call's metadata.
//! Tokens come from a file (`--tokens-file`), one per line:
//!
//! ```text
//! # role   token
//! read     4f0d5c0e3a9b7a1de2c0a7b1a36f5d1c
//! write    b8e1c2d3f4a5968778695a4b3c2d1e0f
//! admin    0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f
//! ```
//!
//! - `read` may call the reads of `uuidmap.v1.UuidMap`: Get, BatchGet, Scan,
//!   WaitFor, Watch, Stats, Ping.
//! - `write` may call the reads, the writes (Put, Delete, CompareAndSet,
//!   Write) and the admin service (`uuidmap.v1.UuidMapAdmin`: Snapshot).
//! - `admin` may call everything: also the group's membership (every method
//!   of `uuidmap.v1.UuidMapCluster` but `Status`, which `read` may call).
//!
//! **Client certificates grant no role of their own.** With a tokens file,
//! every call needs its token, certificate or not. Without one, a server
//! that requires client certificates (`--tls-client-ca`) gives a caller
//! the handshake verified the `write` role, never `admin`: a membership
//! change needs an admin token (`--tokens-file`), so a replica group
//! member's certificate (or any certificate of that CA) cannot add or
//! remove members. A server with neither (loopback, or `--insecure`)
//! checks nothing, as before.
//! - Health (`grpc.health.v1.Health`) and reflection
//!   (`grpc.reflection.*.ServerReflection`) need no token: load balancers and
//!   grpcurl must reach them, and they reveal no entries.
//! - Any other method, including one added to the data service later and
//!   not listed above, needs `write` (deny by default).
//!
//! File rules: blank lines and lines starting with `#` are ignored; a token
//! is 16 to 4096 visible ASCII characters (no spaces); a token appears once;
//! at least one token. Errors name the file and the line, never the token.
//!
//! Answers: no token, a header that is not `Bearer <token>`, or a token the
//! server does not know → UNAUTHENTICATED; a known token whose role is too
//! low → PERMISSION_DENIED. Statuses are built in `grpc_status.rs`.
//!
//! Invariants: the token set is immutable after start (shared through an
//! `Arc`, no lock); the check hashes the presented token once (SHA-256) and
//! compares the digest with every configured digest in constant time, so
//! its timing tells nothing about how much of a token was right, nor about
//! the length of a configured token; no allocation unless the call is
//! refused.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use subtle::{ConditionallySelectable, ConstantTimeEq};

pub use super::errors::AuthError;
use super::methods::{self, Role};

/// The role a call to `path` (`/package.Service/Method`) needs; `None` when
/// it needs no token (the method table's `role`, `methods`).
pub fn required_role(path: &str) -> Option<Role> {
    methods::method(path).1.role
}

/// Shortest and longest token accepted in the file.
const MIN_TOKEN_LEN: usize = 16;
const MAX_TOKEN_LEN: usize = 4096;

/// The configured tokens: SHA-256 digests and roles. Immutable.
pub struct Tokens {
    /// One per configured token; digests are distinct.
    entries: Vec<([u8; 32], Role)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the digests: they identify the tokens.
        write!(f, "Tokens({} configured)", self.entries.len())
    }
}

/// A tokens file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokensError {
    /// The file could not be read.
    #[error("cannot read the tokens file {path}: {source}")]
    Read {
        /// The tokens file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not `<role> <token>`.
    #[error("the tokens file {path}, line {line}: {why}")]
    Line {
        /// The tokens file.
        path: PathBuf,
        /// The line, counted from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The file holds no token.
    #[error(
        "the tokens file {path} holds no tokens, so every call would be refused; \
         add lines like `read <token>` or `write <token>`"
    )]
    Empty {
        /// The tokens file.
        path: PathBuf,
    },
}

fn digest(token: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token);
    d.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

impl Tokens {
    /// Reads and checks a tokens file (format in the module docs). Warns
    /// when other users may read it.
    pub fn load(path: &Path) -> Result<Tokens, TokensError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokensError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        warn_if_readable_by_others(path);
        Tokens::parse(&text, path)
    }

    /// Parses the text of a tokens file; `path` is for messages.
    pub fn parse(text: &str, path: &Path) -> Result<Tokens, TokensError> {
        let mut entries: Vec<([u8; 32], Role)> = Vec::new();
        let bad = |line: usize, why: String| TokensError::Line {
            path: path.to_path_buf(),
            line,
            why,
        };
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let mut fields = trimmed.split_whitespace();
            let (Some(role), Some(token), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad(
                    line,
                    "expected two fields, `<role> <token>` (role read, write or admin)".into(),
                ));
            };
            let role = match role {
                "read" => Role::Read,
                "write" => Role::Write,
                "admin" => Role::Admin,
                other => {
                    return Err(bad(
                        line,
                        format!("the role is {other:?}; it must be read, write or admin"),
                    ));
                }
            };
            if !(MIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&token.len()) {
                return Err(bad(
                    line,
                    format!(
                        "the token is {} characters long; use {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} \
                         (for example 32 random hex digits: `openssl rand -hex 16`)",
                        token.len()
                    ),
                ));
            }
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(bad(
                    line,
                    "the token must be visible ASCII characters only".into(),
                ));
            }
            let d = digest(token.as_bytes());
            if entries.iter().any(|(e, _)| *e == d) {
                return Err(bad(
                    line,
                    "this token already appears on an earlier line; each token has one role".into(),
                ));
            }
            entries.push((d, role));
        }
        if entries.is_empty() {
            return Err(TokensError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Tokens { entries })
    }

    /// Configured tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false: a token set holds at least one token.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The role of `presented`, if it is a configured token. Constant time
    /// in the token's content: every digest is compared, with no early exit.
    pub fn role_of(&self, presented: &[u8]) -> Option<Role> {
        let d = digest(presented);
        let mut found = 0u8;
        for (e, role) in &self.entries {
            found.conditional_assign(&(*role as u8), e.ct_eq(&d));
        }
        match found {
            1 => Some(Role::Read),
            2 => Some(Role::Write),
            3 => Some(Role::Admin),
            _ => None,
        }
    }

    /// Decides a call to `path` with these request headers.
    pub fn check(&self, path: &str, headers: &http::HeaderMap) -> Result<(), AuthError> {
        self.check_as(required_role(path), path, headers)
    }

    /// Decides a call to `path`, which needs `needed`, with these headers.
    fn check_as(
        &self,
        needed: Option<Role>,
        path: &str,
        headers: &http::HeaderMap,
    ) -> Result<(), AuthError> {
        let Some(needed) = needed else {
            return Ok(());
        };
        let value = headers
            .get(http::header::AUTHORIZATION)
            .ok_or(AuthError::Missing)?;
        let token = bearer_token(value.as_bytes()).ok_or(AuthError::NotBearer)?;
        let role = self.role_of(token).ok_or(AuthError::UnknownToken)?;
        if role >= needed {
            Ok(())
        } else {
            Err(AuthError::WrongRole {
                method: path.trim_start_matches('/').to_string(),
                needed,
                has: role,
            })
        }
    }
}

/// The token of `Bearer <token>` (the scheme is case-insensitive).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o004 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "the tokens file is readable by every user of this machine; `chmod 600` it"
        );
    }
}

/// Decides a call to `path` from a caller whose client certificate the
/// handshake verified, on a server without tokens: up to `write`
/// (module docs).
pub fn check_certificate_only(path: &str) -> Result<(), AuthError> {
    certificate_only_as(required_role(path), path)
}

/// [`check_certificate_only`] for a call that needs `needed`.
fn certificate_only_as(needed: Option<Role>, path: &str) -> Result<(), AuthError> {
    match needed {
        Some(needed) if needed > Role::Write => Err(AuthError::CertificateOnly {
            method: path.trim_start_matches('/').to_string(),
            needed,
        }),
        _ => Ok(()),
    }
}

/// The layer: checks every call against `tokens`, or lets everything
/// through when there are none (auth off), but for the roles above
/// `write` when callers are verified by their certificates alone.
#[derive(Clone, Debug, Default)]
pub struct AuthLayer {
    tokens: Option<Arc<Tokens>>,
    /// Without tokens: callers are verified by client certificates, which
    /// grant `write` at most.
    certificate_clients: bool,
}

impl AuthLayer {
    /// Auth on with `tokens`, or off with `None`.
    pub fn new(tokens: Option<Arc<Tokens>>) -> Self {
        AuthLayer {
            tokens,
            certificate_clients: false,
        }
    }

    /// Whether the server requires client certificates (mTLS): without
    /// tokens, they grant `write` at most.
    pub fn with_certificate_clients(mut self, on: bool) -> Self {
        self.certificate_clients = on;
        self
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = Auth<S>;
    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            tokens: self.tokens.clone(),
            certificate_clients: self.certificate_clients,
        }
    }
}

/// The service [`AuthLayer`] wraps around the routes.
#[derive(Clone, Debug)]
pub struct Auth<S> {
    inner: S,
    tokens: Option<Arc<Tokens>>,
    certificate_clients: bool,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for Auth<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = AuthFuture<S::Future, RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let needed = methods::of_request(&request).role;
        let verdict = match &self.tokens {
            None if self.certificate_clients => certificate_only_as(needed, request.uri().path()),
            None => Ok(()),
            Some(tokens) => tokens.check_as(needed, request.uri().path(), request.headers()),
        };
        match verdict {
            Ok(()) => AuthFuture::Allowed {
                inner: self.inner.call(request),
            },
            Err(e) => AuthFuture::Refused {
                response: Some(tonic::Status::from(&e).into_http()),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner call's future, or the refusal (ready at once).
    #[project = AuthFutureProj]
    // pin-project-lite takes no doc comments on enum fields; the
    // variants' docs say what each field is.
    #[allow(missing_docs)]
    pub enum AuthFuture<F, RB> {
        /// The token allows the call: the inner service's future.
        Allowed {
            #[pin]
            inner: F,
        },
        /// The call is refused: the answer, taken when polled.
        Refused {
            response: Option<http::Response<RB>>,
        },
    }
}

impl<F, RB, E> std::future::Future for AuthFuture<F, RB>
where
    F: std::future::Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            AuthFutureProj::Allowed { inner } => inner.poll(cx),
            AuthFutureProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("an AuthFuture is not polled after it completed"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: &str = "read-token-0123456789";
    const WRITE: &str = "write-token-0123456789";

    fn tokens() -> Tokens {
        Tokens::parse(
            &format!("# comment\n\nread {READ}\n  write\t{WRITE}  \n"),
            Path::new("t"),
        )
        .unwrap()
    }

    fn headers(value: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn methods_are_classified_reads_writes_admin_and_open_services() {
        for m in [
            "Get", "BatchGet", "Scan", "WaitFor", "Watch", "Stats", "Ping",
        ] {
            assert_eq!(
                required_role(&format!("/uuidmap.v1.UuidMap/{m}")),
                Some(Role::Read)
            );
        }
        for m in ["Put", "Delete", "CompareAndSet", "Write", "SomethingNew"] {
            assert_eq!(
                required_role(&format!("/uuidmap.v1.UuidMap/{m}")),
                Some(Role::Write)
            );
        }
        assert_eq!(
            required_role("/uuidmap.v1.UuidMapAdmin/Snapshot"),
            Some(Role::Write)
        );
        assert_eq!(required_role("/grpc.health.v1.Health/Check"), None);
        assert_eq!(
            required_role("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            None
        );
        // A prefix that only looks like an open service is not one.
        assert_eq!(
            required_role("/grpc.health.v1.HealthX/Check"),
            Some(Role::Write)
        );
    }

    #[test]
    fn the_right_role_passes_and_the_wrong_one_is_named() {
        let t = tokens();
        let get = "/uuidmap.v1.UuidMap/Get";
        let put = "/uuidmap.v1.UuidMap/Put";
        assert_eq!(t.check(get, &headers(&format!("Bearer {READ}"))), Ok(()));
        assert_eq!(t.check(get, &headers(&format!("bearer {WRITE}"))), Ok(()));
        assert_eq!(t.check(put, &headers(&format!("Bearer {WRITE}"))), Ok(()));
        let e = t
            .check(put, &headers(&format!("Bearer {READ}")))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "uuidmap.v1.UuidMap/Put needs a token with the write role; this token has the read role"
        );
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_are_told_apart_without_echoing_them() {
        let t = tokens();
        let get = "/uuidmap.v1.UuidMap/Get";
        assert_eq!(
            t.check(get, &http::HeaderMap::new()),
            Err(AuthError::Missing)
        );
        assert_eq!(
            t.check(get, &headers(&format!("Basic {READ}"))),
            Err(AuthError::NotBearer)
        );
        assert_eq!(t.check(get, &headers("Bearer ")), Err(AuthError::NotBearer));
        let wrong = format!("Bearer {READ}x");
        let e = t.check(get, &headers(&wrong)).unwrap_err();
        assert_eq!(e, AuthError::UnknownToken);
        assert!(!e.to_string().contains(READ));
        // Open services pass without anything.
        assert_eq!(
            t.check("/grpc.health.v1.Health/Check", &http::HeaderMap::new()),
            Ok(())
        );
    }

    #[test]
    fn bad_tokens_files_name_the_line_and_never_the_token() {
        let p = Path::new("/etc/uuidmap/tokens");
        let cases = [
            ("read\n", "line 1", "two fields"),
            ("root 0123456789abcdef\n", "line 1", "read, write or admin"),
            ("# c\nread short\n", "line 2", "5 characters"),
            ("read 0123456789abcdef extra\n", "line 1", "two fields"),
            (
                "read 0123456789abcdef\nwrite 0123456789abcdef\n",
                "line 2",
                "earlier line",
            ),
            ("# nothing\n\n", "/etc/uuidmap/tokens", "no tokens"),
        ];
        for (text, place, why) in cases {
            let e = Tokens::parse(text, p).unwrap_err().to_string();
            assert!(e.contains(place) && e.contains(why), "{text:?}: {e}");
            assert!(e.contains("/etc/uuidmap/tokens"), "{e}");
            assert!(!e.contains("0123456789abcdef"), "{e}");
        }
        assert_eq!(format!("{:?}", tokens()), "Tokens(2 configured)");
    }
}
