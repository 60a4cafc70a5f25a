//! The floors the uncontended benches compare lockwarden with, sent through
//! fred with no client logic (shared by `peers` and `instructions`):
//!
//! - the **floor**: a bare `SET key token NX PX 30000` and a
//!   compare-and-delete script, the cheapest thing that takes and gives
//!   back an expiring lock (no reentrancy, no replay safety, no fencing, no
//!   waiting);
//! - the **kept floor**: the same Redis work as lockwarden's scripts on an
//!   uncontended lock (the hash with the owner's count, fencing `INCR`, the
//!   take's record in the hold, the lease; a release that checks owner and
//!   token, deletes, and publishes only for a waiter), as two bare scripts:
//!   the cheapest thing that keeps the guarantees, sent the same way.
#![allow(dead_code)]

use fred::prelude::{ClientLike, KeysInterface, LuaInterface};
use fred::types::{Expiration, SetOptions};

pub const COMPARE_AND_DELETE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// The kept floor's scripts: the 8 Redis commands of an uncontended
/// lockwarden lock + unlock, and nothing else.
pub const KEPT_TAKE: &str = "if redis.call('PTTL', KEYS[1]) ~= -2 then return 0 end \
    local t = redis.call('INCR', KEYS[2]) \
    redis.call('HSET', KEYS[1], ARGV[1], 1, ':token', t, ':take', KEYS[3], ':kind', 'reentrant') \
    redis.call('PEXPIRE', KEYS[1], ARGV[2]) return t";
pub const KEPT_RELEASE: &str = "local h = redis.call('HMGET', KEYS[1], ARGV[1], ':token', ':wait', ':kind') \
    if not h[1] or h[2] ~= ARGV[2] then return -1 end \
    redis.call('DEL', KEYS[1]) \
    if h[3] then redis.call('PUBLISH', KEYS[2], '0') end return 0";

/// The SHA1s of the floors' scripts, loaded on every client given.
pub struct Shas {
    pub compare_and_delete: String,
    pub kept: (String, String),
}

impl Shas {
    pub async fn load(clients: &[fred::clients::Client]) -> Shas {
        let mut shas = Shas {
            compare_and_delete: String::new(),
            kept: (String::new(), String::new()),
        };
        for c in clients {
            shas.compare_and_delete = c.script_load(COMPARE_AND_DELETE).await.unwrap();
            shas.kept = (
                c.script_load(KEPT_TAKE).await.unwrap(),
                c.script_load(KEPT_RELEASE).await.unwrap(),
            );
        }
        shas
    }
}

/// A fred client at its defaults.
pub async fn fred_client(url: &str) -> fred::clients::Client {
    let config = fred::prelude::Config::from_url(url).unwrap();
    let client = fred::prelude::Builder::from_config(config).build().unwrap();
    client.init().await.unwrap();
    client
}

/// One floor pair on every master given: SET NX PX everywhere, then
/// compare-and-delete everywhere (a bare Redlock round).
pub async fn floor_pair(clients: &[fred::clients::Client], sha: &str, key: &str, token: &str) {
    let sets = clients.iter().map(|c| async move {
        let r: Option<String> = c
            .set(key, token, Some(Expiration::PX(30_000)), Some(SetOptions::NX), false)
            .await
            .unwrap();
        assert!(r.is_some(), "the floor's key was free");
    });
    futures::future::join_all(sets).await;
    let dels = clients.iter().map(|c| async move {
        let n: i64 = c.evalsha(sha, key, token).await.unwrap();
        assert_eq!(n, 1);
    });
    futures::future::join_all(dels).await;
}

/// One kept-floor pair on every master given: the take script everywhere,
/// then the release script everywhere.
pub async fn kept_floor_pair(clients: &[fred::clients::Client], shas: &(String, String), key: &str) {
    let keys = || {
        vec![
            key.to_string(),
            format!("{key}:token"),
            format!("{key}:req:0123456789abcdef"),
        ]
    };
    let takes = clients.iter().map(|c| async move {
        let t: i64 = c.evalsha(&shas.0, keys(), vec!["owner-uuid:1", "30000"]).await.unwrap();
        assert!(t > 0, "the kept floor's key was free");
        t
    });
    let tokens = futures::future::join_all(takes).await;
    let releases = clients.iter().zip(tokens).map(|(c, t)| async move {
        let keys = vec![key.to_string(), format!("{key}:channel")];
        let n: i64 = c
            .evalsha(&shas.1, keys, vec!["owner-uuid:1".to_string(), t.to_string()])
            .await
            .unwrap();
        assert_eq!(n, 0);
    });
    futures::future::join_all(releases).await;
}
