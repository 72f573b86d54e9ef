//! Contract test 7: many clients at once, each on its own connection, never
//! get each other's DEKs or spurious errors.

use std::path::PathBuf;

use crate::harness::{Fixture, random_bytes, rpc};

const CLIENTS: usize = 16;
const ROUND_TRIPS_PER_CLIENT: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_each_do_a_hundred_round_trips() {
    let fx = Fixture::start("concurrency", &[]);
    let (_, key_id) = fx.client().await;

    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(client_loop(fx.sceau.socket().to_path_buf(), key_id.clone())))
        .collect();
    for worker in workers {
        worker.await.expect("client task panicked");
    }
}

async fn client_loop(socket: PathBuf, key_id: String) {
    let mut client = rpc::connect(&socket).await;
    for _ in 0..ROUND_TRIPS_PER_CLIENT {
        rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    }
}
