//! `SET` with its options, `INCRBY` and friends, and `PEXPIRE`/`EXPIRE`
//! with theirs, as Redis 7.0 parses and answers them.

use super::errors::{NOT_INT, SYNTAX, WRONGTYPE};
use super::keyspace::{Data, Entry};
use super::num::parse_int;
use super::resp::Reply;
use super::store::Ctx;

/// `SET`'s options, as Redis 7.0 collects them.
#[derive(Default)]
struct SetOptions<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    /// The expiry option (`EX`, `PX`, `EXAT`, `PXAT`) and its argument.
    expire: Option<(&'static str, &'a [u8])>,
}

/// Parses `SET`'s options; `None` is a syntax error. Each expiry option
/// excludes the others (and `KEEPTTL`) but may repeat, the last winning.
fn set_options(args: &[Vec<u8>]) -> Option<SetOptions<'_>> {
    let mut options = SetOptions::default();
    let mut at = 3;
    while at < args.len() {
        let option = args[at].to_ascii_uppercase();
        let next = args.get(at + 1);
        let other_expiry = |kind: &str| options.expire.is_some_and(|(k, _)| k != kind);
        match option.as_slice() {
            b"NX" if !options.xx => options.nx = true,
            b"XX" if !options.nx => options.xx = true,
            b"GET" => options.get = true,
            b"KEEPTTL" if options.expire.is_none() => options.keep_ttl = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT" => {
                let kind = match option.as_slice() {
                    b"EX" => "EX",
                    b"PX" => "PX",
                    b"EXAT" => "EXAT",
                    _ => "PXAT",
                };
                let next = next?;
                if options.keep_ttl || other_expiry(kind) {
                    return None;
                }
                options.expire = Some((kind, next.as_slice()));
                at += 1;
            }
            _ => return None,
        }
        at += 1;
    }
    Some(options)
}

/// The absolute expiry (unix ms) an expiry option asks for, or the error.
fn expiry_of(kind: &str, value: &[u8], now: i64) -> Result<i64, Reply> {
    let invalid = || Reply::err("ERR invalid expire time in 'set' command");
    let n = parse_int(value).ok_or_else(|| Reply::err(NOT_INT))?;
    let seconds = kind.starts_with('E');
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(invalid());
    }
    let ms = if seconds { n * 1000 } else { n };
    let at = if kind.ends_with("AT") {
        Some(ms)
    } else {
        ms.checked_add(now)
    };
    at.filter(|&at| at > 0).ok_or_else(invalid)
}

/// `SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT n|KEEPTTL]`.
pub fn set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(options) = set_options(args) else {
        return Reply::err(SYNTAX);
    };
    let now = ctx.now_ms;
    let expires_at = match options.expire {
        Some((kind, value)) => match expiry_of(kind, value, now) {
            Ok(at) => Some(at),
            Err(reply) => return reply,
        },
        None => None,
    };
    let key = &args[1];
    let old = ctx.keys().get(key, now).cloned();
    let old_value = match &old {
        None => Reply::Nil,
        Some(Entry {
            data: Data::Str(value),
            ..
        }) => Reply::bulk(value),
        Some(_) if options.get => return Reply::err(WRONGTYPE),
        Some(_) => Reply::Nil,
    };
    if (options.nx && old.is_some()) || (options.xx && old.is_none()) {
        return if options.get { old_value } else { Reply::Nil };
    }
    let kept = old.and_then(|e| e.expires_at).filter(|_| options.keep_ttl);
    let entry = Entry {
        data: Data::Str(args[2].clone()),
        expires_at: expires_at.or(kept),
    };
    ctx.keys().insert(key, entry);
    if options.get { old_value } else { Reply::ok() }
}

/// `INCR`, `DECR`, `INCRBY`, `DECRBY`: the value stays a string, its ttl
/// stays too.
pub fn incr(ctx: &mut Ctx<'_>, name: &str, args: &[Vec<u8>]) -> Reply {
    let delta = match name {
        "incr" => 1,
        "decr" => -1,
        _ => match parse_int(&args[2]) {
            Some(n) if name == "incrby" => n,
            Some(n) if n != i64::MIN => -n,
            Some(_) => return Reply::err("ERR decrement would overflow"),
            None => return Reply::err(NOT_INT),
        },
    };
    let now = ctx.now_ms;
    let key = &args[1];
    let (current, expires_at) = match ctx.keys().get(key, now) {
        None => (0, None),
        Some(Entry {
            data: Data::Str(value),
            expires_at,
        }) => match parse_int(value) {
            Some(n) => (n, *expires_at),
            None => return Reply::err(NOT_INT),
        },
        Some(_) => return Reply::err(WRONGTYPE),
    };
    let Some(value) = current.checked_add(delta) else {
        return Reply::err("ERR increment or decrement would overflow");
    };
    let entry = Entry {
        data: Data::Str(value.to_string().into_bytes()),
        expires_at,
    };
    ctx.keys().insert(key, entry);
    Reply::Int(value)
}

/// `PEXPIRE`/`EXPIRE key n [NX|XX|GT|LT]`.
pub fn expire(ctx: &mut Ctx<'_>, name: &str, args: &[Vec<u8>]) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                let option = String::from_utf8_lossy(option);
                return Reply::err(format!("ERR Unsupported option {option}"));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::err("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::err("ERR GT and LT options at the same time are not compatible");
    }
    let Some(n) = parse_int(&args[2]) else {
        return Reply::err(NOT_INT);
    };
    let invalid = || Reply::err(format!("ERR invalid expire time in '{name}' command"));
    let ms = if name == "expire" {
        match n.checked_mul(1000) {
            Some(ms) => ms,
            None => return invalid(),
        }
    } else {
        n
    };
    let now = ctx.now_ms;
    let Some(at) = ms.checked_add(now) else {
        return invalid();
    };
    let key = &args[1];
    let Some(entry) = ctx.keys().get_mut(key, now) else {
        return Reply::Int(0);
    };
    let current = entry.expires_at;
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| at <= c))
        || (lt && current.is_some_and(|c| at >= c));
    if refused {
        return Reply::Int(0);
    }
    if at <= now {
        ctx.keys().remove(key, now);
    } else {
        entry.expires_at = Some(at);
    }
    Reply::Int(1)
}
