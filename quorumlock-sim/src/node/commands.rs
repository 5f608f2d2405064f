//! The command table and the data commands on keys, with Redis 7.0's
//! replies.
//!
//! A command reaches [`run`] after its caller (a connection or a script)
//! checked its name and arity against [`lookup`]: connection and scripting
//! commands never get here.

use super::errors::{NOT_INT, SYNTAX, WRONGTYPE, unknown_subcommand, wrong_arity};
use super::keyspace::{Data, Entry, Keyspace};
use super::num::parse_int;
use super::resp::{Reply, count};
use super::store::{Ctx, DATABASES};
use super::zset;

/// A command: its name, arity (Redis' convention: `n` exactly, `-n` at
/// least) and whether scripts may call it.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Lowercase name.
    pub name: &'static str,
    /// Arguments including the name.
    pub arity: i32,
    /// Scripts may call it.
    pub in_scripts: bool,
}

impl Spec {
    /// Whether `argc` arguments (the name included) suit it.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = i32::try_from(argc).unwrap_or(i32::MAX);
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }
}

const fn spec(name: &'static str, arity: i32, in_scripts: bool) -> Spec {
    Spec {
        name,
        arity,
        in_scripts,
    }
}

/// Every command a node knows.
const SPECS: &[Spec] = &[
    spec("auth", -2, false),
    spec("client", -2, false),
    spec("cluster", -2, false),
    spec("config", -2, true),
    spec("dbsize", 1, true),
    spec("decr", 2, true),
    spec("decrby", 3, true),
    spec("del", -2, true),
    spec("echo", 2, true),
    spec("eval", -3, false),
    spec("evalsha", -3, false),
    spec("exists", -2, true),
    spec("expire", -3, true),
    spec("flushall", -1, true),
    spec("flushdb", -1, true),
    spec("get", 2, true),
    spec("hello", -1, false),
    spec("incr", 2, true),
    spec("incrby", 3, true),
    spec("info", -1, true),
    spec("keys", 2, true),
    spec("mget", -2, true),
    spec("persist", 2, true),
    spec("pexpire", -3, true),
    spec("ping", -1, true),
    spec("psubscribe", -2, false),
    spec("pttl", 2, true),
    spec("publish", 3, true),
    spec("punsubscribe", -1, false),
    spec("quit", -1, false),
    spec("script", -2, false),
    spec("select", 2, true),
    spec("set", -3, true),
    spec("subscribe", -2, false),
    spec("time", 1, true),
    spec("ttl", 2, true),
    spec("type", 2, true),
    spec("unlink", -2, true),
    spec("unsubscribe", -1, false),
    spec("wait", 3, false),
    spec("zadd", -4, true),
    spec("zcard", 2, true),
    spec("zpopmin", -2, true),
    spec("zrange", -4, true),
    spec("zrem", -3, true),
    spec("zremrangebyrank", 4, true),
    spec("zscore", 3, true),
];

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    let name = String::from_utf8_lossy(name).to_lowercase();
    SPECS.iter().find(|spec| spec.name == name)
}

/// Runs a data command (name checked, arity checked, lowercase `name`).
pub fn run(ctx: &mut Ctx<'_>, name: &str, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    match name {
        "ping" => match args {
            [_] => Reply::Status("PONG".to_owned()),
            [_, message] => Reply::bulk(message),
            _ => wrong_arity("ping"),
        },
        "echo" => Reply::bulk(&args[1]),
        "get" => get(ctx, &args[1]),
        "set" => super::strings::set(ctx, args),
        "mget" => Reply::Array(
            args[1..]
                .iter()
                .map(|k| get(ctx, k))
                .map(non_string_nil)
                .collect(),
        ),
        "del" | "unlink" => {
            let deleted = args[1..].iter().filter(|k| ctx.keys().remove(k, now)).count();
            ctx.wrote();
            count(deleted)
        }
        "exists" => count(
            args[1..]
                .iter()
                .filter(|k| ctx.keys().get(k, now).is_some())
                .count(),
        ),
        "type" => {
            let kind = ctx
                .keys()
                .get(&args[1], now)
                .map_or("none", |e| e.data.type_name());
            Reply::Status(kind.to_owned())
        }
        "incr" | "decr" | "incrby" | "decrby" => super::strings::incr(ctx, name, args),
        "pexpire" | "expire" => super::strings::expire(ctx, name, args),
        "pttl" | "ttl" => ttl(ctx, name == "ttl", &args[1]),
        "persist" => match ctx.keys().get_mut(&args[1], now) {
            Some(entry) if entry.expires_at.is_some() => {
                entry.expires_at = None;
                Reply::Int(1)
            }
            _ => Reply::Int(0),
        },
        "time" => time(ctx.now_us),
        "dbsize" => count(ctx.keys().live(now).count()),
        "keys" => {
            let pattern = &args[1];
            let keys = ctx.keys().live(now).map(|(k, _)| k);
            let matching = keys.filter(|k| super::keyspace::glob_match(pattern, k));
            Reply::Array(matching.map(Reply::bulk).collect())
        }
        "flushall" | "flushdb" => flush(ctx, name, args),
        "publish" => Reply::Int(ctx.store.channels.publish(&args[1], &args[2])),
        "select" => match parse_int(&args[1]) {
            None => Reply::err(NOT_INT),
            Some(db) if (0..DATABASES as i64).contains(&db) => {
                ctx.db = db as usize;
                Reply::ok()
            }
            Some(_) => Reply::err("ERR DB index is out of range"),
        },
        "info" => info(),
        "config" => config(args),
        "cluster" => Reply::err("ERR This instance has cluster support disabled"),
        _ => {
            let reply = zset::run(ctx, name, args);
            ctx.wrote();
            reply
        }
    }
}

/// `TIME`: seconds and microseconds of the node's clock.
fn time(now_us: i64) -> Reply {
    let (secs, micros) = (now_us.div_euclid(1_000_000), now_us.rem_euclid(1_000_000));
    Reply::Array(vec![
        Reply::bulk(secs.to_string()),
        Reply::bulk(micros.to_string()),
    ])
}

fn get(ctx: &mut Ctx<'_>, key: &[u8]) -> Reply {
    let now = ctx.now_ms;
    match ctx.keys().get(key, now) {
        None => Reply::Nil,
        Some(Entry {
            data: Data::Str(value),
            ..
        }) => Reply::bulk(value),
        Some(_) => Reply::err(WRONGTYPE),
    }
}

/// `MGET` gives nil for a key of another type, where `GET` fails.
fn non_string_nil(reply: Reply) -> Reply {
    match reply {
        Reply::Error(_) => Reply::Nil,
        other => other,
    }
}

fn ttl(ctx: &mut Ctx<'_>, seconds: bool, key: &[u8]) -> Reply {
    let now = ctx.now_ms;
    match ctx.keys().get(key, now) {
        None => Reply::Int(-2),
        Some(Entry { expires_at: None, .. }) => Reply::Int(-1),
        Some(Entry {
            expires_at: Some(at), ..
        }) => {
            let ms = (at - now).max(0);
            Reply::Int(if seconds { (ms + 500) / 1000 } else { ms })
        }
    }
}

fn flush(ctx: &mut Ctx<'_>, name: &str, args: &[Vec<u8>]) -> Reply {
    let mode_ok = match args {
        [_] => true,
        [_, mode] => mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync"),
        _ => false,
    };
    if !mode_ok {
        return Reply::err(SYNTAX);
    }
    if name == "flushall" {
        ctx.store.dbs.iter_mut().for_each(Keyspace::clear);
    } else {
        ctx.keys().clear();
    }
    Reply::ok()
}

/// Enough of `INFO` for a client that looks at the version and role.
fn info() -> Reply {
    let text = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\r\n\
                # Persistence\r\nloading:0\r\n\r\n\
                # Replication\r\nrole:master\r\nconnected_slaves:0\r\n";
    Reply::bulk(text)
}

/// `CONFIG GET` knows no parameter here: Redis replies an empty list for
/// a parameter it does not have.
fn config(args: &[Vec<u8>]) -> Reply {
    match args.get(1) {
        Some(sub) if sub.eq_ignore_ascii_case(b"get") => {
            if args.len() < 3 {
                wrong_arity("config|get")
            } else {
                Reply::Array(Vec::new())
            }
        }
        Some(sub) => unknown_subcommand("config", sub),
        None => wrong_arity("config"),
    }
}
