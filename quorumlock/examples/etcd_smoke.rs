use quorumlock::Redlock;
use std::time::Duration;
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), quorumlock::Error> {
    let r = Redlock::builder().node("etcd://127.0.0.1:23790").build()?;
    println!(
        "try while etcdctl holds: {:?}",
        r.try_lock("smoke", Duration::from_secs(2))
            .await?
            .map(|g| g.fence_token())
    );
    let t = std::time::Instant::now();
    let g = r.lock("smoke", Duration::from_secs(2)).await?;
    println!("got after {:?}, fence {:?}", t.elapsed(), g.fence_token());
    g.release().await?;
    println!("{}", r.shutdown(Duration::from_secs(2)).await);
    Ok(())
}
