//! The test kit's own integration tests, as one test binary: each former
//! `tests/*.rs` file is a module here, so that tokio, redis and the kit are
//! linked once rather than once per file.

mod etcd_cluster;
mod redis_cluster;
mod zookeeper_ensemble;
