//! [`Reroute`]: what a partitioned call does after a member refused one of
//! its keys as not its group's (`FAILED_PRECONDITION` with
//! `uuidmap-owner-group`).
//!
//! The refusal names the version of the partition table the member decided
//! with (`uuidmap-table-version`). Two cases:
//!
//! - **the member is behind** the map the client routes by (its version is
//!   older): the table changed and the member has not seen it yet, because
//!   its etcd watch was lost for a moment, or it simply has not caught up
//!   since a move's flip. Re-reading the map would route to the same
//!   member again, so the call **waits** for it (5 ms, doubling to 200 ms),
//!   up to [`MEMBER_CATCH_UP`] in all: a member whose watch broke reads the
//!   map again within about a second of etcd answering it;
//! - otherwise **the client is behind**: it re-reads the map from etcd and
//!   routes again, up to [`MAX_REROUTES`] times.
//!
//! Either way the refused call did nothing, so sending it again is safe.

use std::future::Future;
use std::time::Duration;

use crate::ClientError;

/// How many times a call is routed again after members refused it as not
/// theirs (each time after reading the map again).
pub const MAX_REROUTES: usize = 3;

/// How long, in all, a call waits for a member that has not yet seen the
/// map the client routes by (module docs).
pub const MEMBER_CATCH_UP: Duration = Duration::from_secs(5);

const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// One call's rerouting so far (module docs).
pub(crate) struct Reroute {
    rereads: usize,
    waited: Duration,
    pause: Duration,
}

impl Default for Reroute {
    fn default() -> Self {
        Reroute {
            rereads: 0,
            waited: Duration::ZERO,
            pause: FIRST_PAUSE,
        }
    }
}

/// Whether `e` is a member's refusal of a key its group does not own.
pub(crate) fn not_owned(e: &ClientError) -> bool {
    e.status().is_some_and(|s| {
        s.code() == tonic::Code::FailedPrecondition
            && s.metadata()
                .get(uuidmap_proto::OWNER_GROUP_METADATA)
                .is_some()
    })
}

/// The table version a member's refusal was decided with.
fn refusal_version(e: &ClientError) -> Option<i64> {
    e.status()?
        .metadata()
        .get(uuidmap_proto::TABLE_VERSION_METADATA)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

impl Reroute {
    /// After `e`, the client's map at version `ours`: `Ok(true)` to send
    /// the call again (the map re-read with `reread`, or the member waited
    /// for), `Ok(false)` to give `e` to the caller (not a refusal, or no
    /// tries left); an error if the map cannot be read.
    pub(crate) async fn again<F, Fut>(
        &mut self,
        e: &ClientError,
        ours: i64,
        reread: F,
    ) -> Result<bool, ClientError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(), ClientError>>,
    {
        if self.member_behind(e, ours) {
            self.wait().await;
            return Ok(true);
        }
        if !not_owned(e) {
            return Ok(false);
        }
        if self.rereads >= MAX_REROUTES {
            return Ok(false);
        }
        self.rereads += 1;
        reread().await?;
        Ok(true)
    }

    /// Whether `e` is a refusal as not the group's from a member whose
    /// table is older than the client's (at version `ours`), with time
    /// left to wait for it. (A fenced partition's `UNAVAILABLE` carries a
    /// table version too, and is not this.)
    pub(crate) fn member_behind(&self, e: &ClientError, ours: i64) -> bool {
        self.waited < MEMBER_CATCH_UP
            && not_owned(e)
            && refusal_version(e).is_some_and(|v| v < ours)
    }

    /// Waits the next pause (doubling, capped).
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.waited += self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
    }
}
