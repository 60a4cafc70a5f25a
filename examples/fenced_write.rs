//! A write fenced by the lock's token. The store remembers the highest token
//! it has seen per document and refuses a write carrying a lower one, so a
//! holder that lost its lock without noticing (a long pause, a lease that ran
//! out) cannot overwrite the work of the holder that came after it.
//!
//! `cargo run --example fenced_write -- redis://127.0.0.1:6379`

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

/// Documents in SQLite, each with the token of its last write.
pub struct FencedStore {
    db: Connection,
}

/// What a fenced write did.
#[derive(Debug, PartialEq, Eq)]
pub enum Write {
    Done,
    /// A write with a higher token came first.
    Refused {
        token: u64,
        seen: u64,
    },
}

impl FencedStore {
    pub fn open_in_memory() -> rusqlite::Result<FencedStore> {
        let db = Connection::open_in_memory()?;
        db.execute_batch("CREATE TABLE doc (name TEXT PRIMARY KEY, body TEXT NOT NULL, token INTEGER NOT NULL)")?;
        Ok(FencedStore { db })
    }

    /// Writes `body` unless a higher token wrote `name` before. Equal tokens
    /// pass: re-entries of one hold share its token.
    pub fn write(&mut self, name: &str, body: &str, token: u64) -> rusqlite::Result<Write> {
        let tx = self.db.transaction()?;
        let seen: Option<i64> = tx
            .query_row("SELECT token FROM doc WHERE name = ?1", [name], |r| r.get(0))
            .optional()?;
        if let Some(seen) = seen.map(|s| s as u64).filter(|s| *s > token) {
            return Ok(Write::Refused { token, seen });
        }
        tx.execute(
            "INSERT INTO doc (name, body, token) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET body = excluded.body, token = excluded.token",
            params![name, body, token as i64],
        )?;
        tx.commit()?;
        Ok(Write::Done)
    }

    pub fn read(&self, name: &str) -> rusqlite::Result<Option<String>> {
        self.db
            .query_row("SELECT body FROM doc WHERE name = ?1", [name], |r| r.get(0))
            .optional()
    }
}

/// A holder whose short lease runs out while it is "paused", a second holder
/// that writes meanwhile, then the first one's late write: refused. Returns
/// the two writes' outcomes and what the store kept.
pub async fn scenario(url: &str) -> Result<(Write, Write, Option<String>), Box<dyn std::error::Error>> {
    let client = lockwarden::Client::connect(url).await?;
    let mut store = FencedStore::open_in_memory()?;
    let lock = client.lock("doc:report")?;

    let first = lock.lock_with_lease(Duration::from_millis(300)).await?;
    let stale_token = first.token();
    // The first holder stalls past its lease (a GC pause, a swapped-out VM).
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Meanwhile someone else takes the lock and writes.
    let second = lock.with_owner(client.new_owner()).lock().await?;
    let fresh = store.write("report", "written by the second holder", second.token())?;
    second.unlock().await?;

    // The first holder wakes up and writes with its old token.
    let late = store.write("report", "written by the stale holder", stale_token)?;
    let _ = first.unlock().await; // NotHeld: its lease ran out long ago
    Ok((fresh, late, store.read("report")?))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let (fresh, late, kept) = scenario(&url).await?;
    println!("second holder's write: {fresh:?}");
    println!("stale holder's write:  {late:?}");
    println!("the store kept:        {kept:?}");
    Ok(())
}
