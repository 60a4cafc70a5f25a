//! Who holds a lock: owner ids and the current task's identity.
//!
//! The hash field of a hold is `<client-uuid>:<owner-id>`. Owner ids come
//! from a per-client counter and are never reused. By default the owner is
//! the current tokio task: the first acquisition in a task maps the task to a
//! fresh owner id, and the mapping lives as long as anything of that task
//! (a guard, an acquisition in flight) still uses it. tokio may hand a task
//! id to a new task once the old one ended; such a task only ever finds a
//! mapping whose holds are still alive, so a fresh owner is never confused
//! with a finished one. Outside any task (a `block_on` on a runtime) the
//! owner is the current OS thread, under the same rules.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::keys::Str;

/// An explicit lock owner, to act as the same holder from several tasks.
///
/// Get one from [`LockGuard::owner`](crate::LockGuard::owner) to re-enter a
/// held lock from a spawned sub-task, or from
/// [`Client::new_owner`](crate::Client::new_owner) to share ownership across
/// tasks from the start; pass it to [`Lock::with_owner`](crate::Lock::with_owner).
/// An `Owner` is tied to the client that made it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub(crate) id: u64,
    /// The hash field: `<client-uuid>:<id>`.
    pub(crate) field: Str,
}

impl Owner {
    /// The hash field this owner writes in a lock: `<client-uuid>:<owner-id>`.
    pub fn field(&self) -> &str {
        &self.field
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&&*self.field).finish()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum TaskKey {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl TaskKey {
    pub(crate) fn current() -> TaskKey {
        match tokio::task::try_id() {
            Some(id) => TaskKey::Task(id),
            None => TaskKey::Thread(std::thread::current().id()),
        }
    }
}

/// Hashes a [`TaskKey`]: a task or thread id is a number the runtime or
/// the standard library hands out, not chosen by whoever names a lock, so a
/// multiply-and-rotate mix does (the default SipHash costs more than the
/// rest of a lookup, and every acquisition and guard looks up its task).
#[derive(Default)]
pub(crate) struct TaskKeyHasher(u64);

impl std::hash::Hasher for TaskKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

type TaskMap = HashMap<TaskKey, (Owner, usize), std::hash::BuildHasherDefault<TaskKeyHasher>>;

/// Maps live tasks to their owner ids.
pub(crate) struct Owners {
    uuid: String,
    next: std::sync::atomic::AtomicU64,
    tasks: Mutex<TaskMap>,
}

impl Owners {
    pub(crate) fn new(uuid: String) -> Owners {
        Owners {
            uuid,
            next: std::sync::atomic::AtomicU64::new(1),
            tasks: Mutex::new(TaskMap::default()),
        }
    }

    pub(crate) fn fresh(&self) -> Owner {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Owner {
            id,
            field: {
                use std::fmt::Write;
                let mut field = String::with_capacity(self.uuid.len() + 21);
                let _ = write!(field, "{}:{id}", self.uuid);
                field.into()
            },
        }
    }

    /// The owner of the current task if it uses one right now.
    pub(crate) fn peek_current(&self) -> Option<Owner> {
        self.tasks.lock().get(&TaskKey::current()).map(|(o, _)| o.clone())
    }

    /// Pins the current task's owner (making one if needed) until the
    /// returned pin is dropped.
    pub(crate) fn pin_current(self: &Arc<Self>) -> OwnerPin {
        let key = TaskKey::current();
        let mut tasks = self.tasks.lock();
        let entry = tasks.entry(key).or_insert_with(|| (self.fresh(), 0));
        entry.1 += 1;
        OwnerPin {
            owners: Some(self.clone()),
            key: Some(key),
            owner: entry.0.clone(),
        }
    }

    /// A pin on an explicit owner: keeps no task mapping alive.
    pub(crate) fn pin_explicit(owner: Owner) -> OwnerPin {
        OwnerPin {
            owners: None,
            key: None,
            owner,
        }
    }
}

/// Keeps a task-to-owner mapping alive while an acquisition or a hold uses it.
pub(crate) struct OwnerPin {
    owners: Option<Arc<Owners>>,
    key: Option<TaskKey>,
    pub(crate) owner: Owner,
}

impl OwnerPin {
    pub(crate) fn duplicate(&self) -> OwnerPin {
        match (&self.owners, self.key) {
            (Some(owners), Some(key)) => {
                if let Some(entry) = owners.tasks.lock().get_mut(&key) {
                    entry.1 += 1;
                }
                OwnerPin {
                    owners: Some(owners.clone()),
                    key: Some(key),
                    owner: self.owner.clone(),
                }
            }
            _ => Owners::pin_explicit(self.owner.clone()),
        }
    }
}

impl Drop for OwnerPin {
    fn drop(&mut self) {
        if let (Some(owners), Some(key)) = (&self.owners, self.key) {
            let mut tasks = owners.tasks.lock();
            if let Some(entry) = tasks.get_mut(&key) {
                if entry.0.id == self.owner.id {
                    entry.1 -= 1;
                    if entry.1 == 0 {
                        tasks.remove(&key);
                    }
                }
            }
        }
    }
}
