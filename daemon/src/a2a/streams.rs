//! How many A2A streams (SSE, gRPC server streams) each route has open: a
//! stream takes a slot before its task is made and gives it back when it
//! closes, so no client holds more than `http.max_streams_per_route`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::error::A2aError;

/// Open streams per route.
#[derive(Debug)]
pub(super) struct Streams {
    max: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream's slot, given back when dropped.
#[derive(Debug)]
pub(super) struct Slot {
    streams: Arc<Streams>,
    route: String,
}

impl Streams {
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot on `route`, or an error naming the limit.
    pub(super) fn take(self: &Arc<Self>, route: &str) -> Result<Slot, A2aError> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(route.to_string()).or_default();
        if *count >= self.max {
            tracing::warn!(
                route,
                max = self.max,
                "A2A stream refused: the route has its limit of streams open (http.max_streams_per_route)"
            );
            return Err(A2aError::Unsupported(format!(
                "route '{route}' has {} streams open, its limit (roostd's \
                 http.max_streams_per_route): close one, or send without streaming and poll \
                 GetTask",
                self.max
            )));
        }
        *count += 1;
        Ok(Slot {
            streams: Arc::clone(self),
            route: route.to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.route) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.route);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_holds_at_most_its_limit_and_a_closed_stream_gives_its_slot_back() {
        let streams = Streams::new(2);
        let a = streams.take("billing").expect("first");
        let _b = streams.take("billing").expect("second");
        let err = streams.take("billing").expect_err("third refused");
        assert!(err.to_string().contains("max_streams_per_route"), "{err}");
        // Another route is not held up by this one.
        let _other = streams.take("search").expect("another route");
        drop(a);
        let _c = streams.take("billing").expect("a slot came back");
    }
}
