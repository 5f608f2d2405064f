//! A node's scripting: one Lua 5.1 state with the script cache, the
//! `redis` library the scripts call, and the conversions between Lua
//! values and replies that Redis 7.0 makes.
//!
//! Scripts see what Redis 7.0 gives them: the base library (without file
//! access), `string`, `table`, `math` (its `random` Redis' own generator,
//! reseeded for every script), `redis`, `KEYS` and `ARGV`; a read of an
//! unknown global and any write to a global are errors.

use std::collections::BTreeMap;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use super::commands;
use super::num::format_double;
use super::resp::Reply;
use super::store::{Ctx, Store};

/// What the `redis` library runs a script's commands against, handed to
/// the Lua state for the duration of one script.
pub struct ScriptCtx {
    /// The node's data.
    pub store: Store,
    /// The database the script started in (`SELECT` in a script changes it
    /// for the script only).
    pub db: usize,
    /// The node's clock at the start of the script (unix ms): time stands
    /// still for key expiry while a script runs, as in Redis 7.0.
    pub now_ms: i64,
    /// The same in µs, for `TIME`.
    pub now_us: i64,
}

impl ScriptCtx {
    /// The context of a script run on `store`.
    pub fn new(store: Store, db: usize, now_ms: i64, now_us: i64) -> ScriptCtx {
        ScriptCtx {
            store,
            db,
            now_ms,
            now_us,
        }
    }
}

/// `lrand48`'s state after `srand48(0)`. Redis 7.0 keeps one generator
/// for the life of its Lua state; so does the node, from this seed, so
/// that `math.random` gives the same numbers on every run of a simulation.
const LRAND48_SEED: u64 = 0x330E;

/// `math.random`'s state (Redis' `lrand48`), kept in the Lua state.
struct Lrand48(u64);

/// An error `redis.call` raises: the failed command's error reply and
/// where the script called it. Carried through Lua as an opaque error and
/// turned back into Redis' error table by the error handler.
#[derive(Debug)]
struct Raised {
    text: String,
    source: Option<String>,
    line: Option<i64>,
}

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Raised {}

/// The error table of a [`Raised`] error (`{err=..., source=..., line=...}`),
/// or nil for any other error.
fn raised_table(lua: &Lua, error: Value) -> mlua::Result<Value> {
    let Value::Error(error) = error else {
        return Ok(Value::Nil);
    };
    let Some(raised) = error.downcast_ref::<Raised>() else {
        return Ok(Value::Nil);
    };
    let table = lua.create_table()?;
    table.raw_set("err", raised.text.as_str())?;
    table.raw_set("source", raised.source.as_deref())?;
    table.raw_set("line", raised.line)?;
    Ok(Value::Table(table))
}

/// The environment, the `redis` library and the error handler, in Lua:
/// kept in Lua so that an error raised by `redis.call` is the error table
/// itself, as Redis raises it.
const SETUP: &str = include_str!("setup.lua");

/// The chunk name Redis 7.0 compiles scripts under.
const SCRIPT_CHUNK: &str = "@user_script";
/// The chunk name of [`SETUP`], whose frames an error's location skips.
const SETUP_CHUNK: &str = "=quorumlock_sim";

/// A node's Lua state and script cache.
pub struct Scripting {
    lua: Lua,
    env: Table,
    base: Table,
    runner: Function,
    scripts: BTreeMap<String, Function>,
}

impl Scripting {
    /// A fresh state with an empty cache.
    pub fn new() -> Scripting {
        Self::try_new().expect("a Lua state with the safe libraries and the redis library")
    }

    fn try_new() -> mlua::Result<Scripting> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        lua.set_app_data(Lrand48(LRAND48_SEED));
        // C functions both, as in Redis: a `return redis.call(...)` is
        // then no tail call that would hide the script's line.
        let call = lua.create_function(|lua, args| match run_command(lua, args)? {
            Ok(reply) => Ok(reply),
            Err(text) => {
                let (source, line) = locate(lua, 1);
                Err(mlua::Error::external(Raised { text, source, line }))
            }
        })?;
        let pcall = lua.create_function(|lua, args| match run_command(lua, args)? {
            Ok(reply) => Ok(reply),
            Err(text) => error_table(lua, &text),
        })?;
        let raised = lua.create_function(raised_table)?;
        let locate = lua.create_function(|lua, ()| Ok(locate(lua, 1)))?;
        let lrand48 = lua.create_function(|lua, ()| Ok(next_rand(lua)))?;
        let srand48 = lua.create_function(|lua, seed: i64| {
            lua.set_app_data(Lrand48(((seed as u64 & 0xFFFF_FFFF) << 16) | LRAND48_SEED));
            Ok(())
        })?;
        let sha1hex = lua.create_function(|_, text: mlua::LuaString| Ok(sha1(&text.as_bytes())))?;
        let base = lua.create_table()?;
        let setup = lua.load(SETUP).set_name(SETUP_CHUNK);
        let (env, runner): (Table, Function) = setup.call((
            call,
            pcall,
            raised,
            locate,
            lrand48,
            srand48,
            sha1hex,
            base.clone(),
        ))?;
        Ok(Scripting {
            lua,
            env,
            base,
            runner,
            scripts: BTreeMap::new(),
        })
    }

    /// Compiles and caches `source`; its SHA1, or the compile error.
    pub fn load(&mut self, source: &[u8]) -> Result<String, Reply> {
        let sha = sha1(source);
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let chunk = self
            .lua
            .load(source)
            .set_name(SCRIPT_CHUNK)
            .set_environment(self.env.clone());
        match chunk.into_function() {
            Ok(function) => {
                self.scripts.insert(sha.clone(), function);
                Ok(sha)
            }
            Err(e) => {
                let message = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    other => other.to_string(),
                };
                Err(Reply::err(format!(
                    "ERR Error compiling script (new function): {message}"
                )))
            }
        }
    }

    /// Whether the script with this SHA1 (lowercase) is cached.
    pub fn exists(&self, sha: &str) -> bool {
        self.scripts.contains_key(sha)
    }

    /// Runs the cached script `sha` with `keys` and `argv` on `ctx`'s
    /// store; its reply, and the context back.
    pub fn run(
        &mut self,
        sha: &str,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        ctx: ScriptCtx,
    ) -> (Reply, ScriptCtx) {
        let Some(function) = self.scripts.get(sha).cloned() else {
            return (Reply::err("NOSCRIPT No matching script. Please use EVAL."), ctx);
        };
        self.lua.set_app_data(ctx);
        let reply = self
            .call(sha, function, keys, argv)
            .unwrap_or_else(|e| Reply::err(format!("ERR Error running script (call to f_{sha}): {e}")));
        let ctx = self
            .lua
            .remove_app_data::<ScriptCtx>()
            .expect("the context set above");
        (reply, ctx)
    }

    fn call(&self, sha: &str, function: Function, keys: &[Vec<u8>], argv: &[Vec<u8>]) -> mlua::Result<Reply> {
        let strings = |items: &[Vec<u8>]| -> mlua::Result<Table> {
            self.lua.create_sequence_from(
                items
                    .iter()
                    .map(|item| self.lua.create_string(item))
                    .collect::<mlua::Result<Vec<_>>>()?,
            )
        };
        self.base.raw_set("KEYS", strings(keys)?)?;
        self.base.raw_set("ARGV", strings(argv)?)?;
        let (ok, value): (bool, Value) = self.runner.call(function)?;
        if ok {
            return Ok(to_reply(&value));
        }
        let Value::Table(error) = value else {
            return Ok(Reply::err("ERR execution failure"));
        };
        let message: Option<mlua::LuaString> = error.raw_get("err")?;
        let message = message
            .map(|m| String::from_utf8_lossy(&m.as_bytes()).into_owned())
            .unwrap_or_default();
        let source: Option<mlua::LuaString> = error.raw_get("source")?;
        let line: Option<i64> = error.raw_get("line")?;
        Ok(Reply::err(match (source, line) {
            (Some(source), Some(line)) => {
                let source = String::from_utf8_lossy(&source.as_bytes()).into_owned();
                format!("{message} script: {sha}, on {source}:{line}.")
            }
            _ => message,
        }))
    }
}

impl Default for Scripting {
    fn default() -> Self {
        Scripting::new()
    }
}

/// The SHA1 of a script, in lowercase hex, as Redis names it.
pub fn sha1(source: &[u8]) -> String {
    redis::Script::new(&String::from_utf8_lossy(source))
        .get_hash()
        .to_owned()
}

fn next_rand(lua: &Lua) -> i64 {
    let Some(mut state) = lua.app_data_mut::<Lrand48>() else {
        return 0;
    };
    state.0 = (state.0.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB)) & ((1 << 48) - 1);
    (state.0 >> 17) as i64
}

/// Where an error is being raised: the source and line of the innermost
/// script frame from `level` up (skipping C functions and the setup
/// chunk), which Redis reports as `on @user_script:LINE`.
fn locate(lua: &Lua, from: usize) -> (Option<String>, Option<i64>) {
    for level in from..64 {
        let frame = lua.inspect_stack(level, |debug| {
            let source = debug.source();
            let what = source.what;
            let name = source.source.map(|s| s.into_owned());
            (what, name, debug.current_line())
        });
        let Some((what, name, line)) = frame else { break };
        if what == "C" || name.as_deref() == Some(SETUP_CHUNK) {
            continue;
        }
        return (name, line.and_then(|l| i64::try_from(l).ok()));
    }
    (None, None)
}

/// `redis.call`/`redis.pcall`'s work: runs one command; its reply as a Lua
/// value, or the text of its error reply (which `redis.call` raises).
fn run_command(lua: &Lua, args: MultiValue) -> mlua::Result<Result<Value, String>> {
    let failed = |text: &str| Ok(Err(text.to_owned()));
    if args.is_empty() {
        return failed("ERR Please specify at least one argument for this redis lib call");
    }
    let mut argv = Vec::with_capacity(args.len());
    for arg in &args {
        match arg {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            Value::Integer(i) => argv.push(i.to_string().into_bytes()),
            Value::Number(n) => argv.push(format_double(*n).into_bytes()),
            _ => return failed("ERR Lua redis lib command arguments must be strings or integers"),
        }
    }
    let Some(spec) = commands::lookup(&argv[0]) else {
        return failed("ERR Unknown Redis command called from script");
    };
    if !spec.arity_ok(argv.len()) {
        return failed("ERR Wrong number of args calling Redis command from script");
    }
    if !spec.in_scripts {
        return failed("ERR This Redis command is not allowed from script");
    }
    let reply = {
        let Some(mut sc) = lua.app_data_mut::<ScriptCtx>() else {
            return failed("ERR no script is running");
        };
        let sc = &mut *sc;
        let mut ctx = Ctx {
            store: &mut sc.store,
            db: sc.db,
            now_ms: sc.now_ms,
            now_us: sc.now_us,
        };
        let reply = commands::run(&mut ctx, spec.name, &argv);
        sc.db = ctx.db;
        reply
    };
    match reply {
        Reply::Error(text) => Ok(Err(text)),
        reply => Ok(Ok(to_lua(lua, &reply)?)),
    }
}

fn error_table(lua: &Lua, text: &str) -> mlua::Result<Value> {
    let table = lua.create_table()?;
    table.raw_set("err", text)?;
    Ok(Value::Table(table))
}

/// A reply as a script sees it: integers as numbers, nil as `false`,
/// status as `{ok=...}`, errors as `{err=...}`.
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Status(text) => {
            let table = lua.create_table()?;
            table.raw_set("ok", text.as_str())?;
            Value::Table(table)
        }
        Reply::Error(text) => error_table(lua, text)?,
        Reply::Int(n) => Value::Number(*n as f64),
        Reply::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        Reply::Nil => Value::Boolean(false),
        Reply::Array(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}

/// A script's result as a reply: numbers truncated to integers, `true` as
/// 1, `false` and nil as nil, `{err=...}` as an error, `{ok=...}` as a
/// status, other tables as arrays up to their first nil.
fn to_reply(value: &Value) -> Reply {
    match value {
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(truncate(*n)),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(table) => table_reply(table),
        _ => Reply::Nil,
    }
}

/// A Lua number as Redis' C cast to `long long` makes it on x86-64:
/// truncated, and `i64::MIN` for anything out of range (NaN included).
fn truncate(n: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if n.is_nan() || !(-LIMIT..LIMIT).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

fn table_reply(table: &Table) -> Reply {
    if let Ok(Value::String(err)) = table.raw_get::<Value>("err") {
        return Reply::Error(String::from_utf8_lossy(&err.as_bytes()).into_owned());
    }
    if let Ok(Value::String(ok)) = table.raw_get::<Value>("ok") {
        return Reply::Status(String::from_utf8_lossy(&ok.as_bytes()).into_owned());
    }
    let mut items = Vec::new();
    for i in 1.. {
        match table.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(to_reply(&item)),
        }
    }
    Reply::Array(items)
}
