//! One command, from its arguments to its answer: the table's checks
//! (known, arity, the token's role), admission (a permit of the command's
//! class, waited for at most `--max-wait-ms`, as a gRPC call without a
//! deadline waits), then the command itself over the handles the gRPC
//! services use. Reads are linearizable, as gRPC's are by default (on a
//! member, through the same `ReadGate`).

use std::time::Instant;

use metrics::{Counter, Histogram};
use uuidmap_server::deadline::wait_from_now;
use uuidmap_server::front_end::Shared;
use uuidmap_server::methods::Role;
use uuidmap_server::read_gate::Consistency;

use crate::command_table::{COMMANDS, Command, Which, lookup};
use crate::segment_scan::{self, Page, SegmentRest, Step};
use crate::uuid_arg::parse_key;
use crate::{info_text, reply, write_commands};

/// One connection's state.
pub struct Session {
    /// The role its `AUTH` proved; `None` until then (only with tokens
    /// configured: without, every command is allowed).
    role: Option<Role>,
    /// `CLIENT SETNAME`'s name.
    name: Option<Box<[u8]>>,
    /// The sorted rest of the segment its last `SCAN` ended in.
    scan_rest: Option<SegmentRest>,
    /// Set by `QUIT`: the connection closes after this answer.
    pub quit: bool,
    /// Whether `HELLO 3` chose RESP3 (its null and the `HELLO` map).
    resp3: bool,
    /// `CLIENT ID`.
    id: u64,
}

impl Session {
    /// A new connection's state, numbered `id`.
    pub fn new(id: u64, tokens: bool) -> Session {
        Session {
            role: if tokens { None } else { Some(Role::Admin) },
            name: None,
            scan_rest: None,
            quit: false,
            resp3: false,
            id,
        }
    }
}

/// A command's series (`uuidmap_resp_commands_total{command, outcome}`,
/// `uuidmap_resp_command_seconds{command}`), registered once.
struct CommandSeries {
    ok: Counter,
    error: Counter,
    seconds: Histogram,
}

/// Why `session` may not run `command`: no `AUTH` yet, or a token whose
/// role is below the command's.
pub(crate) fn role_refusal(command: &Command, session: &Session) -> Option<String> {
    let needed = command.role?;
    match session.role {
        None => Some("NOAUTH Authentication required.".into()),
        Some(has) if has < needed => {
            let name = command.name;
            Some(format!(
                "NOPERM this connection's token has the role {has}; '{name}' needs {needed}"
            ))
        }
        Some(_) => None,
    }
}

/// What every connection of the front end shares.
pub struct Commands {
    /// The server's handles.
    pub shared: Shared,
    /// By the command table's position.
    series: Vec<CommandSeries>,
    /// `uuidmap_resp_commands_total{command="unknown", outcome="error"}`.
    unknown: Counter,
    /// The port the front end listens on (`INFO`).
    port: u16,
}

impl Commands {
    /// The commands over `shared`, registering their series with the
    /// recorder installed now.
    pub fn new(shared: Shared, port: u16) -> Commands {
        let series = COMMANDS
            .iter()
            .map(|c| CommandSeries {
                ok: metrics::counter!(
                    "uuidmap_resp_commands_total", "command" => c.name, "outcome" => "ok"
                ),
                error: metrics::counter!(
                    "uuidmap_resp_commands_total", "command" => c.name, "outcome" => "error"
                ),
                seconds: metrics::histogram!("uuidmap_resp_command_seconds", "command" => c.name),
            })
            .collect();
        Commands {
            shared,
            series,
            unknown: metrics::counter!(
                "uuidmap_resp_commands_total", "command" => "unknown", "outcome" => "error"
            ),
            port,
        }
    }

    /// Runs the command `args` (`args[0]` is its name; never empty) and
    /// appends its answer to `out`.
    pub async fn execute(&self, session: &mut Session, args: &[&[u8]], out: &mut Vec<u8>) {
        let Some((i, command)) = lookup(args[0]) else {
            self.unknown.increment(1);
            return unknown_command(args, out);
        };
        let started = Instant::now();
        let before = out.len();
        self.checked(command, session, args, out).await;
        self.count(i, out.get(before) != Some(&b'-'), started);
    }

    /// Counts one command of the table's row `i`, answered without an
    /// error or with one, started at `started`.
    pub(crate) fn count(&self, i: usize, ok: bool, started: Instant) {
        let s = &self.series[i];
        if ok {
            s.ok.increment(1);
        } else {
            s.error.increment(1);
        }
        s.seconds.record(started.elapsed().as_secs_f64());
    }

    async fn checked(
        &self,
        command: &Command,
        session: &mut Session,
        args: &[&[u8]],
        out: &mut Vec<u8>,
    ) {
        if !command.arity_fits(args.len()) {
            let name = command.name;
            return reply::error(
                out,
                &format!("ERR wrong number of arguments for '{name}' command"),
            );
        }
        if let Some(refusal) = role_refusal(command, session) {
            return reply::error(out, &refusal);
        }
        // Held until the answer is made, as a gRPC call holds its permit.
        let _permit = match command.class {
            Some(class) => {
                let wait = wait_from_now(None, self.shared.limits.max_wait);
                match self.shared.admission.permit(class, wait).await {
                    Ok(p) => Some(p),
                    Err(e) => return reply::error(out, &format!("ERR {e}")),
                }
            }
            None => None,
        };
        match command.which {
            Which::Ping => match args.get(1) {
                None => reply::simple(out, "PONG"),
                Some(m) if args.len() == 2 => reply::bulk(out, m),
                Some(_) => reply::error(out, "ERR wrong number of arguments for 'ping' command"),
            },
            Which::Echo => reply::bulk(out, args[1]),
            Which::Get => self.get(args[1], out, session.resp3).await,
            Which::MGet => self.mget(&args[1..], out, false, session.resp3).await,
            Which::Exists => self.mget(&args[1..], out, true, session.resp3).await,
            Which::Set => write_commands::set(&self.shared, args, out, session.resp3).await,
            Which::Del => write_commands::del(&self.shared, args, out).await,
            Which::DelIfEq => write_commands::del_if_eq(&self.shared, args, out).await,
            Which::Wait => write_commands::wait(&self.shared, args, out).await,
            Which::MSet => write_commands::mset(&self.shared, args, out).await,
            Which::DbSize => {
                if self.admit_read(out).await {
                    reply::integer(out, self.shared.durable.index().len() as i64);
                }
            }
            Which::Scan => self.scan(session, args, out).await,
            Which::Info => self.info(args, out),
            Which::Command => command_info(args, out, session.resp3),
            Which::Client => client(session, args, out),
            Which::Select => match args[1] {
                b"0" => reply::simple(out, "OK"),
                _ => reply::error(out, "ERR DB index is out of range"),
            },
            Which::Quit => {
                session.quit = true;
                reply::simple(out, "OK");
            }
            Which::Hello => self.hello(session, args, out),
            Which::Auth => match args.len() {
                2 => self.auth(session, args[1], out),
                3 => self.auth(session, args[2], out),
                _ => reply::error(out, "ERR syntax error"),
            },
        }
    }

    /// Admits a read at the default consistency (linearizable), as gRPC
    /// does; on a refusal answers it and returns `false`.
    async fn admit_read(&self, out: &mut Vec<u8>) -> bool {
        let gate = &self.shared.gate;
        let admitted = match gate.at_once(Consistency::Linearizable, 0) {
            Some(answer) => answer,
            None => {
                let bound = wait_from_now(None, self.shared.limits.max_wait);
                gate.admit(Consistency::Linearizable, 0, bound).await
            }
        };
        match admitted {
            Ok(_) => true,
            Err(status) => {
                reply::error(out, &format!("ERR {}", status.message()));
                false
            }
        }
    }

    async fn get(&self, arg: &[u8], out: &mut Vec<u8>, resp3: bool) {
        let (key, form) = match parse_key(arg) {
            Ok(k) => k,
            Err(e) => return reply::error(out, &e.to_string()),
        };
        if !self.admit_read(out).await {
            return;
        }
        match self.shared.durable.index().get(key.as_uuid()) {
            Some(v) => reply::uuid(out, &v, form),
            None => reply::null(out, resp3),
        }
    }

    /// `MGET` (the values) or `EXISTS` (how many of the keys have one).
    async fn mget(&self, args: &[&[u8]], out: &mut Vec<u8>, exists: bool, resp3: bool) {
        let max = self.shared.limits.max_batch_keys;
        if args.len() > max {
            let n = args.len();
            return reply::error(
                out,
                &format!("ERR {n} keys are over the server's limit of {max} (--max-batch-keys)"),
            );
        }
        let mut keys = Vec::with_capacity(args.len());
        let mut forms = Vec::with_capacity(args.len());
        for a in args {
            match parse_key(a) {
                Ok((k, form)) => {
                    keys.push(*k.as_uuid());
                    forms.push(form);
                }
                Err(e) => return reply::error(out, &e.to_string()),
            }
        }
        if !self.admit_read(out).await {
            return;
        }
        let mut values = vec![None; keys.len()];
        self.shared.durable.index().get_many(&keys, &mut values);
        if exists {
            return reply::integer(out, values.iter().flatten().count() as i64);
        }
        reply::array(out, values.len());
        for (v, form) in values.iter().zip(forms) {
            match v {
                Some(v) => reply::uuid(out, v, form),
                None => reply::null(out, resp3),
            }
        }
    }

    /// `SCAN cursor [COUNT n] [MATCH *] [TYPE string]` (module
    /// `segment_scan`): keys as text, each exactly once.
    async fn scan(&self, session: &mut Session, args: &[&[u8]], out: &mut Vec<u8>) {
        let Some(cursor) = number(args[1]) else {
            return reply::error(out, "ERR invalid cursor");
        };
        let mut count = 10usize;
        for opt in args[2..].chunks(2) {
            let [name, value] = opt else {
                return reply::error(out, "ERR syntax error");
            };
            if name.eq_ignore_ascii_case(b"COUNT") {
                match number(value) {
                    Some(n) if n >= 1 => {
                        count = n.min(self.shared.limits.max_batch_keys as u64) as usize;
                    }
                    _ => return reply::error(out, "ERR value is not an integer or out of range"),
                }
            } else if name.eq_ignore_ascii_case(b"MATCH") {
                if *value != b"*" {
                    return reply::error(out, "ERR uuidmap's SCAN takes no MATCH pattern but *");
                }
            } else if !(name.eq_ignore_ascii_case(b"TYPE") && value.eq_ignore_ascii_case(b"string"))
            {
                return reply::error(out, "ERR syntax error");
            }
        }
        if !self.admit_read(out).await {
            return;
        }
        let index = self.shared.durable.index().clone();
        let mut page = match Page::new(cursor, count, index.segment_count()) {
            Ok(p) => p,
            Err(e) => return reply::error(out, &e.to_string()),
        };
        let mut copied = None;
        let next = loop {
            match page.take(&mut session.scan_rest, copied.take()) {
                Step::Done(next) => break next,
                Step::Copy { segment, from } => {
                    // One consistent copy of a segment: off the async workers.
                    let index = index.clone();
                    let copy = tokio::task::spawn_blocking(move || {
                        segment_scan::copy_rest(&index, segment, from)
                    });
                    match copy.await {
                        Ok(keys) => copied = Some(keys),
                        Err(e) => return reply::error(out, &format!("ERR the scan failed: {e}")),
                    }
                }
            }
        };
        reply::array(out, 2);
        reply::bulk(out, next.to_string().as_bytes());
        reply::array(out, page.keys.len());
        for k in &page.keys {
            reply::uuid(out, k, crate::uuid_arg::UuidForm::Text);
        }
    }

    fn info(&self, args: &[&[u8]], out: &mut Vec<u8>) {
        if args.len() > 2 {
            return reply::error(out, "ERR syntax error");
        }
        let section = args.get(1).map(|s| String::from_utf8_lossy(s));
        let stats =
            uuidmap_server::stats_answer::stats(&self.shared.durable, self.shared.cluster.as_ref());
        let text = info_text::info(&stats, section.as_deref(), self.port);
        reply::bulk(out, text.as_bytes());
    }

    fn auth(&self, session: &mut Session, token: &[u8], out: &mut Vec<u8>) {
        match self.check_token(token) {
            Ok(role) => {
                session.role = Some(role);
                reply::simple(out, "OK");
            }
            Err(text) => reply::error(out, text),
        }
    }

    /// The role of `token`, or the error `AUTH` answers.
    fn check_token(&self, token: &[u8]) -> Result<Role, &'static str> {
        let Some(tokens) = &self.shared.tokens else {
            return Err(
                "ERR AUTH <password> called without any password configured for the \
                        default user. Are you sure your configuration is correct?",
            );
        };
        tokens
            .role_of(token)
            .ok_or("WRONGPASS invalid username-password pair or user is disabled.")
    }

    /// `HELLO [2|3 [AUTH user token] [SETNAME name]]`: the protocol for
    /// the rest of the connection.
    fn hello(&self, session: &mut Session, args: &[&[u8]], out: &mut Vec<u8>) {
        let mut resp3 = session.resp3;
        if let Some(version) = args.get(1) {
            match number(version) {
                Some(2) => resp3 = false,
                Some(3) => resp3 = true,
                Some(_) => {
                    return reply::error(out, "NOPROTO unsupported protocol version");
                }
                None => {
                    return reply::error(
                        out,
                        "ERR Protocol version is not an integer or out of range",
                    );
                }
            }
        }
        let mut rest = args.get(2..).unwrap_or_default();
        let mut role = None;
        let mut name = None;
        while let Some(opt) = rest.first() {
            if opt.eq_ignore_ascii_case(b"AUTH") && rest.len() >= 3 {
                match self.check_token(rest[2]) {
                    Ok(r) => role = Some(r),
                    Err(text) => return reply::error(out, text),
                }
                rest = &rest[3..];
            } else if opt.eq_ignore_ascii_case(b"SETNAME") && rest.len() >= 2 {
                name = Some(rest[1]);
                rest = &rest[2..];
            } else {
                return reply::error(out, "ERR syntax error");
            }
        }
        if role.is_some() {
            session.role = role;
        }
        if session.role.is_none() {
            return reply::error(
                out,
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            );
        }
        if let Some(n) = name {
            session.name = Some(n.into());
        }
        session.resp3 = resp3;
        if resp3 {
            reply::map(out, 7);
        } else {
            reply::array(out, 14);
        }
        for (k, v) in [
            ("server", "uuidmap"),
            ("version", env!("CARGO_PKG_VERSION")),
        ] {
            reply::bulk(out, k.as_bytes());
            reply::bulk(out, v.as_bytes());
        }
        reply::bulk(out, b"proto");
        reply::integer(out, if resp3 { 3 } else { 2 });
        reply::bulk(out, b"id");
        reply::integer(out, session.id as i64);
        for (k, v) in [("mode", "standalone"), ("role", "master")] {
            reply::bulk(out, k.as_bytes());
            reply::bulk(out, v.as_bytes());
        }
        reply::bulk(out, b"modules");
        reply::array(out, 0);
    }
}

/// A non-negative decimal number.
fn number(arg: &[u8]) -> Option<u64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

/// Redis's text for an unknown command, so that clients recognize it: the
/// name and the first arguments, quoted, each cut at 128 bytes.
fn unknown_command(args: &[&[u8]], out: &mut Vec<u8>) {
    let cut = |a: &[u8]| String::from_utf8_lossy(&a[..a.len().min(128)]).into_owned();
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        cut(args[0])
    );
    for a in args.iter().skip(1).take(16) {
        text.push_str(&format!("'{}' ", cut(a)));
    }
    reply::error(out, &text);
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND DOCS`:
/// enough for clients that ask what the server knows.
fn command_info(args: &[&[u8]], out: &mut Vec<u8>, resp3: bool) {
    let Some(sub) = args.get(1) else {
        reply::array(out, COMMANDS.len());
        return COMMANDS.iter().for_each(|c| command_entry(c, out));
    };
    if sub.eq_ignore_ascii_case(b"COUNT") {
        reply::integer(out, COMMANDS.len() as i64);
    } else if sub.eq_ignore_ascii_case(b"DOCS") {
        reply::array(out, 0);
    } else if sub.eq_ignore_ascii_case(b"INFO") {
        reply::array(out, args.len() - 2);
        for name in &args[2..] {
            match lookup(name) {
                Some((_, c)) => command_entry(c, out),
                None if resp3 => reply::null(out, true),
                None => out.extend_from_slice(b"*-1\r\n"),
            }
        }
    } else {
        let sub = String::from_utf8_lossy(sub);
        reply::error(
            out,
            &format!("ERR unknown subcommand '{sub}'. Try COMMAND HELP."),
        );
    }
}

/// One command as `COMMAND` describes it: name, arity, flags, first key,
/// last key, step.
fn command_entry(c: &Command, out: &mut Vec<u8>) {
    let (first, last, step) = match c.which {
        Which::Get | Which::Set | Which::DelIfEq => (1, 1, 1),
        Which::MGet | Which::Exists | Which::Del => (1, -1, 1),
        Which::MSet => (1, -1, 2),
        _ => (0, 0, 0),
    };
    reply::array(out, 6);
    reply::simple(out, c.name);
    reply::integer(out, c.arity);
    let flag = match (c.writes, c.class.is_some() && first > 0) {
        (true, _) => Some("write"),
        (false, true) => Some("readonly"),
        (false, false) => None,
    };
    reply::array(out, usize::from(flag.is_some()));
    if let Some(f) = flag {
        reply::simple(out, f);
    }
    reply::integer(out, first);
    reply::integer(out, last);
    reply::integer(out, step);
}

/// `CLIENT SETNAME|GETNAME|SETINFO|ID`.
fn client(session: &mut Session, args: &[&[u8]], out: &mut Vec<u8>) {
    let sub = args[1];
    if sub.eq_ignore_ascii_case(b"SETNAME") && args.len() == 3 {
        if args[2].iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return reply::error(
                out,
                "ERR Client names cannot contain spaces, newlines or special characters.",
            );
        }
        session.name = Some(args[2].into());
        reply::simple(out, "OK");
    } else if sub.eq_ignore_ascii_case(b"GETNAME") && args.len() == 2 {
        match &session.name {
            Some(n) => reply::bulk(out, n),
            None => reply::null(out, session.resp3),
        }
    } else if sub.eq_ignore_ascii_case(b"SETINFO") && args.len() == 4 {
        reply::simple(out, "OK");
    } else if sub.eq_ignore_ascii_case(b"ID") && args.len() == 2 {
        reply::integer(out, session.id as i64);
    } else {
        let sub = String::from_utf8_lossy(sub);
        reply::error(
            out,
            &format!(
                "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try CLIENT HELP."
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_command_gets_redis_text() {
        let mut out = Vec::new();
        unknown_command(&[b"FLUSHALL", b"ASYNC"], &mut out);
        assert_eq!(
            out,
            b"-ERR unknown command 'FLUSHALL', with args beginning with: 'ASYNC' \r\n"
        );
        out.clear();
        unknown_command(&[b"foo"], &mut out);
        assert_eq!(
            out,
            b"-ERR unknown command 'foo', with args beginning with: \r\n"
        );
    }
}
