//! The differential test's wire: replies read whole from either side and
//! compared exactly or, where they read a clock, loosely.

use std::io::Read;
use std::net::TcpStream;

use tokio::io::{AsyncReadExt, DuplexStream};

/// One parsed reply.
#[derive(Debug, PartialEq)]
pub enum Resp {
    Line(u8, Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

/// One reply at the start of `buf` and its length, if whole.
fn frame(buf: &[u8]) -> Option<(Resp, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = &buf[1..end];
    let number = || std::str::from_utf8(line).ok()?.parse::<i64>().ok();
    let next = end + 2;
    match buf.first()? {
        b'+' | b'-' => Some((Resp::Line(buf[0], line.to_vec()), next)),
        b':' => Some((Resp::Int(number()?), next)),
        b'$' => match number()? {
            -1 => Some((Resp::Bulk(None), next)),
            n => {
                let n = usize::try_from(n).ok()?;
                (buf.len() >= next + n + 2)
                    .then(|| (Resp::Bulk(Some(buf[next..next + n].to_vec())), next + n + 2))
            }
        },
        b'*' => match number()? {
            -1 => Some((Resp::Array(None), next)),
            n => {
                let mut at = next;
                let mut items = Vec::new();
                for _ in 0..n {
                    let (item, used) = frame(&buf[at..])?;
                    items.push(item);
                    at += used;
                }
                Some((Resp::Array(Some(items)), at))
            }
        },
        _ => panic!("not RESP: {:?}", String::from_utf8_lossy(buf)),
    }
}

pub fn real_reply(real: &mut TcpStream, buf: &mut Vec<u8>) -> (Resp, Vec<u8>) {
    loop {
        if let Some((resp, used)) = frame(buf) {
            return (resp, buf.drain(..used).collect());
        }
        let mut chunk = [0; 4096];
        let n = real.read(&mut chunk).expect("the real server answers");
        assert!(n > 0, "the real server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

pub async fn sim_reply(sim: &mut DuplexStream, buf: &mut Vec<u8>) -> (Resp, Vec<u8>) {
    loop {
        if let Some((resp, used)) = frame(buf) {
            return (resp, buf.drain(..used).collect());
        }
        let n = sim.read_buf(buf).await.expect("the simulated node answers");
        assert!(n > 0, "the simulated node closed the connection");
    }
}

/// How a request's replies are compared.
#[derive(Clone, Copy, PartialEq)]
pub enum Compare {
    Exact,
    /// Integers that are ttls may differ by the time between the two sends.
    Clock,
}

/// Whether two integers agree: equal, or both µs clock readings close
/// together, or (`Clock`) both ttls close together.
fn close(a: i64, b: i64, how: Compare) -> bool {
    a == b
        || (a > 100_000_000_000_000 && b > 100_000_000_000_000 && a.abs_diff(b) < 60_000_000)
        || (how == Compare::Clock && a >= 0 && b >= 0 && a.abs_diff(b) <= 1_500)
}

pub fn agree(real: &Resp, sim: &Resp, how: Compare) -> bool {
    let int = |bytes: &[u8]| std::str::from_utf8(bytes).ok()?.parse::<i64>().ok();
    match (real, sim) {
        (Resp::Int(a), Resp::Int(b)) => close(*a, *b, how),
        (Resp::Bulk(Some(a)), Resp::Bulk(Some(b))) => match (int(a), int(b)) {
            (Some(x), Some(y)) => close(x, y, how),
            _ => a == b,
        },
        (Resp::Array(Some(a)), Resp::Array(Some(b))) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| agree(x, y, how))
        }
        _ => real == sim,
    }
}
