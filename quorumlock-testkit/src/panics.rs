//! Panics that tokio would swallow: a panic in a spawned task (the redis
//! client's connection drivers, the watchdog) ends that task, not the test.
//! A [`PanicProbe`] collects them so that a test can assert there were none.

use std::sync::{Mutex, Once};

/// The panics on one thread since [`PanicProbe::start`]. A current-thread
/// runtime runs every spawned task on the thread that drives it, so a probe
/// started there sees the panics of the client's tasks too.
#[derive(Debug)]
pub struct PanicProbe {
    /// The name of the thread whose panics count.
    thread: String,
    /// How many panics [`PANICS`] held when the probe started.
    from: usize,
}

/// Every panic of the process since the hook was installed, with the name
/// of its thread.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

impl PanicProbe {
    /// Starts counting the panics on the current thread from now on. The
    /// first call installs a panic hook that records every panic (and then
    /// runs the previous hook, so panics are still printed).
    pub fn start() -> PanicProbe {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let thread = current_thread_name();
                if let Ok(mut panics) = PANICS.lock() {
                    panics.push((thread, info.to_string()));
                }
                default(info);
            }));
        });
        PanicProbe {
            thread: current_thread_name(),
            from: PANICS.lock().map_or(0, |p| p.len()),
        }
    }

    /// The messages of the panics on this probe's thread since it started.
    pub fn panics(&self) -> Vec<String> {
        let panics = PANICS.lock().unwrap_or_else(|e| e.into_inner());
        panics[self.from..]
            .iter()
            .filter(|(thread, _)| *thread == self.thread)
            .map(|(_, message)| message.clone())
            .collect()
    }
}

fn current_thread_name() -> String {
    std::thread::current().name().unwrap_or("<unnamed>").to_string()
}
