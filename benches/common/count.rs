//! Entry counts as the benches' knobs take them. Its own file so that a
//! bench that keeps the system allocator (`restart_scale`) can use it
//! without the rest of `common`.

/// Parses `1000000`, `1_000_000`, `1M`, `250k`.
pub fn parse_count(s: &str) -> Option<usize> {
    let s = s.trim().replace('_', "");
    let (digits, scale) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1_000),
        'm' | 'M' => (&s[..s.len() - 1], 1_000_000),
        _ => (&s[..], 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}
