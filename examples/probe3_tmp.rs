use std::time::{Duration, Instant};
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = std::env::args().nth(1).unwrap();
    let c = lockwarden::Client::connect(&url).await.unwrap();
    tokio::spawn(async move {
        let lock = c.lock("p").unwrap();
        let end = Instant::now() + Duration::from_secs(6);
        let mut n = 0;
        while Instant::now() < end {
            lock.lock().await.unwrap().unlock().await.unwrap();
            n += 1;
        }
        println!("{n} ops");
    })
    .await
    .unwrap();
}
