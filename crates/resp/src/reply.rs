//! RESP2 answers (and RESP3's null, for a connection that asked for RESP3
//! with `HELLO 3`: every other answer we give is the same in both),
//! appended to the connection's output buffer (one buffer
//! per connection, reused: an answer allocates nothing once the buffer has
//! grown to the connection's largest batch of pipelined answers).

use std::io::Write;

use uuid::Uuid;

use crate::uuid_arg::UuidForm;

/// `+<text>`. `text` must hold no CR or LF.
pub fn simple(out: &mut Vec<u8>, text: &str) {
    out.push(b'+');
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `-<message>`: the message starts with its code (`ERR`, `MOVED`,
/// `NOAUTH`...). A CR or LF in it becomes a space, so that an error never
/// breaks the framing.
pub fn error(out: &mut Vec<u8>, message: &str) {
    out.push(b'-');
    out.extend(
        message
            .bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// `:<n>`.
pub fn integer(out: &mut Vec<u8>, n: i64) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, ":{n}\r\n");
}

/// `$<len>` and the bytes.
pub fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    let _ = write!(out, "${}\r\n", bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// A UUID as a bulk string, in `form`.
pub fn uuid(out: &mut Vec<u8>, value: &Uuid, form: UuidForm) {
    match form {
        UuidForm::Raw => bulk(out, value.as_bytes()),
        UuidForm::Text => {
            let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            bulk(out, value.hyphenated().encode_lower(&mut text).as_bytes());
        }
    }
}

/// No value: RESP2's `$-1`, or RESP3's `_` when `resp3`.
pub fn null(out: &mut Vec<u8>, resp3: bool) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
}

/// `%<n>`: RESP3's map of the next `n` key and value pairs.
pub fn map(out: &mut Vec<u8>, n: usize) {
    let _ = write!(out, "%{n}\r\n");
}

/// `*<n>`: an array of the next `n` answers.
pub fn array(out: &mut Vec<u8>, n: usize) {
    let _ = write!(out, "*{n}\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_message_cannot_break_the_framing() {
        let mut out = Vec::new();
        error(&mut out, "ERR one\r\ntwo");
        assert_eq!(out, b"-ERR one  two\r\n");
    }

    #[test]
    fn a_uuid_is_answered_in_the_form_it_was_asked_in() {
        let u = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let mut out = Vec::new();
        uuid(&mut out, &u, UuidForm::Text);
        assert_eq!(out, b"$36\r\n01234567-89ab-cdef-0123-456789abcdef\r\n");
        out.clear();
        uuid(&mut out, &u, UuidForm::Raw);
        assert_eq!(&out[..5], b"$16\r\n");
        assert_eq!(&out[5..21], u.as_bytes());
    }
}
