//! Test capsule: grows files in its workdir every way WASI allows (a write
//! at an offset, a write stream, an append stream, `set-size`, std's
//! `fs::write`) to the size in `./fill-size.txt`, and writes `./fill.json`
//! with each outcome ("ok" or the error code) and the size each file reached.

use serde_json::{Map, Value};
use wasi::filesystem::preopens::get_directories;
use wasi::filesystem::types::{
    Descriptor, DescriptorFlags, ErrorCode, OpenFlags, PathFlags, filesystem_error_code,
};
use wasi::io::streams::{OutputStream, StreamError};

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

/// A chunk no larger than `blocking-write-and-flush` takes at once.
const CHUNK: usize = 4096;

fn workdir() -> Descriptor {
    get_directories()
        .into_iter()
        .find(|(_, name)| name == ".")
        .map(|(dir, _)| dir)
        .expect("the workdir is preopened as .")
}

fn create(dir: &Descriptor, name: &str) -> Descriptor {
    dir.open_at(
        PathFlags::empty(),
        name,
        OpenFlags::CREATE | OpenFlags::TRUNCATE,
        DescriptorFlags::READ | DescriptorFlags::WRITE,
    )
    .expect("create a file in the workdir")
}

fn code(e: ErrorCode) -> String {
    format!("err:{}", e.name())
}

/// Writes `size` bytes through `stream`, a chunk at a time.
fn pour(stream: &OutputStream, size: usize) -> Result<(), String> {
    let chunk = vec![b'x'; CHUNK];
    let mut left = size;
    while left > 0 {
        let n = left.min(CHUNK);
        stream
            .blocking_write_and_flush(&chunk[..n])
            .map_err(|e| match e {
                StreamError::LastOperationFailed(e) => match filesystem_error_code(&e) {
                    Some(c) => code(c),
                    None => format!("err:{}", e.to_debug_string()),
                },
                StreamError::Closed => "err:closed".to_string(),
            })?;
        left -= n;
    }
    Ok(())
}

fn outcome(r: Result<(), String>) -> Value {
    Value::from(r.err().unwrap_or_else(|| "ok".to_string()))
}

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let size: usize = std::fs::read_to_string("fill-size.txt")
            .expect("./fill-size.txt")
            .trim()
            .parse()
            .expect("a size in bytes");
        let dir = workdir();
        let mut out = Map::new();

        let f = create(&dir, "write.bin");
        let at = |offset: u64, len: usize| f.write(&vec![b'x'; len], offset).map(|_| ());
        // Below the size in one piece, then the last byte at its offset.
        let r = at(0, size.saturating_sub(1)).and_then(|()| at(size as u64 - 1, 1));
        out.insert("write".into(), outcome(r.map_err(code)));

        let f = create(&dir, "stream.bin");
        let r = f.write_via_stream(0).map_err(code).and_then(|s| pour(&s, size));
        out.insert("stream".into(), outcome(r));

        let f = create(&dir, "append.bin");
        let r = f.append_via_stream().map_err(code).and_then(|s| pour(&s, size));
        out.insert("append".into(), outcome(r));

        let f = create(&dir, "set-size.bin");
        out.insert(
            "set_size".into(),
            outcome(f.set_size(size as u64).map_err(code)),
        );

        let r = std::fs::write("std.bin", vec![b'x'; size]).map_err(|e| format!("err:{e}"));
        out.insert("std".into(), outcome(r));

        let text = serde_json::to_string_pretty(&Value::Object(out)).expect("serialise");
        std::fs::write("fill.json", text).expect("write ./fill.json");
    }
}

export!(Capsule);
