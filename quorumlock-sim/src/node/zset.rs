//! The sorted-set commands the hand-off queues use (`ZADD`, `ZREM`,
//! `ZCARD`, `ZSCORE`, `ZRANGE`, `ZPOPMIN`, `ZREMRANGEBYRANK`), as Redis 7.0
//! parses and answers them.

use super::errors::{self, NOT_INT, SYNTAX, WRONGTYPE};
use super::keyspace::{Data, Entry, ZSet};
use super::num::{format_double, parse_float, parse_int};
use super::resp::{Reply, count};
use super::store::Ctx;

const NOT_FLOAT: &str = "ERR value is not a valid float";

/// Runs a sorted-set command (name and arity checked).
pub fn run(ctx: &mut Ctx<'_>, name: &str, args: &[Vec<u8>]) -> Reply {
    match name {
        "zadd" => zadd(ctx, args),
        "zrem" => with_zset(ctx, &args[1], Reply::Int(0), |zset| {
            count(args[2..].iter().filter(|m| zset.remove(m)).count())
        }),
        "zcard" => with_zset(ctx, &args[1], Reply::Int(0), |zset| count(zset.len())),
        "zscore" => with_zset(ctx, &args[1], Reply::Nil, |zset| {
            zset.score(&args[2])
                .map_or(Reply::Nil, |s| Reply::bulk(format_double(s)))
        }),
        "zrange" => zrange(ctx, args),
        "zpopmin" => zpopmin(ctx, args),
        "zremrangebyrank" => {
            let (Some(start), Some(stop)) = (parse_int(&args[2]), parse_int(&args[3])) else {
                return Reply::err(NOT_INT);
            };
            with_zset(ctx, &args[1], Reply::Int(0), |zset| {
                match ranks(zset.len(), start, stop) {
                    Some((start, stop)) => {
                        let doomed = zset.range(start, stop);
                        doomed.iter().for_each(|(member, _)| {
                            zset.remove(member);
                        });
                        count(doomed.len())
                    }
                    None => Reply::Int(0),
                }
            })
        }
        _ => errors::unknown_command(args),
    }
}

/// Runs `f` on the sorted set at `key` (deleting the key if `f` empties
/// it), `missing` if there is none, `WRONGTYPE` if it holds another type.
fn with_zset(ctx: &mut Ctx<'_>, key: &[u8], missing: Reply, f: impl FnOnce(&mut ZSet) -> Reply) -> Reply {
    let now = ctx.now_ms;
    let reply = match ctx.keys().get_mut(key, now) {
        None => return missing,
        Some(Entry {
            data: Data::ZSet(zset),
            ..
        }) => f(zset),
        Some(_) => return Reply::err(WRONGTYPE),
    };
    let emptied = matches!(ctx.keys().get(key, now), Some(Entry { data: Data::ZSet(z), .. }) if z.is_empty());
    if emptied {
        ctx.keys().remove(key, now);
    }
    reply
}

/// Ranks `start..=stop` (negative from the end) clamped to a set of
/// `len`, or `None` when the range is empty.
fn ranks(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop.min(len - 1) as usize))
}

#[derive(Default)]
struct ZaddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

fn zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut flags = ZaddFlags::default();
    let mut at = 2;
    while let Some(option) = args.get(at) {
        let flag = match option.to_ascii_uppercase().as_slice() {
            b"NX" => &mut flags.nx,
            b"XX" => &mut flags.xx,
            b"GT" => &mut flags.gt,
            b"LT" => &mut flags.lt,
            b"CH" => &mut flags.ch,
            b"INCR" => &mut flags.incr,
            _ => break,
        };
        *flag = true;
        at += 1;
    }
    let pairs = &args[at..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Reply::err(SYNTAX);
    }
    if flags.nx && flags.xx {
        return Reply::err("ERR XX and NX options at the same time are not compatible");
    }
    if (flags.gt || flags.lt) && flags.nx || flags.gt && flags.lt {
        return Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if flags.incr && pairs.len() > 2 {
        return Reply::err("ERR INCR option supports a single increment-element pair");
    }
    let mut elements = Vec::new();
    for pair in pairs.chunks_exact(2) {
        match parse_float(&pair[0]) {
            Some(score) => elements.push((score, &pair[1])),
            None => return Reply::err(NOT_FLOAT),
        }
    }
    let now = ctx.now_ms;
    let key = &args[1];
    match ctx.keys().get(key, now) {
        Some(Entry {
            data: Data::ZSet(_), ..
        }) => {}
        Some(_) => return Reply::err(WRONGTYPE),
        None if flags.xx => return if flags.incr { Reply::Nil } else { Reply::Int(0) },
        None => {
            let entry = Entry {
                data: Data::ZSet(ZSet::default()),
                expires_at: None,
            };
            ctx.keys().insert(key, entry);
        }
    }
    let missing = Reply::err("ERR no such key");
    with_zset(ctx, key, missing, |zset| add_all(zset, &flags, &elements))
}

fn add_all(zset: &mut ZSet, flags: &ZaddFlags, elements: &[(f64, &Vec<u8>)]) -> Reply {
    let (mut added, mut updated, mut last) = (0, 0, None);
    for &(score, member) in elements {
        match zset.score(member) {
            Some(_) if flags.nx => {}
            Some(current) => {
                let score = if flags.incr { score + current } else { score };
                if score.is_nan() {
                    return Reply::err("ERR resulting score is not a number (NaN)");
                }
                if (flags.lt && score >= current) || (flags.gt && score <= current) {
                    continue;
                }
                last = Some(score);
                if score != current {
                    zset.insert(member, score);
                    updated += 1;
                }
            }
            None if flags.xx => {}
            None => {
                zset.insert(member, score);
                added += 1;
                last = Some(score);
            }
        }
    }
    if flags.incr {
        last.map_or(Reply::Nil, |s| Reply::bulk(format_double(s)))
    } else {
        Reply::Int(if flags.ch { added + updated } else { added })
    }
}

fn zpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() > 3 {
        return Reply::err(SYNTAX);
    }
    let count = match args.get(2).map(|c| parse_int(c)) {
        None => 1,
        Some(None) => return Reply::err(NOT_INT),
        Some(Some(n)) if n < 0 => return Reply::err("ERR value is out of range, must be positive"),
        Some(Some(n)) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    // A count of 0 pops nothing, but only after the key's type is checked.
    with_zset(ctx, &args[1], Reply::Array(Vec::new()), |zset| {
        if count == 0 {
            return Reply::Array(Vec::new());
        }
        let popped = zset.range(0, count.min(zset.len()) - 1);
        let mut out = Vec::new();
        for (member, score) in popped {
            zset.remove(&member);
            out.push(Reply::Bulk(member));
            out.push(Reply::bulk(format_double(score)));
        }
        Reply::Array(out)
    })
}

/// A `BYSCORE` bound: `(x` is exclusive.
fn score_bound(text: &[u8]) -> Option<(f64, bool)> {
    match text.strip_prefix(b"(") {
        Some(rest) => parse_float(rest).map(|x| (x, true)),
        None => parse_float(text).map(|x| (x, false)),
    }
}

#[derive(Default)]
struct RangeOptions {
    scores: bool,
    rev: bool,
    with_scores: bool,
    limit: Option<(i64, i64)>,
}

fn zrange_options(args: &[Vec<u8>]) -> Result<RangeOptions, Reply> {
    let mut options = RangeOptions::default();
    let mut at = 4;
    while let Some(option) = args.get(at) {
        match option.to_ascii_uppercase().as_slice() {
            b"WITHSCORES" => options.with_scores = true,
            b"LIMIT" if args.len() - at > 2 => {
                match (parse_int(&args[at + 1]), parse_int(&args[at + 2])) {
                    (Some(offset), Some(count)) => options.limit = Some((offset, count)),
                    _ => return Err(Reply::err(NOT_INT)),
                }
                at += 2;
            }
            b"REV" if !options.rev => options.rev = true,
            b"BYSCORE" if !options.scores => options.scores = true,
            b"BYLEX" => return Err(Reply::err("ERR BYLEX is not supported by the simulated node")),
            _ => return Err(Reply::err(SYNTAX)),
        }
        at += 1;
    }
    if options.limit.is_some() && !options.scores {
        return Err(Reply::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    Ok(options)
}

/// What a `ZRANGE` picks from a set: members and scores, in reply order.
type Selection = Box<dyn Fn(&ZSet) -> Vec<(Vec<u8>, f64)>>;

fn zrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let options = match zrange_options(args) {
        Ok(options) => options,
        Err(reply) => return reply,
    };
    let selected: Selection = if options.scores {
        let (min, max) = if options.rev {
            (&args[3], &args[2])
        } else {
            (&args[2], &args[3])
        };
        let (Some(min), Some(max)) = (score_bound(min), score_bound(max)) else {
            return Reply::err("ERR min or max is not a float");
        };
        let (rev, limit) = (options.rev, options.limit);
        Box::new(move |zset| by_score(zset, min, max, rev, limit))
    } else {
        let (Some(start), Some(stop)) = (parse_int(&args[2]), parse_int(&args[3])) else {
            return Reply::err(NOT_INT);
        };
        let rev = options.rev;
        Box::new(move |zset| by_rank(zset, start, stop, rev))
    };
    let with_scores = options.with_scores;
    with_zset(ctx, &args[1], Reply::Array(Vec::new()), |zset| {
        let mut out = Vec::new();
        for (member, score) in selected(zset) {
            out.push(Reply::Bulk(member));
            if with_scores {
                out.push(Reply::bulk(format_double(score)));
            }
        }
        Reply::Array(out)
    })
}

fn by_rank(zset: &ZSet, start: i64, stop: i64, rev: bool) -> Vec<(Vec<u8>, f64)> {
    let len = zset.len();
    match ranks(len, start, stop) {
        None => Vec::new(),
        Some((start, stop)) if rev => {
            let mut items = zset.range(len - 1 - stop, len - 1 - start);
            items.reverse();
            items
        }
        Some((start, stop)) => zset.range(start, stop),
    }
}

fn by_score(
    zset: &ZSet,
    (min, min_open): (f64, bool),
    (max, max_open): (f64, bool),
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Vec<(Vec<u8>, f64)> {
    if zset.is_empty() {
        return Vec::new();
    }
    let mut items = zset.range(0, zset.len() - 1);
    items.retain(|&(_, s)| {
        (if min_open { s > min } else { s >= min }) && (if max_open { s < max } else { s <= max })
    });
    if rev {
        items.reverse();
    }
    match limit {
        Some((offset, _)) if offset < 0 => Vec::new(),
        Some((offset, count)) => {
            let skipped = items
                .into_iter()
                .skip(usize::try_from(offset).unwrap_or(usize::MAX));
            match usize::try_from(count) {
                Ok(count) => skipped.take(count).collect(),
                Err(_) => skipped.collect(),
            }
        }
        None => items,
    }
}
