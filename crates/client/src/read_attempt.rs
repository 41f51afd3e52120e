//! One attempt of a unary read: bounded by its own timeout, and hedged.
//!
//! - **Attempt timeout** ([`ReadAttempts`](crate::attempt_policy::ReadAttempts)): an attempt of a read may take
//!   a part of the call's deadline (a quarter by default), not all of it.
//!   An endpoint that lets it pass without a word (a member that accepts
//!   connections and never answers) is pessimized
//!   ([`Endpoints::timed_out`]) and the attempt fails with
//!   [`ClientError::AttemptTimedOut`], which the retry loop sends to
//!   another member. So a silent member costs a call one attempt timeout,
//!   not its whole deadline, and the calls after it nothing (they skip it
//!   until the health prober hears from it again).
//! - **Hedging**: when an attempt has waited longer than 95 % of that
//!   endpoint's recent answers took ([`crate::latency::Latency::p95`]),
//!   the same read goes to another healthy member too, if the retry budget
//!   gives a token for it; the first answer wins and the other call is
//!   dropped (which cancels it on the wire). A failure of one waits for
//!   the other. With the budget spent, no hedge is sent, so hedges cannot
//!   multiply the load on a cluster that is slow everywhere.
//!
//! Writes have neither: a write's attempt that timed out has an unknown
//! outcome, and only the leader takes writes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;

use crate::call::{Failure, endpoint_failure};
use crate::client::Client;
use crate::endpoints::{Endpoint, Endpoints};
use crate::error::ClientError;

/// One call of a read on one endpoint: the answer, or the failure noted
/// on the endpoint; an answer's time is counted in its latency.
async fn on_endpoint<T, Fut>(
    endpoints: &Endpoints,
    e: &Endpoint,
    rpc: &'static str,
    call: Fut,
) -> Result<T, Failure>
where
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let started = Instant::now();
    match call.await {
        Ok(answer) => {
            endpoints.succeeded(e);
            e.latency.record(started.elapsed());
            Ok(answer)
        }
        Err(status) => Err(endpoint_failure(endpoints, e, rpc, status)),
    }
}

impl Client {
    /// A unary read through the retry loop, each attempt bounded by the
    /// attempt timeout and hedged (module doc). `call` gets the channel
    /// and the time left.
    pub(crate) async fn unary_read<T, F, Fut>(
        &self,
        rpc: &'static str,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Channel, Duration) -> Fut + Clone,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let endpoints = self.endpoints();
        let attempts = self.read_attempts();
        let attempt_timeout = attempts.timeout(self.timeout());
        self.run(rpc, true, |remaining, avoid| {
            let mut call = call.clone();
            let first = endpoints.pick(avoid);
            let limit = Limit {
                after: attempt_timeout.min(remaining),
                cut_short: attempt_timeout < remaining,
            };
            let give_up = Instant::now() + limit.after;
            let hedge_after = if attempts.hedging {
                first.latency.p95()
            } else {
                None
            };
            async move {
                let (channel, lease) = first.pool.lease();
                let one = on_endpoint(endpoints, &first, rpc, call(channel, remaining));
                tokio::pin!(one);
                let hedge_at = hedge_after
                    .map(|h| Instant::now() + h)
                    .filter(|&at| at < give_up);
                // Until the hedge is due: the first call alone.
                let waited_past_p95 = match hedge_at {
                    None => false,
                    Some(at) => match tokio::time::timeout_at(at, &mut one).await {
                        Ok(a) => {
                            drop(lease);
                            return a;
                        }
                        Err(_) => true,
                    },
                };
                let second = if waited_past_p95 {
                    self.hedge(&first)
                } else {
                    None
                };
                let answer = match second {
                    None => match tokio::time::timeout_at(give_up, &mut one).await {
                        Ok(a) => a,
                        Err(_) => return Err(timed_out(endpoints, &first, rpc, limit)),
                    },
                    Some(second) => {
                        let left = give_up.saturating_duration_since(Instant::now());
                        let (channel, lease) = second.pool.lease();
                        let two = on_endpoint(endpoints, &second, rpc, call(channel, left));
                        let raced = race(one, two, give_up).await;
                        drop(lease);
                        match raced {
                            Some(a) => a,
                            None => return Err(timed_out(endpoints, &first, rpc, limit)),
                        }
                    }
                };
                drop(lease);
                answer
            }
        })
        .await
    }

    /// The endpoint to hedge a read slow on `first` with: another healthy
    /// one, if the retry budget gives a token for it.
    fn hedge(&self, first: &Endpoint) -> Option<Arc<Endpoint>> {
        let second = self.endpoints().pick_other(first.id)?;
        if !self.budget().withdraw() {
            metrics::counter!("uuidmap_client_hedges_refused_total").increment(1);
            return None;
        }
        self.count_hedge();
        metrics::counter!("uuidmap_client_hedges_total").increment(1);
        tracing::debug!(from = %first.url, to = %second.url, "hedging a slow read");
        Some(second)
    }
}

/// The first answer of two calls (a failure of one waits for the other);
/// `None` if neither answered by `give_up`.
async fn race<T>(
    one: impl Future<Output = Result<T, Failure>>,
    two: impl Future<Output = Result<T, Failure>>,
    give_up: Instant,
) -> Option<Result<T, Failure>> {
    tokio::pin!(one);
    tokio::pin!(two);
    let (mut one_done, mut two_done) = (false, false);
    let mut failed = None;
    let deadline = tokio::time::sleep_until(give_up);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            a = &mut one, if !one_done => {
                if a.is_ok() || two_done { return Some(a.map_err(|e| failed.unwrap_or(e))); }
                one_done = true;
                failed = a.err();
            }
            a = &mut two, if !two_done => {
                if a.is_ok() || one_done { return Some(a.map_err(|e| failed.unwrap_or(e))); }
                two_done = true;
                failed = a.err();
            }
            () = &mut deadline => {
                return failed.map(Err);
            }
        }
    }
}

/// How long an attempt may take, and whether that is less than what is
/// left of its call's deadline.
#[derive(Clone, Copy, Debug)]
struct Limit {
    after: Duration,
    cut_short: bool,
}

/// The failure of an attempt that `e` let time out: `e` is pessimized.
/// An attempt that had all the call's time left ends the call
/// ([`ClientError::DeadlineExceeded`]); one cut short by the attempt
/// timeout is [`ClientError::AttemptTimedOut`], tried elsewhere.
fn timed_out(endpoints: &Endpoints, e: &Endpoint, rpc: &'static str, limit: Limit) -> Failure {
    endpoints.timed_out(e);
    let error = if limit.cut_short {
        ClientError::AttemptTimedOut {
            rpc,
            server: e.url.clone(),
            after: limit.after,
        }
    } else {
        ClientError::DeadlineExceeded {
            rpc,
            timeout: limit.after,
            attempts: 1,
            last: None,
        }
    };
    Failure {
        error,
        endpoint: Some(e.id),
        redirected: false,
    }
}
