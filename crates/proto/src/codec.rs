//! The protobuf codec of the generated services: prost's, except that a
//! message that does not decode is `INVALID_ARGUMENT` (the caller sent bytes
//! that are not this RPC's message; retrying them cannot succeed) instead of
//! tonic's default `INTERNAL`, which would blame the server.
//!
//! Selected in this crate's `build.rs` with `codec_path`. The client side uses the same
//! codec, so an answer from a server that does not decode is reported with
//! the same code and a message that names the message type.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// [`ProstCodec`] with decode failures reported as `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct UuidMapCodec<T, U> {
    _types: PhantomData<(T, U)>,
}

impl<T, U> Default for UuidMapCodec<T, U> {
    fn default() -> Self {
        UuidMapCodec {
            _types: PhantomData,
        }
    }
}

impl<T, U> Codec for UuidMapCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = CheckedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        CheckedDecoder(ProstDecoder::new(BufferSettings::default()))
    }
}

/// Prost's decoder with the failure's code and message rewritten.
#[derive(Debug, Clone)]
pub struct CheckedDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for CheckedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|e| undecodable::<U>(&e))
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

/// The status for bytes that are not a `U`.
fn undecodable<U>(e: &Status) -> Status {
    let full = std::any::type_name::<U>();
    let name = full.rsplit("::").next().unwrap_or(full);
    Status::invalid_argument(format!(
        "the {name} message could not be decoded (the bytes are not a protobuf encoding of \
         uuidmap.v1.{name}; check that the client uses this server's proto): {}",
        e.message()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::GetRequest;
    use tonic::Code;

    #[test]
    fn an_undecodable_request_is_invalid_argument_and_names_the_message() {
        let mut bytes: &[u8] = &[0xff, 0xff, 0xff];
        let e = GetRequest::decode(&mut bytes).unwrap_err();
        let s = undecodable::<GetRequest>(&Status::internal(e.to_string()));
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(
            s.message().contains("uuidmap.v1.GetRequest"),
            "{}",
            s.message()
        );
    }
}
