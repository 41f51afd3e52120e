//! The bearer token a client sends ([`Token`]): fixed
//! ([`crate::ClientBuilder::token`]), or asked of a [`TokenProvider`]
//! ([`crate::ClientBuilder::token_provider`]) when the client is built,
//! again once the token is older than its refresh interval, and at once
//! when a server answers `UNAUTHENTICATED` (the call is then sent once more
//! with the new token, if it changed).
//!
//! A call reads the current token from an `ArcSwap` (no lock, no
//! allocation: the header value is shared bytes). A provider that fails
//! keeps the last good token, logs why at warn, and is asked again after
//! the interval; only one caller asks at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tonic::metadata::{Ascii, MetadataValue};

use crate::error::ClientError;

/// Where a client's token comes from when it can change (a file another
/// process renews, a secrets service). Any `Fn() -> Result<String,
/// String>` is one. Called from a call's task: keep it quick (read a file
/// or a cache, not the network).
pub trait TokenProvider: Send + Sync + 'static {
    /// The token to send now, or why there is none.
    fn token(&self) -> Result<String, String>;
}

impl<F> TokenProvider for F
where
    F: Fn() -> Result<String, String> + Send + Sync + 'static,
{
    fn token(&self) -> Result<String, String> {
        self()
    }
}

/// A provider and its refresh interval, as the builder keeps them.
#[derive(Clone)]
pub(crate) struct ProviderConfig {
    pub(crate) provider: Arc<dyn TokenProvider>,
    pub(crate) refresh: Duration,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("refresh", &self.refresh)
            .finish()
    }
}

/// The token as sent, and when it was asked for.
#[derive(Debug)]
struct Current {
    value: Option<MetadataValue<Ascii>>,
    asked: Instant,
}

/// A client's token (module doc).
pub(crate) struct Token {
    provider: Option<Arc<dyn TokenProvider>>,
    refresh: Duration,
    current: ArcSwap<Current>,
    asking: AtomicBool,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        f.debug_struct("Token")
            .field("provided", &self.provider.is_some())
            .field("refresh", &self.refresh)
            .finish()
    }
}

/// The `authorization` value for `token`.
pub(crate) fn header(token: &str) -> Result<MetadataValue<Ascii>, ClientError> {
    MetadataValue::<Ascii>::try_from(format!("Bearer {token}")).map_err(|_| ClientError::BadToken)
}

impl Token {
    /// A token that never changes (`None`: none is sent).
    pub(crate) fn fixed(token: Option<&str>) -> Result<Token, ClientError> {
        Ok(Token {
            provider: None,
            refresh: Duration::MAX,
            current: ArcSwap::from_pointee(Current {
                value: token.map(header).transpose()?,
                asked: Instant::now(),
            }),
            asking: AtomicBool::new(false),
        })
    }

    /// A token asked of `provider` now, and again every `refresh`.
    pub(crate) fn provided(
        provider: Arc<dyn TokenProvider>,
        refresh: Duration,
    ) -> Result<Token, ClientError> {
        let first = provider
            .token()
            .map_err(|why| ClientError::TokenProvider { why })?;
        Ok(Token {
            current: ArcSwap::from_pointee(Current {
                value: Some(header(&first)?),
                asked: Instant::now(),
            }),
            provider: Some(provider),
            refresh,
            asking: AtomicBool::new(false),
        })
    }

    /// The value to send now, asked again first if it is old.
    pub(crate) fn value(&self) -> Option<MetadataValue<Ascii>> {
        let current = self.current.load();
        if self.provider.is_some() && current.asked.elapsed() >= self.refresh {
            drop(current);
            self.ask();
            return self.current.load().value.clone();
        }
        current.value.clone()
    }

    /// Asks the provider again (a server refused the token); true if the
    /// token changed.
    pub(crate) fn refresh_now(&self) -> bool {
        if self.provider.is_none() {
            return false;
        }
        let before = self.current.load().value.clone();
        self.ask();
        self.current.load().value != before
    }

    fn ask(&self) {
        let Some(provider) = &self.provider else {
            return;
        };
        // One caller asks; the others send the token they have.
        if self.asking.swap(true, Relaxed) {
            return;
        }
        let value = match provider.token() {
            Ok(token) => match header(&token) {
                Ok(value) => Some(value),
                Err(_) => {
                    tracing::warn!("the token provider gave a token that is not visible ASCII");
                    None
                }
            },
            Err(why) => {
                tracing::warn!(%why, "the token provider failed; the last token is kept");
                None
            }
        };
        let value = value.or_else(|| self.current.load().value.clone());
        self.current.store(Arc::new(Current {
            value,
            asked: Instant::now(),
        }));
        self.asking.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn provider(tokens: Arc<Mutex<Vec<Result<String, String>>>>) -> Arc<dyn TokenProvider> {
        Arc::new(move || tokens.lock().unwrap().remove(0))
    }

    #[test]
    fn a_provided_token_is_asked_again_when_old_and_kept_when_the_provider_fails() {
        let answers = Arc::new(Mutex::new(vec![
            Ok("one".to_string()),
            Err("the vault is down".to_string()),
            Ok("two".to_string()),
        ]));
        let t = Token::provided(provider(answers.clone()), Duration::ZERO).unwrap();
        // Old at once (refresh 0): asked again, fails, keeps "one".
        assert_eq!(t.value().unwrap(), "Bearer one");
        // Asked again: "two".
        assert_eq!(t.value().unwrap(), "Bearer two");
        assert!(answers.lock().unwrap().is_empty());
    }

    #[test]
    fn a_refusal_asks_at_once_and_says_whether_the_token_changed() {
        let answers = Arc::new(Mutex::new(vec![
            Ok("one".to_string()),
            Ok("one".to_string()),
            Ok("two".to_string()),
        ]));
        let t = Token::provided(provider(answers), Duration::from_secs(3600)).unwrap();
        assert_eq!(t.value().unwrap(), "Bearer one");
        assert!(!t.refresh_now(), "the same token");
        assert!(t.refresh_now(), "a new token");
        assert_eq!(t.value().unwrap(), "Bearer two");
        assert!(!Token::fixed(Some("x")).unwrap().refresh_now());
    }

    #[test]
    fn a_provider_that_fails_at_first_is_an_error_and_the_token_never_shows() {
        let answers = Arc::new(Mutex::new(vec![Err("no file".to_string())]));
        let e = Token::provided(provider(answers), Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("no file"), "{e}");
        let t = Token::fixed(Some("s3cret")).unwrap();
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
