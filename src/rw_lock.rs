//! The read-write lock's handle: two lock handles, one per side.

use std::sync::Arc;

use crate::core::Core;
use crate::keys::Names;
use crate::lock::Kind;
use crate::lock::Lock;

/// A read-write lock: many readers or one writer, each side a [`Lock`]
/// with the same verbs and guards as the reentrant lock. Made by
/// [`Client::rw_lock`](crate::Client::rw_lock).
///
/// - Both sides are reentrant per owner. The write holder may also take the
///   read side (and keep it after leaving the write side); a read holder
///   asking for the write side gets [`Error::WouldDeadlock`](crate::Error::WouldDeadlock)
///   at once instead of waiting for itself.
/// - Each read hold has its own lease (the watchdog's, or a fixed one): a
///   reader that dies frees its share when its lease ends, while other
///   readers renew theirs.
/// - Writers are not starved: a writer that waits marks the lock, and
///   readers that do not hold it yet wait behind the mark (writer
///   preference). The mark lasts the client's
///   [`fair_waiter_timeout`](crate::ClientBuilder::fair_waiter_timeout)
///   after the writer's last attempt; a waiting writer renews it every
///   third of that.
/// - Nor are readers: a reader that waits marks the lock too (renewed the
///   same way), and the release of a write hold lets every reader that
///   waited for it in before the next writer, which goes in once they
///   leave. Under contention readers and writers take turns, and neither
///   side keeps the other out.
/// - A wait that stops (given up, or its future dropped: then in the
///   background) takes its mark back.
/// - A write hold has a fencing token, strictly increasing across write
///   holds; a read hold's guard carries the last write token handed out,
///   so a read's token is never below a write's before it and every write
///   after it has a higher one. Where no counter is there (no write yet,
///   or the server lost its data) the read starts it at the server's
///   clock, as a write would.
/// - Waiters wake on the lock's unlock message, bounded by the holders'
///   leases, as for the reentrant lock.
#[derive(Clone, Debug)]
pub struct RwLock {
    read: Lock,
    write: Lock,
}

impl RwLock {
    /// A read-write lock in Redisson's layout (see
    /// [`Client::redisson_rw_lock`](crate::Client::redisson_rw_lock)).
    pub(crate) fn redisson(core: Arc<Core>, names: Names) -> RwLock {
        RwLock {
            read: Lock::new(core.clone(), names.clone(), Kind::RedissonRead),
            write: Lock::new(core, names, Kind::RedissonWrite),
        }
    }

    pub(crate) fn new(core: Arc<Core>, names: Names) -> RwLock {
        RwLock {
            read: Lock::new(core.clone(), names.clone(), Kind::Read),
            write: Lock::new(core, names, Kind::Write),
        }
    }

    /// The read side: shared with other readers, excluded by a writer.
    pub fn read(&self) -> Lock {
        self.read.clone()
    }

    /// The write side: exclusive.
    pub fn write(&self) -> Lock {
        self.write.clone()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.read.name()
    }
}
