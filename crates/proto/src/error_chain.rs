//! [`error_chain`]: an error with all its sources on one line, for
//! messages a user reads. Many library errors (tonic's transport errors,
//! rustls's) say only "transport error" or "invalid certificate"
//! themselves; the useful part is in their sources.

/// An error and its sources, `: `-separated.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
