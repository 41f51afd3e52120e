//! The bearer token a client sends ([`Token`]): fixed
//! ([`crate::ClientBuilder::token`]), or asked of a [`TokenProvider`]
//! ([`crate::ClientBuilder::token_provider`]) when the client is built,
//! again once the token is older than its refresh interval, and at once
//! when a server answers `UNAUTHENTICATED` (the call is then sent once more
//! with the new token, if it changed).
//!
//! A provider that fails keeps the last good token, logs why at warn, and
//! is asked again after the interval; only one caller asks at a time.
//!
//! # The per-call path ([`Token::value`])
//!
//! Every unary call and every stream opened reads the token, so the common
//! case (the token has not changed) must cost no lock and no allocation:
//! - the `authorization` value is built once per token (per refresh), as
//!   shared bytes made shared at once ([`header`]): a call's copy is a
//!   reference count's increment, never a copy of the token nor an
//!   allocation;
//! - it is read through an `ArcSwap`: a load is a few atomic operations on
//!   a slot of the calling thread, no lock. (`arc-swap` is already a
//!   dependency of this crate and of the engine; std has no atomically
//!   swapped `Arc`, and an `RwLock<Arc<_>>` would take a read lock on one
//!   shared cache line per call, which is the contention to avoid);
//! - when it must be asked again is computed once per token (`due`), so a
//!   call compares one clock reading with it; a fixed token has no due
//!   time and reads no clock.
//!
//! The test `the_per_call_path_allocates_nothing` holds this.

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

/// The token as sent, and when to ask for it again. Replaced whole (never
/// changed in place) by the one caller that asks the provider.
#[derive(Debug)]
struct Current {
    /// The `authorization` value ([`header`]), `None` to send none.
    value: Option<MetadataValue<Ascii>>,
    /// When the provider is to be asked again; `None`: never (a fixed
    /// token, or a refresh interval too long to add to the clock).
    due: Option<Instant>,
}

/// A client's token (module doc).
pub(crate) struct Token {
    /// Where a token that changes comes from; `None`: a fixed token.
    provider: Option<Arc<dyn TokenProvider>>,
    /// How long a provided token is sent before the provider is asked again.
    refresh: Duration,
    /// The token now; swapped whole by the caller that asks.
    current: ArcSwap<Current>,
    /// A caller is asking the provider (the others keep sending `current`).
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

/// The `authorization` value for `token`, ready to be copied for every
/// call without allocating.
pub(crate) fn header(token: &str) -> Result<MetadataValue<Ascii>, ClientError> {
    let value = MetadataValue::<Ascii>::try_from(format!("Bearer {token}"))
        .map_err(|_| ClientError::BadToken)?;
    // `bytes` keeps a buffer made from a `String` unshared until its first
    // copy, which allocates the shared count: make that copy here, once per
    // token, rather than on the first call that sends it (where every call
    // racing to be first would allocate one and all but one free theirs).
    drop(value.clone());
    Ok(value)
}

impl Token {
    /// A token that never changes (`None`: none is sent).
    pub(crate) fn fixed(token: Option<&str>) -> Result<Token, ClientError> {
        Ok(Token {
            provider: None,
            refresh: Duration::MAX,
            current: ArcSwap::from_pointee(Current {
                value: token.map(header).transpose()?,
                due: None,
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
                due: Instant::now().checked_add(refresh),
            }),
            provider: Some(provider),
            refresh,
            asking: AtomicBool::new(false),
        })
    }

    /// The value to send now, asked again first if it is old. The common
    /// case takes no lock and allocates nothing (module doc).
    pub(crate) fn value(&self) -> Option<MetadataValue<Ascii>> {
        let current = self.current.load();
        if current.due.is_some_and(|due| Instant::now() >= due) {
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
            due: Instant::now().checked_add(self.refresh),
        }));
        self.asking.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::Mutex;

    thread_local! {
        /// Allocations made by this thread (each test runs on its own).
        static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    }

    /// The system allocator, counting each thread's allocations: the
    /// allocator of this crate's unit tests.
    struct Counting;

    // SAFETY: every method passes its arguments unchanged to `System`, which
    // upholds `GlobalAlloc`'s contract; the count is a const-initialized
    // thread-local `Cell` (no allocation, no destructor), so counting cannot
    // re-enter the allocator.
    unsafe impl GlobalAlloc for Counting {
        // SAFETY: an `unsafe fn` because `GlobalAlloc` declares it so; its
        // callers keep `GlobalAlloc::alloc`'s contract, passed on below.
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
            // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
            unsafe { System.alloc(layout) }
        }

        // SAFETY: as `alloc`: `GlobalAlloc::dealloc`'s contract, passed on.
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` was allocated by `System` with `layout` (every
            // allocation of this binary goes through `alloc` above).
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    fn allocations() -> u64 {
        ALLOCATIONS.with(Cell::get)
    }

    #[test]
    fn the_per_call_path_allocates_nothing() {
        let provided: Arc<dyn TokenProvider> = Arc::new(|| Ok("from-the-vault".to_string()));
        let tokens = [
            // "Bearer s3cret!" is 14 bytes, `format!`'s first guess: its
            // buffer is exactly full, the case `bytes` shares lazily.
            Token::fixed(Some("s3cret!")).unwrap(),
            Token::fixed(None).unwrap(),
            Token::provided(provided, Duration::from_secs(3600)).unwrap(),
        ];
        // arc-swap registers a thread on its first load of any `ArcSwap`.
        drop(ArcSwap::from_pointee(0).load());
        let mut sent = Vec::with_capacity(3 * 1000);
        let before = allocations();
        for _ in 0..1000 {
            for t in &tokens {
                sent.push(t.value());
            }
        }
        assert_eq!(allocations() - before, 0, "a call's token allocated");
        // Every copy shares the one buffer built for the token.
        let first = sent[0].as_ref().unwrap().as_bytes().as_ptr();
        assert!(
            sent.iter()
                .step_by(3)
                .all(|v| v.as_ref().unwrap().as_bytes().as_ptr() == first)
        );
        assert_eq!(sent[2].as_ref().unwrap(), "Bearer from-the-vault");
        assert!(sent[1].is_none());
    }

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
