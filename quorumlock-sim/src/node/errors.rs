//! Redis 7.0's error replies that more than one command family sends, in
//! its words (the differential test compares them with `redis-server`'s).

use super::resp::Reply;

/// `WRONGTYPE`.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// A bad integer argument.
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
/// A bad option.
pub const SYNTAX: &str = "ERR syntax error";

/// Redis' reply to a command it does not know.
pub fn unknown_command(args: &[Vec<u8>]) -> Reply {
    let mut quoted = String::new();
    for arg in args.iter().skip(1) {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        let text = String::from_utf8_lossy(arg);
        let cut: String = text.chars().take(room).collect();
        quoted.push_str(&format!("'{cut}' "));
    }
    let name: String = args
        .first()
        .map(|n| String::from_utf8_lossy(n).chars().take(128).collect())
        .unwrap_or_default();
    Reply::err(format!(
        "ERR unknown command '{name}', with args beginning with: {quoted}"
    ))
}

/// Redis' reply to a wrong number of arguments (`name`: `get`, `script|load`).
pub fn wrong_arity(name: &str) -> Reply {
    Reply::err(format!("ERR wrong number of arguments for '{name}' command"))
}

/// Redis' reply to an unknown subcommand of `command`.
pub fn unknown_subcommand(command: &str, sub: &[u8]) -> Reply {
    let sub = String::from_utf8_lossy(sub);
    Reply::err(format!(
        "ERR unknown subcommand '{sub}'. Try {} HELP.",
        command.to_uppercase()
    ))
}
