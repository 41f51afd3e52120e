//! A key or a value in a command: a UUID, as 16 raw bytes or as its
//! 36-character text form (`8-4-4-4-12` hex digits). Anything else is
//! refused with an error that says so. The key is then checked by the
//! server's own edge check (`wire::key`: not the nil or max UUID), as a
//! gRPC key is.

use uuid::Uuid;
use uuidmap_index::Key;
use uuidmap_server::wire;

/// How a UUID was written in a command, and so how a value read for it is
/// answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UuidForm {
    /// 16 raw bytes.
    Raw,
    /// 36 characters, `8-4-4-4-12` hex digits.
    Text,
}

/// An argument that is not a UUID (or a reserved key).
#[derive(Debug, thiserror::Error)]
pub enum UuidArgError {
    /// Neither 16 bytes nor 36 characters of a UUID.
    #[error(
        "ERR the {what} is not a UUID: give 16 raw bytes or the 36-character text form \
         (8-4-4-4-12 hex digits, e.g. 67e55044-10b1-426f-9247-bb680e5fe0c8); got {len} bytes"
    )]
    NotUuid {
        /// `key` or `value`.
        what: &'static str,
        /// The argument's length.
        len: usize,
    },
    /// A reserved key, refused as gRPC refuses it.
    #[error("ERR {0}")]
    Reserved(#[from] uuidmap_server::errors::RequestError),
}

/// The UUID `arg` holds, and its form.
pub fn parse_uuid(what: &'static str, arg: &[u8]) -> Result<(Uuid, UuidForm), UuidArgError> {
    let not_uuid = || UuidArgError::NotUuid {
        what,
        len: arg.len(),
    };
    match arg.len() {
        16 => Ok((
            Uuid::from_bytes(arg.try_into().expect("16 bytes")),
            UuidForm::Raw,
        )),
        36 => Uuid::try_parse_ascii(arg)
            .map(|u| (u, UuidForm::Text))
            .map_err(|_| not_uuid()),
        _ => Err(not_uuid()),
    }
}

/// A key argument: a UUID that is not reserved.
pub fn parse_key(arg: &[u8]) -> Result<(Key, UuidForm), UuidArgError> {
    let (u, form) = parse_uuid("key", arg)?;
    Ok((wire::key("key", u.as_bytes())?, form))
}

/// A value argument: any UUID.
pub fn parse_value(arg: &[u8]) -> Result<Uuid, UuidArgError> {
    Ok(parse_uuid("value", arg)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_16_raw_bytes_or_36_characters_and_never_reserved() {
        let text = b"67e55044-10b1-426f-9247-bb680e5fe0c8";
        let (k, form) = parse_key(text).unwrap();
        assert_eq!(form, UuidForm::Text);
        let (raw, form) = parse_key(k.as_uuid().as_bytes()).unwrap();
        assert_eq!((raw, form), (k, UuidForm::Raw));
        let e = parse_key(b"foo").unwrap_err().to_string();
        assert!(
            e.starts_with("ERR the key is not a UUID") && e.contains("got 3"),
            "{e}"
        );
        // 32 hex digits are a UUID to the uuid crate, not to us.
        assert!(parse_key(b"67e5504410b1426f9247bb680e5fe0c8").is_err());
        let nil = parse_key(&[0u8; 16]).unwrap_err().to_string();
        assert!(nil.starts_with("ERR ") && nil.contains("key"), "{nil}");
        assert!(parse_value(&[0u8; 16]).is_ok());
    }
}
