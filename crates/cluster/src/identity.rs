//! Who a member's data directory is: its node id and its *incarnation*, a
//! random number drawn when the directory is first used, kept in the
//! `member-id` file.
//!
//! # Why
//!
//! A voter acknowledges entries, then counts in the quorums that decide
//! elections. If its directory is lost and it comes back under the same
//! id with an empty log, it votes for any candidate: with the old leader
//! gone, a candidate missing committed entries can win with its vote, and
//! those acknowledged writes are lost. Raft assumes a voter never forgets.
//!
//! # The protocol
//!
//! - The group records each member's incarnation in the membership
//!   ([`ClusterNode::incarnation`]): `uuidmap cluster add` and
//!   `--cluster-init` ask the member for it first (the `Identify` RPC),
//!   and refuse a member that answers with another node id.
//! - Every Raft call a member makes carries the incarnation the
//!   membership records for its target (the [`INCARNATION_HEADER`]
//!   metadata). A member whose own incarnation differs refuses the call
//!   (`FAILED_PRECONDITION`, saying to remove it and add it again): it
//!   neither votes nor takes entries under its old place.
//! - 0 means unknown (a member added before incarnations existed, or one
//!   that did not answer at `--cluster-init`): not checked.
//!
//! # The file
//!
//! `member-id`: the magic `UMID`, a format version (u32), the node id and
//! the incarnation (u64 each), and the CRC-32C of those 24 bytes, all
//! little-endian: 32 bytes, written to a temporary file, fsynced, renamed
//! and the directory fsynced, so a complete file is always whole. It is
//! written once, when the member first opens the directory (after its
//! lock is taken).
//!
//! [`ClusterNode::incarnation`]: crate::ClusterNode::incarnation

use std::path::{Path, PathBuf};

use uuidmap_engine::store::{FileError, Io};

/// The name of the file, in the data directory.
pub const MEMBER_ID_FILE: &str = "member-id";

/// The gRPC metadata key of the incarnation a caller expects its target
/// to be.
pub const INCARNATION_HEADER: &str = "uuidmap-incarnation";

const MAGIC: &[u8; 4] = b"UMID";
const VERSION: u32 = 1;
const LEN: usize = 32;

/// A member's identity (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberIdentity {
    /// Its node id.
    pub node_id: u64,
    /// Its incarnation: never 0 for a directory; 0 in a membership means
    /// unknown.
    pub incarnation: u64,
}

/// What is wrong with a directory's identity.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The file could not be read or written.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The file is not whole.
    #[error(
        "{path} is damaged ({reason}): the member cannot prove which node it is. Remove the \
         member from the group (`uuidmap cluster remove`), empty its directory, and add it again"
    )]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The directory is another node's.
    #[error(
        "the data directory {dir} is node {found}'s, not node {given}'s: start it with \
         --node-id {found}, or give node {given} a directory of its own"
    )]
    OtherNode {
        /// The directory.
        dir: PathBuf,
        /// The node id in its file.
        found: u64,
        /// The node id the member was started with.
        given: u64,
    },
}

/// The identity of `dir` for node `node_id`: read from its `member-id`
/// file, or, with none, drawn and written durably (module docs). The
/// caller holds the directory's lock.
pub fn load_or_create(
    io: &dyn Io,
    dir: &Path,
    node_id: u64,
) -> Result<MemberIdentity, IdentityError> {
    let path = dir.join(MEMBER_ID_FILE);
    match io.read(&path) {
        Ok(bytes) => {
            let found = decode(&bytes).map_err(|reason| IdentityError::Damaged {
                path: path.clone(),
                reason,
            })?;
            if found.node_id != node_id {
                return Err(IdentityError::OtherNode {
                    dir: dir.to_path_buf(),
                    found: found.node_id,
                    given: node_id,
                });
            }
            Ok(found)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let identity = MemberIdentity {
                node_id,
                incarnation: fresh_incarnation(),
            };
            write(io, dir, &path, &identity)?;
            tracing::info!(
                node_id,
                incarnation = identity.incarnation,
                "a new member identity for this data directory"
            );
            Ok(identity)
        }
        Err(e) => Err(FileError::new("reading the member's identity", &path, e).into()),
    }
}

/// A random incarnation, never 0.
fn fresh_incarnation() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0.max(1)
}

fn encode(identity: &MemberIdentity) -> [u8; LEN] {
    let mut bytes = [0u8; LEN];
    bytes[..4].copy_from_slice(MAGIC);
    bytes[4..8].copy_from_slice(&VERSION.to_le_bytes());
    bytes[8..16].copy_from_slice(&identity.node_id.to_le_bytes());
    bytes[16..24].copy_from_slice(&identity.incarnation.to_le_bytes());
    let crc = uuidmap_engine::store::crc32c(&bytes[4..24]);
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn decode(bytes: &[u8]) -> Result<MemberIdentity, String> {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    if bytes.len() != LEN {
        return Err(format!("{} bytes, not {LEN}", bytes.len()));
    }
    if &bytes[..4] != MAGIC {
        return Err("it is not a member-id file".into());
    }
    if uuidmap_engine::store::crc32c(&bytes[4..24]) != u32_at(24) {
        return Err("it fails its CRC-32C".into());
    }
    if u32_at(4) != VERSION {
        return Err(format!(
            "format version {}, and this build reads {VERSION}",
            u32_at(4)
        ));
    }
    Ok(MemberIdentity {
        node_id: u64_at(8),
        incarnation: u64_at(16),
    })
}

fn write(io: &dyn Io, dir: &Path, path: &Path, identity: &MemberIdentity) -> Result<(), FileError> {
    let temp = path.with_extension("tmp");
    let mut out = io
        .create(&temp)
        .map_err(|e| FileError::new("creating the member's identity file", &temp, e))?;
    out.write_all(&encode(identity))
        .and_then(|()| out.sync())
        .map_err(|e| FileError::new("writing the member's identity file", &temp, e))?;
    drop(out);
    io.rename(&temp, path)
        .map_err(|e| FileError::new("renaming into place the member's identity file", path, e))?;
    io.sync_dir(dir)
        .map_err(|e| FileError::new("syncing the data directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuidmap_engine::store::OsIo;

    #[test]
    fn a_new_directory_gets_an_identity_that_the_next_start_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(&OsIo, dir.path(), 7).unwrap();
        assert_eq!(first.node_id, 7);
        assert_ne!(first.incarnation, 0);
        assert_eq!(load_or_create(&OsIo, dir.path(), 7).unwrap(), first);
        // An emptied directory is another incarnation.
        std::fs::remove_file(dir.path().join(MEMBER_ID_FILE)).unwrap();
        let again = load_or_create(&OsIo, dir.path(), 7).unwrap();
        assert_ne!(again.incarnation, first.incarnation);
    }

    #[test]
    fn another_nodes_directory_is_refused_naming_both_ids() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create(&OsIo, dir.path(), 1).unwrap();
        let e = load_or_create(&OsIo, dir.path(), 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node 1's, not node 2's") && e.contains("--node-id 1"),
            "{e}"
        );
    }

    #[test]
    fn a_damaged_file_is_refused_with_the_steps_to_replace_the_member() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create(&OsIo, dir.path(), 3).unwrap();
        let path = dir.path().join(MEMBER_ID_FILE);
        let whole = std::fs::read(&path).unwrap();
        for (what, bytes) in [
            ("a flipped bit", {
                let mut b = whole.clone();
                b[17] ^= 1;
                b
            }),
            ("cut short", whole[..20].to_vec()),
            ("another file", b"not an identity at all, no......".to_vec()),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            let e = load_or_create(&OsIo, dir.path(), 3)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("member-id is damaged") && e.contains("uuidmap cluster remove"),
                "{what}: {e}"
            );
        }
    }
}
