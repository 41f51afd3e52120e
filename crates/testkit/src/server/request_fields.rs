//! Small builders of request fields.

use prost::bytes::Bytes;
use uuid::Uuid;
use uuidmap_proto::v1 as pb;

/// A UUID as the wire's 16 bytes.
pub fn b(u: Uuid) -> Bytes {
    Bytes::copy_from_slice(u.as_bytes())
}

/// The UUID whose 128-bit value is `n`.
pub fn u(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

/// A `Put` of `k → v`.
pub fn put_req(k: Uuid, v: Uuid) -> pb::PutRequest {
    pb::PutRequest {
        key: b(k),
        value: b(v),
    }
}

/// A `Get` of `k`, linearizable, with no `min_lsn`.
pub fn get_req(k: Uuid) -> pb::GetRequest {
    pb::GetRequest {
        key: b(k),
        ..Default::default()
    }
}

/// A `CompareAndSet` of `k` from `expected` to `new` (`None`: absent).
pub fn cas_req(k: Uuid, expected: Option<Uuid>, new: Option<Uuid>) -> pb::CompareAndSetRequest {
    pb::CompareAndSetRequest {
        key: b(k),
        expected: expected.map(b),
        new_value: new.map(b),
    }
}

/// A `WriteOp` that puts `k → v`.
pub fn put_op(k: Uuid, v: Uuid) -> pb::WriteOp {
    pb::WriteOp {
        op: Some(pb::write_op::Op::Put(pb::PutOp {
            key: b(k),
            value: b(v),
        })),
    }
}

/// Key `i` of a test's key space, spread over the hash space like a random
/// UUID (a multiplicative hash of `i + 1`) and never nil.
pub fn spread_key(i: u64) -> Uuid {
    u((i as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) | 1)
}
