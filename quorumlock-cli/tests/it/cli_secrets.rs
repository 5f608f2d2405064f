//! Node passwords never leave the `quorumlock` binary: not on stdout or
//! stderr of `run`, `check` and `demo`, not in usage errors or `--help`, not
//! in the environment of the command `run` starts (nor of its guardian), and
//! a nodes file with a password must be private. The lock still works with
//! the password, given through the environment or a file.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use quorumlock_testkit::cli::{Binary, children, exit, scratch, text, wait_child};
use quorumlock_testkit::{RedisServer, wait_until_exists};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// The nodes' password: distinctive, so that finding it anywhere is a leak.
const PASSWORD: &str = "Wombat7Quince19Xylophone";

/// How long a `quorumlock` process may take on a loaded machine.
const PROCESS_LIMIT: Duration = Duration::from_secs(20);

/// Servers that require [`PASSWORD`]. The harness starts them without one
/// (it checks readiness with a bare PING), so it is set once they answer.
fn secret_nodes(n: usize) -> Vec<RedisServer> {
    (0..n)
        .map(|_| {
            let server = RedisServer::start();
            let reply = server
                .command(&["CONFIG", "SET", "requirepass", PASSWORD])
                .expect("CONFIG SET requirepass");
            assert!(reply.starts_with("+OK"), "{reply}");
            server
        })
        .collect()
}

fn secret_urls(nodes: &[RedisServer]) -> String {
    nodes
        .iter()
        .map(|n| format!("redis://:{PASSWORD}@127.0.0.1:{}/", n.port()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The raw replies of `commands` on `server`, after AUTH.
fn authed(server: &RedisServer, commands: &[&[&str]]) -> Vec<String> {
    let mut all: Vec<&[&str]> = vec![&["AUTH", PASSWORD]];
    all.extend_from_slice(commands);
    let mut replies = server.pipeline(&all).expect("AUTH pipeline");
    assert!(replies[0].starts_with("+OK"), "AUTH: {}", replies[0]);
    replies.remove(0);
    replies
}

fn dbsize(server: &RedisServer) -> String {
    authed(server, &[&["DBSIZE"]]).remove(0).trim_end().to_owned()
}

/// `quorumlock ARGS` with no nodes in its environment unless the test
/// sets them.
fn without_nodes(args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.args(args);
    cmd
}

/// Asserts that `what` does not contain the password anywhere.
fn assert_secret_absent(what: &str, bytes: &[u8]) {
    assert!(
        !bytes.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes()),
        "the password shows in {what}:\n{}",
        text(bytes)
    );
}

fn assert_output_clean(what: &str, out: &Output) {
    assert_secret_absent(&format!("{what}: stdout"), &out.stdout);
    assert_secret_absent(&format!("{what}: stderr"), &out.stderr);
}

/// Runs `quorumlock run` over password nodes (given by `flags` before the
/// command, or `env`) with a command that saves its environment and waits
/// to be told to finish; while it runs, checks that the lock is held on
/// every node and that no child of quorumlock (the command, the guardian)
/// has the password in its environment. Returns quorumlock's output and the
/// command's environment.
fn run_with_secret_nodes(
    name: &str,
    nodes: &[RedisServer],
    flags: &[&str],
    nodes_env: Option<&str>,
) -> (Output, Vec<u8>) {
    let dir = scratch(name);
    let (env, go) = (dir.join("env"), dir.join("go"));
    let script = format!(
        "env > {env}.tmp && mv {env}.tmp {env}; while [ ! -e {go} ]; do sleep 0.02; done",
        env = env.display(),
        go = go.display()
    );
    let mut cmd = without_nodes(&["run", "--key", "secret:job", "--verbose", "--node-timeout", "1s"]);
    cmd.args(flags).args(["--", "sh", "-c", &script]);
    if let Some(urls) = nodes_env {
        cmd.env("QUORUMLOCK_NODES", urls);
    }
    let mut run = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn run");
    wait_until_exists(&env, PROCESS_LIMIT);
    for node in nodes {
        let value = authed(node, &[&["GET", "secret:job"]]).remove(0);
        assert!(
            value.starts_with('$') && !value.starts_with("$-1"),
            "the lock is held: {value}"
        );
    }
    let helpers: Vec<u32> = children(run.id()).iter().map(|child| child.pid).collect();
    assert!(
        helpers.len() >= 2,
        "the command and the guardian run: {helpers:?}"
    );
    for pid in helpers {
        if let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) {
            assert_secret_absent(&format!("the environment of child {pid} of quorumlock"), &environ);
        }
    }
    std::fs::write(&go, "").expect("write go");
    let status = wait_child(&mut run, PROCESS_LIMIT);
    let output = run.wait_with_output().expect("output");
    let output = Output { status, ..output };
    let environment = std::fs::read(&env).expect("the command's environment");
    let _ = std::fs::remove_dir_all(&dir);
    for node in nodes {
        assert_eq!(dbsize(node), ":0", "the lock was released");
    }
    (output, environment)
}

#[test]
fn run_with_nodes_from_the_environment_never_shows_the_password() {
    let nodes = secret_nodes(3);
    let urls = secret_urls(&nodes);
    let (out, environment) = run_with_secret_nodes("env", &nodes, &[], Some(&urls));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("acquired"), "{}", text(&out.stderr));
    assert_output_clean("run", &out);
    assert_secret_absent("the command's environment", &environment);
    assert!(
        !text(&environment).contains("QUORUMLOCK_NODES="),
        "the command inherits no nodes variable: {}",
        text(&environment)
    );
    assert!(
        text(&environment).contains("PATH="),
        "the rest of the environment is passed on"
    );
}

#[test]
fn run_with_a_private_nodes_file_never_shows_the_password() {
    let nodes = secret_nodes(3);
    let dir = scratch("file");
    let file = dir.join("nodes");
    let urls = secret_urls(&nodes);
    let (first, rest) = urls.split_once(',').unwrap();
    // One per line and comma separated, with a comment.
    std::fs::write(&file, format!("# lock nodes\n{first}\n{rest}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = file.display().to_string();
    let (out, environment) = run_with_secret_nodes("file-run", &nodes, &["--nodes-file", &path], None);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("of 3 nodes"),
        "all three nodes were read: {}",
        text(&out.stderr)
    );
    assert_output_clean("run --nodes-file", &out);
    assert_secret_absent("the command's environment", &environment);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_nodes_file_with_a_password_readable_by_others_is_refused() {
    let nodes = secret_nodes(1);
    let dir = scratch("shared-file");
    let file = dir.join("nodes");
    std::fs::write(&file, secret_urls(&nodes)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = file.display().to_string();
    for args in [
        &["run", "--key", "k", "--nodes-file", &path, "--", "true"][..],
        &["check", "--nodes-file", &path][..],
    ] {
        let out = without_nodes(args).output().expect("run quorumlock");
        assert_eq!(
            out.status.code(),
            Some(exit::USAGE),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).contains("chmod 600"), "{}", text(&out.stderr));
        assert_output_clean("a shared nodes file", &out);
    }
    // Without a password there is nothing to hide: a shared file is fine.
    std::fs::write(&file, nodes[0].url()).unwrap();
    let out = without_nodes(&["run", "--key", "k", "--nodes-file", &path, "--", "true"])
        .output()
        .expect("run quorumlock");
    assert_ne!(out.status.code(), Some(exit::USAGE), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_never_shows_the_password_even_a_wrong_one() {
    let nodes = secret_nodes(3);
    let out = without_nodes(&["check", "--node-timeout", "1s"])
        .env("QUORUMLOCK_NODES", secret_urls(&nodes))
        .output()
        .expect("run check");
    // No persistence: a warning, not an error.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("usable with warnings"),
        "{}",
        text(&out.stdout)
    );
    assert_output_clean("check", &out);

    let wrong = secret_urls(&nodes).replace(PASSWORD, "Wrong7Quince19Xylophone");
    let out = without_nodes(&["check", "--node-timeout", "1s"])
        .env("QUORUMLOCK_NODES", &wrong)
        .output()
        .expect("run check");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!shown.contains("Wrong7Quince19Xylophone"), "{shown}");
    assert!(
        shown.to_lowercase().contains("authentication failed"),
        "the refusal is reported: {shown}"
    );
}

#[test]
fn a_refused_password_fails_the_run_without_showing_it() {
    let nodes = secret_nodes(1);
    let wrong = secret_urls(&nodes).replace(PASSWORD, "Wrong7Quince19Xylophone");
    let out = without_nodes(&["run", "--key", "k", "--wait", "0", "--", "true"])
        .env("QUORUMLOCK_NODES", &wrong)
        .output()
        .expect("run quorumlock");
    assert_eq!(
        out.status.code(),
        Some(exit::UNREACHABLE),
        "{}",
        text(&out.stderr)
    );
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!shown.contains("Wrong7Quince19Xylophone"), "{shown}");
}

#[cfg(feature = "demo")]
#[test]
fn demo_on_password_nodes_never_shows_the_password() {
    let nodes = secret_nodes(3);
    // The chart goes to a scratch file, not into the source tree.
    let chart = std::env::temp_dir().join(format!("quorumlock-secrets-demo-{}.svg", std::process::id()));
    let out = without_nodes(&[
        "demo",
        "--seconds",
        "1",
        "--node-timeout",
        "1s",
        "--chart",
        &chart.to_string_lossy(),
        "--nodes",
        &secret_urls(&nodes),
    ])
    .output()
    .expect("run demo");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("overlaps: 0"), "{stdout}");
    assert!(
        stdout.contains(":***@127.0.0.1"),
        "the nodes are shown redacted: {stdout}"
    );
    assert!(
        text(&out.stderr).contains("visible") || text(&out.stderr).contains("ps"),
        "--nodes with a password is warned about: {}",
        text(&out.stderr)
    );
    assert_output_clean("demo", &out);
    let _ = std::fs::remove_file(&chart);
}

#[test]
fn usage_errors_and_help_never_show_the_password() {
    let bad_urls = [
        format!("redis://:{PASSWORD}@127.0.0.1:notaport"),
        format!("redis://:{PASSWORD}@127.0.0.1:6379/notadb"),
        format!("{PASSWORD}@127.0.0.1:6379"),
        format!(":{PASSWORD}@127.0.0.1:6379"),
        format!("http://:{PASSWORD}@127.0.0.1:6379"),
        format!("redis://user:{PASSWORD}@[::1"),
    ];
    for url in &bad_urls {
        for args in [
            &["run", "--key", "k", "--nodes", url, "--", "true"][..],
            &["check", "--nodes", url][..],
            #[cfg(feature = "demo")]
            &["demo", "--seconds", "1", "--nodes", url][..],
        ] {
            let out = without_nodes(args).output().expect("run quorumlock");
            let what = format!("{:?} with a bad URL", args[0]);
            assert_output_clean(&what, &out);
            // check reports a URL it cannot parse as an unusable node (1).
            let expected: &[i32] = if args[0] == "check" {
                &[1, exit::USAGE]
            } else {
                &[exit::USAGE]
            };
            assert!(
                out.status.code().is_some_and(|code| expected.contains(&code)),
                "{what}: {:?} {}",
                out.status,
                text(&out.stderr)
            );
        }
        // The same from the environment.
        let out = without_nodes(&["run", "--key", "k", "--", "true"])
            .env("QUORUMLOCK_NODES", url)
            .output()
            .expect("run quorumlock");
        assert_eq!(out.status.code(), Some(exit::USAGE), "{}", text(&out.stderr));
        assert_output_clean("run with a bad URL from QUORUMLOCK_NODES", &out);
    }
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["check", "--help"],
        #[cfg(feature = "demo")]
        &["demo", "--help"],
    ] {
        let out = without_nodes(args)
            .env("QUORUMLOCK_NODES", format!("redis://:{PASSWORD}@127.0.0.1:6379"))
            .output()
            .expect("quorumlock --help");
        assert!(out.status.success(), "{args:?}");
        assert_output_clean("--help", &out);
    }
    let help = without_nodes(&["run", "--help"]).output().expect("run --help");
    assert!(
        text(&help.stdout).contains("ps") && text(&help.stdout).contains("--nodes-file"),
        "the help says --nodes shows in ps and what to use instead: {}",
        text(&help.stdout)
    );
}
