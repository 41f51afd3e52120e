//! The one table of commands: name, arity, admission class, the role a
//! token needs, and the metric label. Dispatch, auth, admission, `COMMAND`
//! and the metrics read it (as the gRPC side reads `methods.rs`).

use uuidmap_server::methods::{Class, Role};

/// Which command a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// `PING [message]`.
    Ping,
    /// `ECHO message`.
    Echo,
    /// `GET key`.
    Get,
    /// `MGET key [key ...]`.
    MGet,
    /// `EXISTS key [key ...]`.
    Exists,
    /// `SET key value [NX|XX|IFEQ old]`.
    Set,
    /// `DEL key [key ...]`.
    Del,
    /// `DELIFEQ key old` (Valkey 9.0).
    DelIfEq,
    /// `WAIT numreplicas timeout`.
    Wait,
    /// `MSET key value [key value ...]`.
    MSet,
    /// `DBSIZE`.
    DbSize,
    /// `SCAN cursor [COUNT n]`.
    Scan,
    /// `INFO [section]`.
    Info,
    /// `COMMAND [COUNT|DOCS|INFO ...]`.
    Command,
    /// `CLIENT SETNAME|GETNAME|SETINFO|ID ...`.
    Client,
    /// `SELECT 0`.
    Select,
    /// `QUIT`.
    Quit,
    /// `HELLO [2|3 [AUTH user token] [SETNAME name]]`.
    Hello,
    /// `AUTH [user] token`.
    Auth,
}

/// One command.
#[derive(Debug)]
pub struct Command {
    /// Its name, lower case (as `COMMAND` answers it, and its metric label).
    pub name: &'static str,
    /// Which command it is.
    pub which: Which,
    /// Redis's arity: `n` exactly `n` arguments (the name included), `-n`
    /// at least `n`.
    pub arity: i64,
    /// The admission class whose permit it takes; `None`: none (it does
    /// no work on the index).
    pub class: Option<Class>,
    /// The role a token needs; `None`: allowed before `AUTH`.
    pub role: Option<Role>,
    /// Whether it changes the map (`COMMAND`'s `write` flag).
    pub writes: bool,
}

const fn row(
    name: &'static str,
    which: Which,
    arity: i64,
    class: Option<Class>,
    role: Option<Role>,
) -> Command {
    Command {
        name,
        which,
        arity,
        class,
        role,
        writes: matches!(class, Some(Class::Write)),
    }
}

const READ: Option<Class> = Some(Class::Read);
const WRITE: Option<Class> = Some(Class::Write);

/// Every command. PING is a read, as gRPC's Ping is: it pays the same
/// admission as GET, so that comparing them measures the framework.
pub const COMMANDS: &[Command] = &[
    row("get", Which::Get, 2, READ, Some(Role::Read)),
    row("mget", Which::MGet, -2, READ, Some(Role::Read)),
    row("exists", Which::Exists, -2, READ, Some(Role::Read)),
    row("set", Which::Set, -3, WRITE, Some(Role::Write)),
    row("del", Which::Del, -2, WRITE, Some(Role::Write)),
    row("delifeq", Which::DelIfEq, 3, WRITE, Some(Role::Write)),
    // No permit: it only waits, holding its own connection.
    row("wait", Which::Wait, 3, None, Some(Role::Read)),
    row("mset", Which::MSet, -3, WRITE, Some(Role::Write)),
    row("ping", Which::Ping, -1, READ, Some(Role::Read)),
    // `redis-cli --pipe` ends its stream with an ECHO and waits for it.
    row("echo", Which::Echo, 2, None, Some(Role::Read)),
    row("dbsize", Which::DbSize, 1, READ, Some(Role::Read)),
    row("scan", Which::Scan, -2, Some(Class::Scan), Some(Role::Read)),
    row("info", Which::Info, -1, READ, Some(Role::Read)),
    row("command", Which::Command, -1, None, Some(Role::Read)),
    row("client", Which::Client, -2, None, Some(Role::Read)),
    row("select", Which::Select, 2, None, Some(Role::Read)),
    row("quit", Which::Quit, -1, None, None),
    row("hello", Which::Hello, -1, None, None),
    row("auth", Which::Auth, -2, None, None),
];

/// The row of the command named `name` (any case), and its position.
pub fn lookup(name: &[u8]) -> Option<(usize, &'static Command)> {
    COMMANDS
        .iter()
        .enumerate()
        .find(|(_, c)| c.name.as_bytes().eq_ignore_ascii_case(name))
}

impl Command {
    /// Whether `argc` arguments (the name included) fit its arity.
    pub fn arity_fits(&self, argc: usize) -> bool {
        let argc = argc as i64;
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_one_row_found_in_any_case() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert_eq!(lookup(c.name.to_uppercase().as_bytes()).unwrap().0, i);
            assert_eq!(c.name, c.name.to_lowercase());
        }
        assert!(lookup(b"flushall").is_none());
    }

    #[test]
    fn only_the_handshake_commands_need_no_token_and_writes_need_write() {
        for c in COMMANDS {
            let handshake = matches!(c.which, Which::Quit | Which::Hello | Which::Auth);
            assert_eq!(c.role.is_none(), handshake, "{}", c.name);
            if c.writes {
                assert_eq!(c.role, Some(Role::Write), "{}", c.name);
            }
        }
    }
}
