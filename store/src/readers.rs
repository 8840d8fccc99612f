//! The store's read connections.
//!
//! Every write goes through the one writer connection, and a write with
//! `synchronous=FULL` holds it through its fsync (milliseconds to tens of
//! milliseconds on an ordinary disk). Eight runners flushing progress once a
//! second each kept the writer busy often enough that status calls queued
//! behind the fsyncs: GetTrainingStatus p99 was 15–28 ms with 8 tasks
//! training (`host/benches/api_load.rs`, `docs/benchmarks.md`). In WAL mode
//! readers never wait for a writer, so reads take one of a few read-only
//! connections of their own: each statement sees every transaction committed
//! before it started, which is what the single connection gave them too
//! (a read never saw half of a write).
//!
//! A read takes the first idle connection; when all are busy it waits for
//! one, picked in turn, so the waits spread over them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use rusqlite::Connection;

use super::StoreError;

/// How many read connections a store keeps: enough for the API's blocking
/// threads on a small machine to read at once, few enough that their page
/// caches (SQLite's default, 2 MB at most each) stay small.
pub(super) const READ_CONNECTIONS: usize = 4;

/// A fixed set of read-only connections to the store's file.
pub(super) struct Readers {
    connections: Vec<Mutex<Connection>>,
    next: AtomicUsize,
}

impl Readers {
    /// Opens `count` connections with `connect` (at least one).
    pub(super) fn open(
        count: usize,
        connect: impl Fn() -> Result<Connection, StoreError>,
    ) -> Result<Readers, StoreError> {
        let connections = (0..count.max(1))
            .map(|_| connect().map(Mutex::new))
            .collect::<Result<_, _>>()?;
        Ok(Readers {
            connections,
            next: AtomicUsize::new(0),
        })
    }

    /// An idle connection, or the next one in turn once it is free. A
    /// connection whose holder panicked is still good: a read changes nothing.
    pub(super) fn get(&self) -> MutexGuard<'_, Connection> {
        for connection in &self.connections {
            match connection.try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        self.connections[turn]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> Result<Connection, StoreError> {
        Ok(Connection::open_in_memory()?)
    }

    #[test]
    fn a_busy_connection_is_passed_over_for_an_idle_one() {
        let readers = Readers::open(2, memory).unwrap();
        let first = readers.get();
        let second = readers.get();
        assert!(!std::ptr::eq(&*first, &*second));
    }

    #[test]
    fn when_all_are_busy_a_read_waits_for_one() {
        let readers = std::sync::Arc::new(Readers::open(1, memory).unwrap());
        let held = readers.get();
        let waiter = {
            let readers = readers.clone();
            std::thread::spawn(move || {
                let c = readers.get();
                c.query_row("SELECT 7", [], |r| r.get::<_, i64>(0)).unwrap()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished());
        drop(held);
        assert_eq!(waiter.join().unwrap(), 7);
    }

    #[test]
    fn zero_asked_still_opens_one() {
        let readers = Readers::open(0, memory).unwrap();
        assert_eq!(readers.connections.len(), 1);
    }
}
