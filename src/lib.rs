//! Distributed reentrant locks over Redis, in the style of Redisson's lock
//! family. (Crate docs are completed below.)

mod client;
mod error;
mod guard;
mod keys;
mod lock;
mod node;
mod owner;
mod pubsub;
mod watchdog;

pub use client::{
    Client, ClientBuilder, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_WATCHDOG_LEASE, MAX_DURATION,
    MIN_WATCHDOG_LEASE,
};
pub use error::{Error, RedisErrorKind, Result};
pub use guard::LockGuard;
pub use keys::{MAX_NAME_LEN, NAMESPACE};
pub use lock::{Lease, Lock};
pub use owner::Owner;
pub use watchdog::LossReason;
