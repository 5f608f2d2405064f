//! Every command the library sends a lock node, what it is needed for, and
//! how `quorumlock check` tries it as the node's user.
//!
//! A node's ACL may deny any single command, and what that breaks depends on
//! which part of the library sends it ([`Need`]). This list is the one place
//! that says so: `check` tries every command on it (with the probe that
//! the wire layer builds from it) and explains what the absence of each
//! costs. The tests below hold it against the wire layer: every command a
//! script ([`SCRIPTS`](super::SCRIPTS)) calls is tried inside the probe
//! script, the way a script runs it, and every command the library builds or
//! sends through the pub/sub client is listed.
//!
//! Not listed: what the redis client sends by itself on connecting (`HELLO`,
//! `AUTH`, `SELECT`, `CLIENT SETINFO`), and the fenced write's `EVAL`, which
//! goes to the caller's own data store, not to a lock node.

/// What the library needs a command for, which decides how much its
/// absence matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Every lock: without it the node can take no part in locks.
    Lock,
    /// The hand-off to waiters; without it they poll.
    Handoff,
    /// Replica-acknowledged locks (opt-in).
    ReplicaAck,
    /// Redis Cluster members: without it a cluster member finds no primary.
    Cluster,
    /// The operator tools: `status` and `unlock`.
    Operator,
    /// Only `check`'s own view of the node; the library never sends it.
    Check,
}

/// How `check` tries a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tried {
    /// Inside the probe script, as `try(name, <these arguments>)`: a `pcall`
    /// on the probe's keys (`KEYS[1]` a lock key, `KEYS[2]` its queue key)
    /// with `ARGV[1]` a token, `ARGV[2]` a ttl in ms, `ARGV[3]` a wake-up
    /// channel. Every command a script calls is tried so, since Redis checks
    /// a script's commands one by one as they run.
    InScript(&'static str),
    /// Sent alone, the way the library sends it.
    Alone,
}

/// One command: its name, what it is needed for and how `check` tries it.
#[derive(Clone, Copy, Debug)]
pub struct Command {
    /// The name as Redis spells it, a subcommand after a space
    /// (`SCRIPT LOAD`).
    pub name: &'static str,
    /// What its absence breaks.
    pub need: Need,
    /// What uses it, for people: "releases delete the key with it".
    pub why: &'static str,
    /// How `check` tries it.
    pub tried: Tried,
}

impl Command {
    /// The command (and subcommand), ready for its arguments.
    pub fn cmd(&self) -> redis::Cmd {
        let mut words = self.name.split(' ');
        let mut cmd = redis::cmd(words.next().unwrap_or_default());
        for word in words {
            cmd.arg(word);
        }
        cmd
    }

    /// The ACL rule that allows it: `+set`, `+script|load`.
    pub fn acl_rule(&self) -> String {
        format!("+{}", self.name.to_lowercase().replace(' ', "|"))
    }

    /// The command of `COMMANDS` named `name`.
    pub fn named(name: &str) -> Option<&'static Command> {
        COMMANDS.iter().find(|command| command.name == name)
    }
}

/// Declares each command as a constant (documented by its use) and
/// [`COMMANDS`] as all of them, in the order `check` tries them.
macro_rules! commands {
    ($($id:ident = $name:literal, $need:ident, $tried:expr, $why:literal;)*) => {
        $(
            #[doc = concat!("`", $name, "`: ", $why, ".")]
            pub const $id: Command = Command {
                name: $name,
                need: Need::$need,
                why: $why,
                tried: $tried,
            };
        )*
        /// Every command the library sends a lock node, and the two `check`
        /// sends for its own view.
        pub const COMMANDS: &[Command] = &[$($id),*];
    };
}

use Tried::{Alone, InScript};

commands! {
    SCRIPT_LOAD = "SCRIPT LOAD", Lock, Alone, "every connection loads the lock scripts with it";
    EVALSHA = "EVALSHA", Lock, Alone, "releases, renewals and multi-key acquires call scripts with it";
    SET = "SET", Lock, InScript("KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]"),
        "locks are taken with SET key token NX PX ttl";
    GET = "GET", Lock, InScript("KEYS[1]"), "releases and renewals check the owner with it";
    DEL = "DEL", Lock, InScript("KEYS[1]"), "releases delete the key with it";
    EXISTS = "EXISTS", Lock, InScript("KEYS[1]"), "multi-key acquires check their keys with it";
    MGET = "MGET", Lock, InScript("KEYS[1]"), "batched releases read their keys with it";
    PEXPIRE = "PEXPIRE", Lock, InScript("KEYS[1], ARGV[2]"), "renewals extend the key with it";
    PTTL = "PTTL", Lock, InScript("KEYS[1]"), "a waiting lock's attempts keep its queue alive with it";
    TIME = "TIME", Lock, InScript(""),
        "renewals and fenced locks read the node's clock (and its rate) with it, and fail without it";
    ZADD = "ZADD", Handoff, InScript("KEYS[2], 'NX', 1, ARGV[1]"), "waiters queue with it";
    ZREM = "ZREM", Handoff, InScript("KEYS[2], ARGV[1]"), "waiters leave their queue with it";
    ZPOPMIN = "ZPOPMIN", Handoff, InScript("KEYS[2]"), "releases pop the next waiter with it";
    ZRANGE = "ZRANGE", Lock, InScript("KEYS[2], 0, 0"),
        "a release whose next waiter left looks further down the queue with it, and fails without it";
    ZREMRANGEBYRANK = "ZREMRANGEBYRANK", Lock, InScript("KEYS[2], 0, 0"),
        "a release drops waiters that left the queue with it, and fails without it";
    PUBLISH = "PUBLISH", Handoff, InScript("ARGV[3], ARGV[1]"), "releases wake the next waiter with it";
    SUBSCRIBE = "SUBSCRIBE", Handoff, Alone, "waiters listen for wake-ups with it";
    UNSUBSCRIBE = "UNSUBSCRIBE", Handoff, Alone, "idle wake-up connections leave their channel with it";
    PING = "PING", Handoff, Alone, "idle wake-up connections are checked with it";
    WAIT = "WAIT", ReplicaAck, Alone, "replica-acknowledged locks wait for replicas with it";
    CLUSTER_SLOTS = "CLUSTER SLOTS", Cluster, Alone, "a Redis Cluster member learns which primary serves which slot with it";
    TYPE = "TYPE", Operator, InScript("KEYS[1]"),
        "status and unlock tell a lock's token from other data with it";
    ZCARD = "ZCARD", Operator, InScript("KEYS[2]"), "status counts a lock's waiters with it";
    UNLINK = "UNLINK", Operator, InScript("KEYS[1]"), "unlock --force deletes whatever holds a key with it";
    INFO = "INFO", Check, Alone, "this check reads version, role and persistence with it";
    CONFIG_GET = "CONFIG GET", Check, Alone, "this check reads persistence and eviction settings with it";
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;
    use crate::backend::redlock::wire::SCRIPTS;

    /// Commands the library sends that are not a lock node's: the fenced
    /// write's `EVAL` goes to the caller's data store.
    const NOT_TO_NODES: &[&str] = &["EVAL"];

    /// The pub/sub client's methods, and the commands they send.
    const PUBSUB_METHODS: &[(&str, &str)] = &[
        (".subscribe(", "SUBSCRIBE"),
        (".unsubscribe(", "UNSUBSCRIBE"),
        (".psubscribe(", "PSUBSCRIBE"),
        (".punsubscribe(", "PUNSUBSCRIBE"),
        (".ping(", "PING"),
        (".ping::<", "PING"),
    ];

    /// The text of every `.rs` file under `dir` of this crate, without its
    /// test module (which ends each file that has one).
    fn sources(dir: &str) -> Vec<(String, String)> {
        fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
            for entry in std::fs::read_dir(dir).expect("a source directory") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|ext| ext == "rs") {
                    let text = std::fs::read_to_string(&path).expect("a source file");
                    let code = text.split("\n#[cfg(test)]").next().unwrap_or_default();
                    out.push((path.display().to_string(), code.to_owned()));
                }
            }
        }
        let mut out = Vec::new();
        walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut out);
        assert!(!out.is_empty(), "no sources under {dir}");
        out
    }

    /// The commands a Lua script calls: every `redis.call` and
    /// `redis.pcall`, whose command must be a literal.
    fn script_calls(source: &str) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for marker in ["redis.call(", "redis.pcall("] {
            for (at, _) in source.match_indices(marker) {
                let rest = &source[at + marker.len()..];
                let quote = rest.chars().next().filter(|c| matches!(c, '\'' | '"'));
                let quote =
                    quote.unwrap_or_else(|| panic!("a command named by a literal: {marker}{rest:.30}"));
                let name = rest[1..].split(quote).next().unwrap_or_default();
                names.insert(name.to_uppercase());
            }
        }
        names
    }

    /// The commands the Rust code in `text` sends: each `cmd("NAME")` or
    /// `command("NAME")`, with the first literal argument after it as a
    /// possible subcommand, and each pub/sub client method.
    fn sent_commands(text: &str) -> Vec<(String, Option<String>)> {
        let mut sent = Vec::new();
        for marker in ["cmd(\"", "command(\""] {
            for (at, _) in text.match_indices(marker) {
                let rest = &text[at + marker.len()..];
                let name = rest.split('"').next().unwrap_or_default();
                let window = &rest[..rest.len().min(80)];
                let sub = window.split(".arg(\"").nth(1).and_then(|s| s.split('"').next());
                sent.push((name.to_owned(), sub.map(str::to_owned)));
            }
        }
        for (method, name) in PUBSUB_METHODS {
            if text.contains(method) {
                sent.push(((*name).to_owned(), None));
            }
        }
        sent
    }

    /// The names in `SCRIPTS`, in its order, as its definition spells them
    /// (`&lock::ACQUIRE` is `ACQUIRE`).
    fn listed_scripts() -> Vec<String> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/backend/redlock/wire/mod.rs"
        ))
        .expect("the wire layer's mod.rs");
        let list = text.split("static SCRIPTS").nth(1).expect("SCRIPTS in mod.rs");
        let list = list.split("];").next().unwrap_or_default();
        let names: Vec<String> = list
            .lines()
            .filter_map(|line| line.trim().strip_prefix('&'))
            .filter_map(|entry| entry.trim_end_matches(',').rsplit("::").next())
            .map(str::to_owned)
            .collect();
        assert_eq!(names.len(), SCRIPTS.len(), "one script per line: {names:?}");
        names
    }

    /// A script added to this layer without a place in `SCRIPTS` would be
    /// neither loaded on connections nor probed by `check`.
    #[test]
    fn every_script_of_the_wire_layer_is_listed() {
        let mut declared = BTreeSet::new();
        for (file, text) in sources("src/backend/redlock/wire") {
            for (at, _) in text.match_indices("script! {") {
                let line = text[at..]
                    .lines()
                    .skip(1)
                    .map(str::trim)
                    .find(|line| !line.starts_with("///") && !line.starts_with("#["));
                let name = line.and_then(|line| line.split(' ').next());
                let name = name.unwrap_or_else(|| panic!("a script! without a name in {file}"));
                declared.insert(name.to_owned());
            }
        }
        let listed: BTreeSet<String> = listed_scripts().into_iter().collect();
        assert!(
            declared.contains("RELEASE"),
            "the scan finds the scripts: {declared:?}"
        );
        assert_eq!(declared, listed, "every script! in SCRIPTS, and no other");
    }

    /// `check` tries every command a script calls inside its probe script
    /// (which has a `try` line for each command tried so: see the probe's
    /// tests), where Redis checks the ACL the way it does for the lock
    /// scripts.
    #[test]
    fn every_command_a_script_calls_is_tried_in_the_probe_script() {
        for (script, name) in SCRIPTS.iter().zip(listed_scripts()) {
            let calls = script_calls(script.source);
            assert!(!calls.is_empty(), "{name} calls no command?");
            for command in calls {
                let tried = Command::named(&command).map(|c| c.tried);
                assert!(
                    matches!(tried, Some(Tried::InScript(_))),
                    "{name} calls {command}, which `quorumlock check` does not try in its probe script: \
                     add it to COMMANDS, tried InScript"
                );
            }
        }
    }

    /// Every command the library sends a node is on the list, with its
    /// subcommand when it has one (`SCRIPT LOAD`).
    #[test]
    fn every_command_the_library_sends_is_listed() {
        let mut found = BTreeSet::new();
        for (file, text) in sources("src") {
            for (name, sub) in sent_commands(&text) {
                if NOT_TO_NODES.contains(&name.as_str()) {
                    continue;
                }
                let with_sub = sub.map(|sub| format!("{name} {sub}"));
                let listed = with_sub
                    .iter()
                    .chain([&name])
                    .find(|name| Command::named(name).is_some());
                let listed = listed.unwrap_or_else(|| {
                    panic!("{file} sends {name}, which `quorumlock check` does not try: add it to COMMANDS")
                });
                found.insert(listed.clone());
            }
        }
        for expected in [
            "SCRIPT LOAD",
            "EVALSHA",
            "SET",
            "TIME",
            "WAIT",
            "SUBSCRIBE",
            "UNSUBSCRIBE",
            "PING",
        ] {
            assert!(found.contains(expected), "the scan finds {expected}: {found:?}");
        }
    }

    /// No command stays on the list after the library stopped sending it:
    /// `check` would demand a permission nothing needs.
    #[test]
    fn every_listed_command_is_sent() {
        let mut sent: BTreeSet<String> = SCRIPTS.iter().flat_map(|s| script_calls(s.source)).collect();
        for (_, text) in sources("src") {
            for (name, sub) in sent_commands(&text) {
                sent.extend(sub.map(|sub| format!("{name} {sub}")));
                sent.insert(name);
            }
        }
        for command in COMMANDS.iter().filter(|c| c.need != Need::Check) {
            assert!(sent.contains(command.name), "nothing sends {}", command.name);
        }
    }

    #[test]
    fn commands_are_built_and_allowed_by_their_names() {
        let args: Vec<_> = CONFIG_GET.cmd().args_iter().map(|a| format!("{a:?}")).collect();
        assert_eq!(args.len(), 2, "CONFIG and GET: {args:?}");
        assert_eq!(CONFIG_GET.acl_rule(), "+config|get");
        assert_eq!(SET.acl_rule(), "+set");
        assert_eq!(Command::named("ZADD").map(|c| c.need), Some(Need::Handoff));
        let names: BTreeSet<&str> = COMMANDS.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), COMMANDS.len(), "each command once");
    }
}
