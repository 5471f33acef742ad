//! Test hook (`murmur:hook/handler@0.1.0`): on `stage`, refuses capsules whose
//! name starts with `reject` and records every other event in `./hook-events.txt`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:hook/hook@0.1.0",
    generate_all,
});

use exports::murmur::hook::handler::{Event, Guest};

struct Hook;

impl Guest for Hook {
    fn handle(event: Event) -> Result<Option<String>, String> {
        if event.kind == "stage" && event.payload.contains("\"capsule\":\"reject") {
            return Err("capsules named reject-* may not be staged here".into());
        }
        let line = format!("{}\n", event.kind);
        let mut old = std::fs::read_to_string("hook-events.txt").unwrap_or_default();
        old.push_str(&line);
        std::fs::write("hook-events.txt", old).map_err(|e| e.to_string())?;
        Ok(None)
    }
}

export!(Hook);
