//! The store-growth bench's fill: `n` completed A2A tasks written through
//! roostd's own write path, over 100 routes and 10,000 contexts, spread
//! over the fill or as conversations (`Contexts`).

use std::path::Path;

use roostd::store::{Durability, Store};

use crate::load;

/// Routes the fill's tasks go to in turn; the first is `bench`.
pub const ROUTES: usize = 100;
/// Contexts the fill's tasks are in.
pub const CONTEXTS: usize = 10_000;
/// The context of `bench`'s with 1,000 tasks.
pub const BIG: &str = "ctx_0000000000000000000000000000b16c";

/// How the fill's tasks are spread over its contexts.
#[derive(Clone, Copy, Debug)]
pub enum Contexts {
    /// Each context's tasks across the whole fill (task `i` in context
    /// `i % CONTEXTS`): the worst case for retention, whose deletes of the
    /// oldest tasks then land in every context's entries.
    Spread,
    /// Each context a conversation: its tasks follow one another on its
    /// route (100 of the route's tasks in a row, 1 % of the fill), and a
    /// newer context has a greater id, as roostd's UUIDv7 ids do. (The
    /// `bench` route's first 1,000 go to [`BIG`] instead, so 10 of its
    /// conversations stay empty.)
    Conversations,
}

impl Contexts {
    /// `ROOST_BENCH_CONTEXTS=conversations`, or spread.
    pub fn from_env() -> Self {
        match std::env::var("ROOST_BENCH_CONTEXTS").as_deref() {
            Ok("conversations") => Self::Conversations,
            Ok("spread") | Err(_) => Self::Spread,
            Ok(other) => panic!("ROOST_BENCH_CONTEXTS={other}: say spread or conversations"),
        }
    }

    /// The context of the fill's task `i` of `n`; each has a route
    /// (`i % ROUTES`) of its own.
    fn of(self, i: usize, n: usize) -> usize {
        match self {
            Self::Spread => i % CONTEXTS,
            Self::Conversations => {
                let per = n.div_ceil(CONTEXTS).max(1);
                i % ROUTES + ROUTES * (i / ROUTES / per)
            }
        }
    }
}

/// `n` completed tasks written as the broker writes them; the ids of the
/// `bench` route's.
pub async fn fill(db: &Path, session_id: &str, n: usize, contexts: Contexts) -> Vec<String> {
    let store = Store::open(db, Durability::Normal).await.expect("store");
    let mut bench = Vec::new();
    let mut big = 0;
    let mut batch = Vec::new();
    for i in 0..n {
        let r = i % ROUTES;
        let route = if r == 0 {
            "bench".to_string()
        } else {
            format!("r{r:02}")
        };
        let id = format!("tsk_f111{i:028x}");
        let mut context = format!("ctx_f111{:028x}", contexts.of(i, n));
        if r == 0 && big < 1000 {
            context = BIG.to_string();
            big += 1;
        }
        let insert = load::queue_hello(
            &store,
            load::Hello {
                id: &id,
                session_id,
                route: &route,
                context_id: &context,
                message_id: &format!("fill-{i}"),
            },
            false,
        );
        let ended = load::answer(&store, &id, false);
        batch.push((insert, ended));
        if r == 0 {
            bench.push(id);
        }
        if batch.len() == 2000 || i + 1 == n {
            for (insert, ended) in batch.drain(..) {
                assert!(insert.committed().await.expect("insert"), "written");
                assert!(ended.await.expect("events"), "events written");
            }
        }
    }
    store.close().await;
    bench
}
