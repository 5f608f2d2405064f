//! [`conformance_suite!`]: the suite's tests for one store, each a test
//! function of the store's module that runs the generic one of the same
//! name with the store's fixture.

/// Async tests `$name` (each with the test attribute `$test`) that await
/// `consensus::$group::$name::<$store>()`.
macro_rules! async_tests {
    (#[$test:meta] $store:ty; $($group:ident::$name:ident),* $(,)?) => {
        $(
            #[$test]
            async fn $name() {
                $crate::consensus::$group::$name::<$store>().await;
            }
        )*
    };
}

/// Every test of the suite for the store `$store` (a full path: the
/// chaos tests expand in a module of their own), in the module that
/// invokes it: `consensus::etcd::a_waiter_is_woken_by_...`.
///
/// The tests look at the store with blocking calls (a kazoo process for
/// each look at a ZooKeeper ensemble, an `etcdctl` for etcd), so they run
/// on a multi-threaded runtime, whose workers keep driving the clients'
/// connections meanwhile: on the test's own thread alone, looks that block
/// it for a second on a loaded machine starve a ZooKeeper connection (1 s
/// without a reply ends it) and fail the request in flight. The chaos
/// tests look at nothing and keep the current-thread runtime their
/// contenders were tuned on.
macro_rules! conformance_suite {
    ($store:ty) => {
        async_tests!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] $store;
            locking::a_lock_is_exclusive_outlives_its_ttl_when_renewed_and_is_gone_after_release,
            locking::a_multi_resource_lock_is_all_or_nothing,
            locking::a_lock_that_is_not_renewed_ends_at_its_validity_and_its_entry_goes,
            waiting::a_waiter_is_woken_by_the_release_and_gets_a_larger_fence_token,
            waiting::a_waiter_whose_entry_vanished_takes_its_place_again_before_it_holds,
            waiting::a_waiter_gives_up_when_its_wait_runs_out_and_leaves_nothing,
            waiting::fencing_tokens_grow_across_a_multi_resource_holder_and_a_waiter_behind_it,
            lifecycle::inspect_and_unlock_see_the_holder_and_free_the_lock,
            lifecycle::shutdown_gives_back_every_lock_and_takes_no_new_one,
            lifecycle::a_minimum_hold_keeps_a_released_lock_until_it_passes_or_is_refused_up_front,
            lifecycle::bad_settings_are_config_errors_that_say_which,
            loss::a_holder_cut_off_from_the_store_hears_of_the_loss_before_the_store_can_end_its_lock,
            semaphore::a_semaphore_hands_out_k_permits_and_a_waiter_gets_the_released_one,
        );

        #[test]
        fn settings_of_redis_nodes_are_refused_on_a_cluster() {
            $crate::consensus::lifecycle::settings_of_redis_nodes_are_refused_on_a_cluster::<$store>();
        }

        #[cfg(feature = "blocking")]
        #[test]
        fn the_blocking_client_locks_renews_and_releases() {
            $crate::consensus::blocking::the_blocking_client_locks_renews_and_releases::<$store>();
        }

        /// Mutual exclusion while members fail (a store of 3 members each).
        mod chaos {
            async_tests!(#[tokio::test] $store;
                chaos::contention_without_faults_keeps_mutual_exclusion,
                chaos::a_follower_killed_and_restarted_keeps_mutual_exclusion,
                chaos::the_leader_killed_and_restarted_keeps_mutual_exclusion,
                chaos::the_leader_partitioned_away_keeps_mutual_exclusion,
                chaos::a_member_cut_off_from_the_clients_keeps_mutual_exclusion,
            );
        }
    };
}
