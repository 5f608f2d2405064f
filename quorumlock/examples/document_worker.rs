//! One worker per uploaded document, the original brief's FastAPI case, as
//! an axum service: `POST /documents/{id}/process` starts processing and
//! answers 202, or 423 Locked when another instance is already processing
//! that document (the user clicked "upload" twice).
//!
//! The demo starts 3 local lock nodes and two instances of the service (each
//! with its own client, as two containers would have), sends the same
//! document to both at once, and checks that exactly one processes it; once
//! it is done, the document can be processed again.
//!
//! Each instance serves `GET /metrics` in the Prometheus text format: the
//! library's metrics (docs/operations.md, Monitoring) through
//! `metrics-exporter-prometheus`. The demo scrapes it at the end and checks
//! the lock calls it counts against the answers the service gave.
//!
//! ```sh
//! cargo run --example document_worker            # QUORUMLOCK_NODES=... to use your nodes
//! cargo run --example document_worker -- --short # what CI runs
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use quorumlock::Redlock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use quorumlock_testkit::server;

/// Lock ttl: the watchdog renews it while a document is processed, so it only
/// bounds how long a crashed worker blocks the document.
const TTL: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct App {
    redlock: Redlock,
    /// The process's one metrics recorder, rendered at `/metrics`.
    metrics: PrometheusHandle,
    processed: Arc<AtomicUsize>,
    work: Duration,
}

async fn process(State(app): State<App>, Path(id): Path<String>) -> (StatusCode, String) {
    match app.redlock.try_lock(format!("doc:{id}"), TTL).await {
        Ok(Some(guard)) => {
            tokio::spawn(async move {
                // Slice the PDF page by page; stop if the lock is lost.
                for _page in 0..10 {
                    if !guard.is_held() {
                        return;
                    }
                    tokio::time::sleep(app.work / 10).await;
                }
                let _ = guard.release().await;
                app.processed.fetch_add(1, Ordering::SeqCst);
            });
            (StatusCode::ACCEPTED, format!("processing document {id}\n"))
        }
        Ok(None) => (
            StatusCode::LOCKED,
            format!("document {id} is already being processed\n"),
        ),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
    }
}

/// `GET /metrics`: everything recorded so far, for a Prometheus scrape.
async fn metrics(State(app): State<App>) -> String {
    app.metrics.render()
}

/// Starts one instance of the service on a free port; returns its address.
async fn instance(
    nodes: &[String],
    metrics_handle: &PrometheusHandle,
    processed: Arc<AtomicUsize>,
    work: Duration,
) -> std::net::SocketAddr {
    let app = App {
        redlock: Redlock::builder()
            .nodes(nodes.iter().cloned())
            .build()
            .expect("node URLs"),
        metrics: metrics_handle.clone(),
        processed,
        work,
    };
    let router = Router::new()
        .route("/documents/{id}/process", post(process))
        .route("/metrics", get(metrics))
        .with_state(app);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

/// `method path` as a bare HTTP/1.1 request; the whole response.
async fn request(address: std::net::SocketAddr, method: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: worker\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("receive");
    response
}

/// `POST /documents/{id}/process`; the status code.
async fn post_process(address: std::net::SocketAddr, id: &str) -> u16 {
    request(address, "POST", &format!("/documents/{id}/process"))
        .await
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status line")
}

/// The value of the sample `series` (name and labels, as rendered) in a
/// scrape; 0 when absent.
fn sample(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let short = std::env::args().any(|a| a == "--short");
    let work = if short {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(2)
    };
    let local: Vec<server::RedisServer>;
    let nodes: Vec<String> = match std::env::var("QUORUMLOCK_NODES") {
        Ok(list) => list.split(',').map(str::to_owned).collect(),
        Err(_) => {
            local = (0..3).map(|_| server::RedisServer::start()).collect();
            local.iter().map(server::RedisServer::url).collect()
        }
    };
    let metrics_handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the process's one recorder");
    let processed = Arc::new(AtomicUsize::new(0));
    let a = instance(&nodes, &metrics_handle, Arc::clone(&processed), work).await;
    let b = instance(&nodes, &metrics_handle, Arc::clone(&processed), work).await;
    let id = format!("pdf-{}", std::process::id());

    // The double click: the same document reaches both instances at once.
    let (first, second) = tokio::join!(post_process(a, &id), post_process(b, &id));
    println!("instance A answered {first}, instance B answered {second}");
    let mut codes = [first, second];
    codes.sort();
    assert_eq!(codes, [202, 423], "exactly one instance processes the document");

    // While it is processed, every further attempt is refused.
    assert_eq!(post_process(b, &id).await, 423);
    // Once done, the document can be processed again.
    let deadline = tokio::time::Instant::now() + work * 10;
    while processed.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "processing never finished"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        post_process(a, &id).await,
        202,
        "a processed document can be submitted again"
    );
    println!(
        "one worker per document: ok (processed {} time(s))",
        processed.load(Ordering::SeqCst)
    );

    // The scrape counts what the service answered: 202 twice, 423 twice.
    let scrape = request(a, "GET", "/metrics").await;
    let acquired = sample(
        &scrape,
        r#"quorumlock_acquisitions_total{call="try_lock",outcome="acquired"}"#,
    );
    let busy = sample(
        &scrape,
        r#"quorumlock_acquisitions_total{call="try_lock",outcome="busy"}"#,
    );
    assert_eq!((acquired, busy), (2.0, 2.0), "/metrics:\n{scrape}");
    println!("/metrics: {acquired} acquired, {busy} busy: ok");
}
