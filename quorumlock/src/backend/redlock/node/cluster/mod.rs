//! A Redis Cluster as one member of the quorum: requests routed to the
//! primary that serves their key's hash slot, one [`Server`] per primary.
//!
//! # Order of requests, and redirects
//!
//! A member promises what a single server does: a request sent after
//! another one for the same key runs after it, or not at all. Each primary
//! is a [`Server`], which keeps that order on its connection. What a cluster
//! adds is that a slot moves: to a replica promoted in a failover, or to
//! another primary in a migration (`redis-cli --cluster reshard`).
//!
//! Redirects are never followed. A server refuses a command for a slot it
//! does not serve (`MOVED`; `ASK` for a key that already left a migrating
//! slot; `TRYAGAIN` for keys split by one), and a refused command did not
//! run: the request fails on this member, like a node that did not answer,
//! and the quorum decides with the others. A `MOVED` refusal updates the map
//! at once (the slot's new primary), and the next request goes there.
//!
//! So a request runs only where the cluster says its key lives at that
//! moment, and a key moves with its value and its ttl, under the server's
//! own order (`MIGRATE` of a key, or replication up to a promotion): a
//! request that ran on the old primary ran before the move, and one that
//! arrives there after it is refused. A request sent later, routed by a newer
//! map to the new primary, therefore runs after every earlier one that ran
//! at all. Following a redirect instead would send the refused request
//! again, after requests handed to the new primary meanwhile, which breaks
//! that order: a release could run before the acquire it undoes. The price
//! is availability while a slot migrates: a lock whose key is in a migrating
//! slot is not taken or renewed on this member until the slot has moved.
//!
//! Scripts touch one slot only (the cluster refuses others): a lock's keys
//! must share a slot (checked when a lock is taken), and renewals go in
//! calls of one slot each. Batching, which mixes slots in one script call,
//! is off on cluster primaries.

mod slots;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use futures::future::{join_all, select_ok};
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, RedisError, RedisResult};
use tokio::time::Instant;

use self::slots::SlotMap;
use super::Settings;
use super::replica::Acked;
use super::server::Server;
use super::target::{Target, with_socket_options};
use crate::backend::redlock::wire::Request;
use crate::backend::redlock::wire::cluster::{self, ClusterSlots};
use crate::backend::redlock::wire::keys;
use crate::backend::redlock::wire::lock::{Acquire, Acquired, Release};
use crate::config::SLOT_MAP_REFRESH_EVERY;

/// A Redis Cluster taking part in the quorum as one member.
pub(crate) struct Cluster {
    /// `cluster h1:p1,h2:p2` for messages; never contains the password.
    name: String,
    /// The servers named in the member's URL: where the first map is asked.
    seeds: Vec<ConnectionInfo>,
    /// Settings of the primaries' servers (batching off).
    settings: Settings,
    /// The slot map and a server per primary it names.
    routes: RwLock<Routes>,
    /// Set when a request failed in a way a failover or a migration
    /// explains: the next request refreshes the map first.
    stale: AtomicBool,
    /// One refresh at a time, and when the last one was made.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
    /// Turns through the primaries for pub/sub connections.
    next_pubsub: AtomicUsize,
}

impl Cluster {
    /// A cluster member reached first through `seeds` (at least one).
    pub(crate) fn new(name: String, seeds: Vec<ConnectionInfo>, settings: &Settings) -> Self {
        Cluster {
            name,
            seeds,
            settings: Settings {
                batching: false,
                ..settings.clone()
            },
            routes: RwLock::default(),
            stale: AtomicBool::new(true),
            refreshed: tokio::sync::Mutex::new(None),
            next_pubsub: AtomicUsize::new(0),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.settings.connect_timeout
    }

    fn routes(&self) -> RwLockReadGuard<'_, Routes> {
        self.routes.read().unwrap_or_else(|e| e.into_inner())
    }

    fn routes_mut(&self) -> RwLockWriteGuard<'_, Routes> {
        self.routes.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The server of the primary that serves `key`'s slot (any primary for
    /// a request without keys), after a refresh of the map if it is stale.
    async fn route(&self, key: Option<&str>) -> RedisResult<Arc<Server>> {
        if self.stale.load(Ordering::Acquire) {
            self.refresh().await;
        }
        let slot = key.map(keys::slot);
        if let Some(server) = self.routes().server(slot) {
            return Ok(server);
        }
        self.stale.store(true, Ordering::Release);
        Err(RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
            "no primary known for the slot",
            format!("{}: slot {}", self.name, slot.unwrap_or_default()),
        )))
    }

    /// A new server for the primary at `address`.
    fn new_server(&self, address: &str) -> Arc<Server> {
        Arc::new(Server::new(
            Target::Fixed(self.client_for(address)),
            format!("{} ({address})", self.name),
            &self.settings,
        ))
    }

    /// A client for `address` with the seeds' credentials and transport.
    fn client_for(&self, address: &str) -> Client {
        let (host, port) = address.rsplit_once(':').unwrap_or((address, "6379"));
        let port = port.parse().unwrap_or(6379);
        let seed = &self.seeds[0];
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls {
                insecure, tls_params, ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let info = seed.clone().set_addr(addr);
        // Opening a client from a connection info that opened before
        // cannot fail; the seed's own client stands in if it ever did.
        with_socket_options(Client::open(info).unwrap_or_else(|_| {
            Client::open(seed.clone()).expect("the seed's connection info opened when the client was built")
        }))
    }

    /// Asks the cluster for its slot map: every known primary and seed at
    /// once, the first answer wins. At most once per
    /// [`SLOT_MAP_REFRESH_EVERY`]; a failed refresh leaves the map stale.
    async fn refresh(&self) {
        let mut refreshed = self.refreshed.lock().await;
        if !self.stale.load(Ordering::Acquire)
            || refreshed.is_some_and(|at| at.elapsed() < SLOT_MAP_REFRESH_EVERY)
        {
            return;
        }
        *refreshed = Some(Instant::now());
        let known: Vec<String> = self.routes().map.addresses().to_vec();
        let mut candidates: Vec<ConnectionInfo> = known
            .iter()
            .map(|address| self.client_for(address).get_connection_info().clone())
            .collect();
        candidates.extend(self.seeds.iter().cloned());
        let asks = candidates
            .into_iter()
            .map(|info| Box::pin(ask_slots(info, self.connect_timeout())));
        match select_ok(asks).await {
            Ok((map, _)) => {
                let mut routes = self.routes_mut();
                // The servers of primaries it knew stay, with their
                // connections; the others go with the old map.
                let servers = map
                    .addresses()
                    .iter()
                    .map(|address| {
                        routes
                            .server_at(address)
                            .unwrap_or_else(|| self.new_server(address))
                    })
                    .collect();
                *routes = Routes { map, servers };
                self.stale.store(false, Ordering::Release);
            }
            Err(error) => {
                tracing::debug!(member = self.name, %error, "slot map refresh failed");
            }
        }
    }

    /// Learns what a failed request says about the map: a `MOVED` refusal
    /// names the slot's new primary; a refusal or a connection that failed
    /// may mean a failover or a migration, so the next request asks the
    /// cluster first.
    fn learn<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(error) = &result {
            if let Some((slot, address)) = cluster::moved_to(error) {
                let mut routes = self.routes_mut();
                if routes.server_at(&address).is_none() {
                    let server = self.new_server(&address);
                    routes.servers.push(server);
                }
                routes.map.set(slot, &address);
            }
            if cluster::refused_for_slot(error) || error.is_io_error() || error.is_connection_dropped() {
                self.stale.store(true, Ordering::Release);
            }
        }
        result
    }

    pub(crate) async fn send<R: Request>(&self, request: &R) -> RedisResult<Acked<R::Reply>> {
        let server = self.route(request.route_key()).await?;
        self.learn(server.send(request).await)
    }

    pub(crate) async fn acquire(&self, acquire: &Acquire) -> RedisResult<Acked<Acquired>> {
        let server = self.route(acquire.route_key()).await?;
        self.learn(server.acquire(acquire).await)
    }

    pub(crate) async fn release(&self, release: &Release) -> RedisResult<usize> {
        let server = self.route(release.route_key()).await?;
        self.learn(server.release(release).await)
    }

    /// Sends `requests` as one pipeline per primary, all at once, and puts
    /// the replies back in order. A primary that fails fails its own
    /// requests only; one whose replicas did not acknowledge (replica mode)
    /// fails the member.
    pub(crate) async fn send_pipeline<R: Request>(
        &self,
        requests: &[&R],
    ) -> RedisResult<Acked<Vec<RedisResult<R::Reply>>>> {
        let mut groups: Vec<(Arc<Server>, Vec<usize>)> = Vec::new();
        let mut replies: Vec<Option<RedisResult<R::Reply>>> =
            std::iter::repeat_with(|| None).take(requests.len()).collect();
        for (i, request) in requests.iter().enumerate() {
            match self.route(request.route_key()).await {
                Ok(server) => match groups.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &server)) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((server, vec![i])),
                },
                Err(error) => replies[i] = Some(Err(error)),
            }
        }
        let sends = groups.iter().map(|(server, members)| {
            let part: Vec<&R> = members.iter().map(|&i| requests[i]).collect();
            async move { server.send_pipeline(&part).await }
        });
        for ((_, members), result) in groups.iter().zip(join_all(sends).await) {
            match result {
                Ok(Ok(parts)) => {
                    for (&i, reply) in members.iter().zip(parts) {
                        replies[i] = Some(self.learn(reply));
                    }
                }
                Ok(Err(missing)) => return Ok(Err(missing)),
                Err(error) => {
                    let error = self.learn::<()>(Err(error)).unwrap_err();
                    for &i in members {
                        replies[i] = Some(Err(error.clone()));
                    }
                }
            }
        }
        Ok(Ok(replies.into_iter().flatten().collect()))
    }

    /// The fastest clock among the primaries' readings.
    pub(crate) fn clock_rate(&self) -> Option<f64> {
        self.each_server(|server| server.clock_rate())
            .into_iter()
            .flatten()
            .reduce(f64::max)
    }

    /// Whether a reading of some primary's clock is due (each primary's
    /// due reading is claimed).
    pub(crate) fn clock_reading_due(&self) -> bool {
        let due = self.each_server(|server| server.clock_reading_due());
        due.is_empty() || due.contains(&true)
    }

    /// Reads every primary's clock.
    pub(crate) async fn read_clock(&self) -> RedisResult<()> {
        if self.stale.load(Ordering::Acquire) {
            self.refresh().await;
        }
        let servers = self.each_server(Arc::clone);
        join_all(servers.iter().map(|server| server.read_clock()))
            .await
            .into_iter()
            .collect()
    }

    fn each_server<T>(&self, f: impl Fn(&Arc<Server>) -> T) -> Vec<T> {
        self.routes().servers.iter().map(f).collect()
    }

    /// A client for a pub/sub connection: a primary's (each call the next
    /// one), or a seed's before the map is known. A release publishes on
    /// the primary that runs it, and the cluster passes every published
    /// message on to all its servers, so any one of them hears every
    /// wake-up.
    pub(crate) async fn pubsub_client(&self) -> RedisResult<Client> {
        if self.stale.load(Ordering::Acquire) {
            self.refresh().await;
        }
        let turn = self.next_pubsub.fetch_add(1, Ordering::Relaxed);
        let address = {
            let routes = self.routes();
            let addresses = routes.map.addresses();
            (!addresses.is_empty()).then(|| addresses[turn % addresses.len()].clone())
        };
        match address {
            Some(address) => Ok(self.client_for(&address)),
            None => Client::open(self.seeds[turn % self.seeds.len()].clone()).map(with_socket_options),
        }
    }

    /// The primaries and their slots, as the member last learnt them (after
    /// a refresh).
    pub(crate) async fn shards(&self) -> Vec<(String, Vec<(u16, u16)>)> {
        self.stale.store(true, Ordering::Release);
        self.refresh().await;
        self.routes().map.ranges()
    }
}

/// A member's slot map and a server per primary it names, in the order of
/// [`SlotMap::addresses`]: a request finds its server with a read lock, an
/// index and a reference count.
#[derive(Default)]
struct Routes {
    map: SlotMap,
    servers: Vec<Arc<Server>>,
}

impl Routes {
    /// The server of `slot`'s primary, or of any primary for `None`.
    fn server(&self, slot: Option<u16>) -> Option<Arc<Server>> {
        let index = match slot {
            Some(slot) => self.map.owner_index(slot)?,
            None => 0,
        };
        self.servers.get(index).cloned()
    }

    /// The server of the primary at `address`, if the map names it.
    fn server_at(&self, address: &str) -> Option<Arc<Server>> {
        let index = self.map.addresses().iter().position(|known| known == address)?;
        self.servers.get(index).cloned()
    }
}

/// `CLUSTER SLOTS` asked of the server `info` on a connection of its own.
async fn ask_slots(info: ConnectionInfo, timeout: Duration) -> RedisResult<SlotMap> {
    let host = match info.addr() {
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
        ConnectionAddr::Unix(_) => String::new(),
        _ => String::new(),
    };
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let ask = async {
        let mut conn = Client::open(info)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let reply = conn.send_packed_command(&ClusterSlots.command()).await?;
        ClusterSlots.parse(reply)
    };
    let ranges = tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| RedisError::from((redis::ErrorKind::Io, "CLUSTER SLOTS timed out")))??;
    let map = SlotMap::from_ranges(&ranges, &host);
    if map.is_empty() {
        return Err(RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
            "the server serves no slots: not a cluster, or one not yet set up",
        )));
    }
    Ok(map)
}
