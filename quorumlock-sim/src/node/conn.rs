//! One client connection: the serve loop (requests read and answered in
//! order, pushes delivered, pauses and crashes obeyed) and the commands
//! that act on the connection rather than on data (`SUBSCRIBE`, `WAIT`,
//! `EVAL`, `SCRIPT`, `CLIENT`, `HELLO`, ...).

use std::collections::BTreeSet;

use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::commands;
use super::errors::{NOT_INT, unknown_command, unknown_subcommand, wrong_arity};
use super::num::parse_int;
use super::resp::{Parsed, Reply, count, parse_request};
use super::signal::Watched;
use super::store::Ctx;
use super::{Inner, SimNode};

/// What a connection has: its id, database and subscriptions.
pub struct Conn {
    /// Unique on the node (`CLIENT ID`).
    pub id: u64,
    /// The selected database.
    pub db: usize,
    /// Subscribed channels.
    pub channels: BTreeSet<Vec<u8>>,
    /// Where publications to its channels go.
    pub pushes: mpsc::UnboundedSender<Reply>,
    /// `CLIENT SETNAME`.
    pub name: Option<Vec<u8>>,
}

/// What a request does to its connection.
pub enum Outcome {
    /// Replies to send (several for a multi-channel `SUBSCRIBE`).
    Replies(Vec<Reply>),
    /// A blocked `WAIT`: reply `:0` at the deadline (never: `None`).
    Block(Option<Instant>),
    /// Reply, then close (`QUIT`).
    Close(Reply),
}

impl From<Reply> for Outcome {
    fn from(reply: Reply) -> Outcome {
        Outcome::Replies(vec![reply])
    }
}

/// The signals a connection obeys.
struct Signals {
    crash: Arc<Watched<u64>>,
    /// The crash count when the connection opened.
    opened: u64,
    paused: Arc<Watched<bool>>,
}

impl Signals {
    /// Waits while the node is paused; `false` once it crashed.
    async fn running(&mut self) -> bool {
        loop {
            if self.crash.get() != self.opened {
                return false;
            }
            if !self.paused.get() {
                return true;
            }
            tokio::select! {
                biased;
                _ = self.crash.changed_from(self.opened) => return false,
                _ = self.paused.changed_from(true) => {}
            }
        }
    }

    /// Waits for a crash (forever, if none comes).
    async fn crashed(&mut self) {
        self.crash.changed_from(self.opened).await;
    }
}

/// Serves one connection of `node` until it closes or the node crashes.
pub async fn serve<S>(node: SimNode, stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let (pushes, mut pushed) = mpsc::unbounded_channel();
    let mut signals = Signals {
        crash: Arc::clone(&node.crash),
        opened: node.crash.get(),
        paused: Arc::clone(&node.paused),
    };
    let mut conn = node.lock().open(pushes);
    let (mut input, mut output) = (Vec::new(), Vec::new());
    while signals.running().await {
        if !answer(
            &node,
            &mut conn,
            &mut signals,
            &mut input,
            &mut output,
            &mut writer,
        )
        .await
        {
            break;
        }
        tokio::select! {
            biased;
            () = signals.crashed() => break,
            Some(push) = pushed.recv() => push.encode(&mut output),
            read = reader.read_buf(&mut input) => if !matches!(read, Ok(n) if n > 0) { break },
        }
    }
    node.lock().close(&conn);
}

/// Answers every whole request in `input`, in order, and writes the
/// replies; `false` when the connection is to end.
async fn answer<W: AsyncWrite + Unpin>(
    node: &SimNode,
    conn: &mut Conn,
    signals: &mut Signals,
    input: &mut Vec<u8>,
    output: &mut Vec<u8>,
    writer: &mut W,
) -> bool {
    loop {
        match parse_request(input) {
            Parsed::Incomplete => break,
            Parsed::Invalid(text) => {
                Reply::Error(format!("ERR {text}")).encode(output);
                write(writer, output, signals).await;
                return false;
            }
            Parsed::Request(args, used) => {
                input.drain(..used);
                if !signals.running().await {
                    return false;
                }
                let outcome = node.lock().execute(conn, args);
                match outcome {
                    Outcome::Replies(replies) => replies.iter().for_each(|r| r.encode(output)),
                    Outcome::Close(reply) => {
                        reply.encode(output);
                        write(writer, output, signals).await;
                        return false;
                    }
                    Outcome::Block(deadline) => {
                        if !write(writer, output, signals).await || !blocked(deadline, signals).await {
                            return false;
                        }
                        Reply::Int(0).encode(output);
                    }
                }
            }
        }
    }
    write(writer, output, signals).await
}

/// Sleeps out a blocked `WAIT`; `false` if the node crashed meanwhile.
async fn blocked(deadline: Option<Instant>, signals: &mut Signals) -> bool {
    let timeout = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        () = signals.crashed() => return false,
        () = timeout => {}
    }
    signals.running().await
}

/// Writes and clears `output`; `false` if the connection broke or the
/// node crashed first.
async fn write<W: AsyncWrite + Unpin>(writer: &mut W, output: &mut Vec<u8>, signals: &mut Signals) -> bool {
    if output.is_empty() {
        return true;
    }
    let written = async {
        writer.write_all(output).await?;
        writer.flush().await
    };
    let ok = tokio::select! {
        biased;
        () = signals.crashed() => false,
        written = written => written.is_ok(),
    };
    output.clear();
    ok
}

impl Inner {
    /// Runs one request of `conn`.
    pub(super) fn execute(&mut self, conn: &mut Conn, args: Vec<Vec<u8>>) -> Outcome {
        let Some(first) = args.first() else {
            return Outcome::Replies(Vec::new());
        };
        let Some(spec) = commands::lookup(first) else {
            return unknown_command(&args).into();
        };
        if !spec.arity_ok(args.len()) {
            return wrong_arity(spec.name).into();
        }
        let name = spec.name;
        let allowed_subscribed = [
            "subscribe",
            "unsubscribe",
            "psubscribe",
            "punsubscribe",
            "ping",
            "quit",
        ];
        if !conn.channels.is_empty() && !allowed_subscribed.contains(&name) {
            return Reply::err(format!(
                "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET \
                 are allowed in this context"
            ))
            .into();
        }
        match name {
            "subscribe" => self.subscribe(conn, &args[1..]),
            "unsubscribe" => self.unsubscribe(conn, &args[1..]),
            "psubscribe" | "punsubscribe" => {
                Reply::err("ERR pattern subscriptions are not supported by the simulated node").into()
            }
            "ping" if !conn.channels.is_empty() => match args.get(1) {
                _ if args.len() > 2 => wrong_arity("ping").into(),
                message => {
                    let message = message.map_or(Reply::bulk(""), Reply::bulk);
                    Reply::Array(vec![Reply::bulk("pong"), message]).into()
                }
            },
            "quit" => Outcome::Close(Reply::ok()),
            "auth" => Reply::err(
                "ERR AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            )
            .into(),
            "hello" => hello(conn, &args).into(),
            "client" => client(conn, &args).into(),
            "wait" => wait(self.now_ms(), &args),
            "eval" | "evalsha" => self.eval(conn, name == "eval", &args).into(),
            "script" => self.script(&args).into(),
            _ => {
                let (now_ms, now_us) = (self.now_ms(), self.now_us());
                let mut ctx = Ctx {
                    store: &mut self.store,
                    db: conn.db,
                    now_ms,
                    now_us,
                };
                let reply = commands::run(&mut ctx, name, &args);
                conn.db = ctx.db;
                reply.into()
            }
        }
    }

    fn subscribe(&mut self, conn: &mut Conn, channels: &[Vec<u8>]) -> Outcome {
        let mut replies = Vec::new();
        for channel in channels {
            if conn.channels.insert(channel.clone()) {
                self.store
                    .channels
                    .subscribe(channel, conn.id, conn.pushes.clone());
            }
            let subscribed = count(conn.channels.len());
            replies.push(Reply::Array(vec![
                Reply::bulk("subscribe"),
                Reply::bulk(channel),
                subscribed,
            ]));
        }
        Outcome::Replies(replies)
    }

    fn unsubscribe(&mut self, conn: &mut Conn, channels: &[Vec<u8>]) -> Outcome {
        let channels: Vec<Vec<u8>> = if channels.is_empty() {
            conn.channels.iter().cloned().collect()
        } else {
            channels.to_vec()
        };
        if channels.is_empty() {
            return Reply::Array(vec![Reply::bulk("unsubscribe"), Reply::Nil, Reply::Int(0)]).into();
        }
        let mut replies = Vec::new();
        for channel in channels {
            if conn.channels.remove(&channel) {
                self.store.channels.unsubscribe(&channel, conn.id);
            }
            let subscribed = count(conn.channels.len());
            replies.push(Reply::Array(vec![
                Reply::bulk("unsubscribe"),
                Reply::Bulk(channel),
                subscribed,
            ]));
        }
        Outcome::Replies(replies)
    }

    fn eval(&mut self, conn: &Conn, by_source: bool, args: &[Vec<u8>]) -> Reply {
        let sha = if by_source {
            match self.scripting.load(&args[1]) {
                Ok(sha) => sha,
                Err(reply) => return reply,
            }
        } else {
            String::from_utf8_lossy(&args[1]).to_lowercase()
        };
        let Some(keys) = parse_int(&args[2]) else {
            return Reply::err(NOT_INT);
        };
        let given = i64::try_from(args.len() - 3).unwrap_or(i64::MAX);
        if keys > given {
            return Reply::err("ERR Number of keys can't be greater than number of args");
        }
        if keys < 0 {
            return Reply::err("ERR Number of keys can't be negative");
        }
        let (keys, argv) = args[3..].split_at(keys as usize);
        let (now_ms, now_us) = (self.now_ms(), self.now_us());
        let store = std::mem::take(&mut self.store);
        let ctx = super::lua::ScriptCtx::new(store, conn.db, now_ms, now_us);
        let (reply, ctx) = self.scripting.run(&sha, keys, argv, ctx);
        self.store = ctx.store;
        reply
    }

    fn script(&mut self, args: &[Vec<u8>]) -> Reply {
        let sub = args[1].to_ascii_lowercase();
        match sub.as_slice() {
            b"load" if args.len() == 3 => match self.scripting.load(&args[2]) {
                Ok(sha) => Reply::bulk(sha),
                Err(reply) => reply,
            },
            b"load" => wrong_arity("script|load"),
            b"exists" if args.len() >= 3 => Reply::Array(
                args[2..]
                    .iter()
                    .map(|sha| String::from_utf8_lossy(sha).to_lowercase())
                    .map(|sha| Reply::Int(i64::from(self.scripting.exists(&sha))))
                    .collect(),
            ),
            b"exists" => wrong_arity("script|exists"),
            b"flush" => match &args[2..] {
                [] => self.flush_scripts(),
                [mode] if mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async") => {
                    self.flush_scripts()
                }
                _ => Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
            },
            b"kill" => Reply::err("NOTBUSY No scripts in execution right now."),
            _ => unknown_subcommand("script", &args[1]),
        }
    }

    fn flush_scripts(&mut self) -> Reply {
        self.scripting = super::lua::Scripting::new();
        Reply::ok()
    }
}

/// `WAIT numreplicas timeout` on a node without replicas: 0 at once when
/// no replica is asked for, else 0 when the timeout passes.
fn wait(now_ms: i64, args: &[Vec<u8>]) -> Outcome {
    let timeout = match parse_int(&args[2]) {
        None => return Reply::err("ERR timeout is not an integer or out of range").into(),
        Some(t) if t < 0 => return Reply::err("ERR timeout is negative").into(),
        Some(t) if t > i64::MAX - now_ms => return Reply::err("ERR timeout is out of range").into(),
        Some(t) => t,
    };
    match parse_int(&args[1]) {
        None => Reply::err(NOT_INT).into(),
        Some(replicas) if replicas <= 0 => Reply::Int(0).into(),
        Some(_) if timeout == 0 => Outcome::Block(None),
        Some(_) => {
            let millis = std::time::Duration::from_millis(timeout.unsigned_abs());
            Outcome::Block(Some(Instant::now() + millis))
        }
    }
}

/// `HELLO [2]`: the server's facts as a flat array (RESP2). RESP3 is not
/// spoken here.
fn hello(conn: &Conn, args: &[Vec<u8>]) -> Reply {
    if let Some(version) = args.get(1) {
        match parse_int(version) {
            None => return Reply::err("ERR Protocol version is not an integer or out of range"),
            Some(2) => {}
            Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
        }
    }
    let id = i64::try_from(conn.id).unwrap_or(i64::MAX);
    Reply::Array(vec![
        Reply::bulk("server"),
        Reply::bulk("redis"),
        Reply::bulk("version"),
        Reply::bulk("7.0.15"),
        Reply::bulk("proto"),
        Reply::Int(2),
        Reply::bulk("id"),
        Reply::Int(id),
        Reply::bulk("mode"),
        Reply::bulk("standalone"),
        Reply::bulk("role"),
        Reply::bulk("master"),
        Reply::bulk("modules"),
        Reply::Array(Vec::new()),
    ])
}

/// The `CLIENT` subcommands a client may send. Redis 7.0 has no `SETINFO`
/// (7.2 does): it answers `unknown subcommand`, which redis-rs ignores.
fn client(conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"id", 2) => Reply::Int(i64::try_from(conn.id).unwrap_or(i64::MAX)),
        (b"id", _) => wrong_arity("client|id"),
        (b"getname", 2) => conn.name.as_ref().map_or(Reply::Nil, Reply::bulk),
        (b"getname", _) => wrong_arity("client|getname"),
        (b"setname", 3) => {
            if args[2].iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                return Reply::err("ERR Client names cannot contain spaces, newlines or special characters.");
            }
            conn.name = (!args[2].is_empty()).then(|| args[2].clone());
            Reply::ok()
        }
        (b"setname", _) => wrong_arity("client|setname"),
        _ => unknown_subcommand("client", &args[1]),
    }
}
