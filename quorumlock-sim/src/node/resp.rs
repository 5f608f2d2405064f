//! RESP2 on the wire: requests parsed as `redis-server` reads them, replies
//! encoded as it writes them.

/// One reply, as a node sends it (RESP2: doubles travel as bulk strings).
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+text`.
    Status(String),
    /// `-CODE text`, without the dash.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n` and the bytes.
    Bulk(Vec<u8>),
    /// `$-1`: a missing value.
    Nil,
    /// `*n` and the items.
    Array(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Status("OK".to_owned())
    }

    /// An error reply with the text given (code first).
    pub fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// A bulk string of `text`.
    pub fn bulk(text: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(text.as_ref().to_vec())
    }

    /// Appends the reply's RESP2 encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            // Redis never lets a line break into a one-line reply: it
            // would end the line early.
            Reply::Status(text) => line(out, b'+', text),
            Reply::Error(text) => line(out, b'-', text),
            Reply::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Reply::Bulk(bytes) => {
                out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.encode(out);
                }
            }
        }
    }
}

fn line(out: &mut Vec<u8>, prefix: u8, text: &str) {
    out.push(prefix);
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// The most arguments one request may have (Redis: 1024 * 1024).
const MAX_ARGS: i64 = 1024 * 1024;
/// The longest argument (Redis' default `proto-max-bulk-len`, 512 MB).
const MAX_BULK: i64 = 512 * 1024 * 1024;
/// The longest inline request or header line Redis buffers (64 KB).
const MAX_INLINE: usize = 64 * 1024;

/// What the start of a buffer holds.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// A whole request (its arguments; none for an empty inline line) and
    /// how many bytes it took.
    Request(Vec<Vec<u8>>, usize),
    /// Not a whole request yet.
    Incomplete,
    /// Not RESP: the text of the `Protocol error` reply, after which Redis
    /// closes the connection.
    Invalid(String),
}

/// Parses one request at the start of `buf`: a multibulk (what clients
/// send) or an inline command (what a person types).
pub fn parse_request(buf: &[u8]) -> Parsed {
    match buf.first() {
        None => Parsed::Incomplete,
        Some(b'*') => parse_multibulk(buf),
        Some(_) => parse_inline(buf),
    }
}

fn parse_inline(buf: &[u8]) -> Parsed {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > MAX_INLINE {
            Parsed::Invalid("Protocol error: too big inline request".to_owned())
        } else {
            Parsed::Incomplete
        };
    };
    let text = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    let args = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|word| !word.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Parsed::Request(args, end + 1)
}

/// A `\r\n`-terminated line at `at`: its text and where the next starts.
fn header(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], at + end + 2))
}

fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

fn parse_multibulk(buf: &[u8]) -> Parsed {
    let Some((text, mut at)) = header(buf, 0) else {
        return too_long(buf, "too big mbulk count string");
    };
    let count = match number(&text[1..]) {
        Some(n) if n <= MAX_ARGS => n,
        _ => return Parsed::Invalid("Protocol error: invalid multibulk length".to_owned()),
    };
    let mut args = Vec::new();
    for _ in 0..count.max(0) {
        let Some((text, next)) = header(buf, at) else {
            return too_long(&buf[at..], "too big bulk count string");
        };
        if text.first() != Some(&b'$') {
            let got = text.first().map_or(' ', |&b| char::from(b));
            return Parsed::Invalid(format!("Protocol error: expected '$', got '{got}'"));
        }
        let len = match number(&text[1..]) {
            Some(n) if (0..=MAX_BULK).contains(&n) => n as usize,
            _ => return Parsed::Invalid("Protocol error: invalid bulk length".to_owned()),
        };
        if buf.len() < next + len + 2 {
            return Parsed::Incomplete;
        }
        args.push(buf[next..next + len].to_vec());
        at = next + len + 2;
    }
    Parsed::Request(args, at)
}

fn too_long(rest: &[u8], what: &str) -> Parsed {
    if rest.len() > MAX_INLINE {
        Parsed::Invalid(format!("Protocol error: {what}"))
    } else {
        Parsed::Incomplete
    }
}

/// A count as an integer reply.
pub fn count(n: usize) -> Reply {
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_whole_or_wait_for_more() {
        let full = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        assert_eq!(
            parse_request(full),
            Parsed::Request(vec![b"GET".to_vec(), b"k".to_vec()], full.len())
        );
        for cut in 1..full.len() {
            assert_eq!(parse_request(&full[..cut]), Parsed::Incomplete, "{cut}");
        }
        assert!(matches!(parse_request(b"*a\r\n"), Parsed::Invalid(_)));
        assert!(matches!(parse_request(b"*1\r\n:1\r\n"), Parsed::Invalid(_)));
        assert_eq!(
            parse_request(b"PING x\r\n"),
            Parsed::Request(vec![b"PING".to_vec(), b"x".to_vec()], 8)
        );
    }

    #[test]
    fn replies_encode_as_resp2() {
        let mut out = Vec::new();
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Nil,
            Reply::bulk("a"),
            Reply::err("ERR x\ny"),
        ])
        .encode(&mut out);
        assert_eq!(out, b"*4\r\n:1\r\n$-1\r\n$1\r\na\r\n-ERR x y\r\n");
    }
}
