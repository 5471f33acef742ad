//! Test capsule (`murmur:a2a/agent@0.1.0`): an A2A handler that plants and
//! follows links in the directories it was given, the way a hostile guest
//! would between two runs. Each line of a task is one step:
//! - `link <dir> <target> <name>`: in the preopened directory `<dir>`
//!   (`.` is the workdir), removes the file `<name>` if there is one and
//!   makes it a link to `<target>`;
//! - `move <dir> <from> <to>`: renames `<from>` to `<to>` in the preopened
//!   directory `<dir>`;
//! - `read <path>`: reads the file at `<path>` (absolute names resolve
//!   against the preopens, as WASI's libc does);
//! - `write <path> <text>`: writes `<text>` to it;
//! - `preopens`: the names of the preopened directories;
//! - `make <dir> <name> <n>`: makes the files `<name>0` … `<name><n-1>` in
//!   the preopened directory `<dir>`, stopping at the first error: `made
//!   <k>` or `made <k> err:<why>`;
//! - `unmake <dir> <name> <n>`: removes them;
//! - `via <dir> <name> <n>`: makes `<name>0` … through a dangling link `l`
//!   each time (the link made, the file opened through it, the link
//!   removed): `made <k>` or `made <k> err:<why>`;
//! - `save <dir> <name> <n>`: writes `<name>` `n` times as an editor saves,
//!   a temporary file renamed over it: `saved <k>` or `saved <k> err:<why>`.
//!
//! It completes with a JSON array of each step's outcome: `ok`, the
//! first 64 bytes read (lossy UTF-8), or `err:<why>`.

use serde_json::Value;
use wasi::filesystem::preopens::get_directories;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:a2a/agent@0.1.0",
    generate_all,
});

use exports::murmur::a2a0_1_0::handler::{Guest, Outcome, Task};

struct Linker;

fn link(dir: &str, target: &str, name: &str) -> Result<String, String> {
    let descriptor = preopen(dir)?;
    let _ = descriptor.unlink_file_at(name);
    descriptor
        .symlink_at(target, name)
        .map(|()| "ok".to_string())
        .map_err(|e| format!("err:{}", e.name()))
}

fn preopen(dir: &str) -> Result<wasi::filesystem::types::Descriptor, String> {
    get_directories()
        .into_iter()
        .find(|(_, n)| n == dir)
        .map(|(d, _)| d)
        .ok_or_else(|| format!("err:no preopen {dir}"))
}

fn step(line: &str) -> Result<String, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["link", dir, target, name] => link(dir, target, name),
        ["move", dir, from, to] => {
            let d = preopen(dir)?;
            d.rename_at(from, &d, to)
                .map(|()| "ok".to_string())
                .map_err(|e| format!("err:{}", e.name()))
        }
        ["read", path] => std::fs::read(path)
            .map(|bytes| String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned())
            .map_err(|e| format!("err:{e}")),
        ["write", path, text] => std::fs::write(path, text)
            .map(|()| "ok".to_string())
            .map_err(|e| format!("err:{e}")),
        ["make", dir, name, n] => {
            let d = preopen(dir)?;
            let n: usize = n.parse().map_err(|_| "err:not a number".to_string())?;
            for i in 0..n {
                let made = d.open_at(
                    wasi::filesystem::types::PathFlags::empty(),
                    &format!("{name}{i}"),
                    wasi::filesystem::types::OpenFlags::CREATE,
                    wasi::filesystem::types::DescriptorFlags::WRITE,
                );
                if let Err(e) = made {
                    return Ok(format!("made {i} err:{}", e.name()));
                }
            }
            Ok(format!("made {n}"))
        }
        ["via", dir, name, n] => {
            use wasi::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
            let d = preopen(dir)?;
            let n: usize = n.parse().map_err(|_| "err:not a number".to_string())?;
            for i in 0..n {
                let made = d
                    .symlink_at(&format!("{name}{i}"), "l")
                    .and_then(|()| {
                        d.open_at(PathFlags::SYMLINK_FOLLOW, "l", OpenFlags::CREATE, DescriptorFlags::WRITE)
                    })
                    .and_then(|_| d.unlink_file_at("l"));
                if let Err(e) = made {
                    let _ = d.unlink_file_at("l");
                    return Ok(format!("made {i} err:{}", e.name()));
                }
            }
            Ok(format!("made {n}"))
        }
        ["save", dir, name, n] => {
            use wasi::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
            let d = preopen(dir)?;
            let n: usize = n.parse().map_err(|_| "err:not a number".to_string())?;
            for i in 0..n {
                let saved = d
                    .open_at(PathFlags::empty(), "tmp", OpenFlags::CREATE | OpenFlags::TRUNCATE, DescriptorFlags::WRITE)
                    .and_then(|_| d.rename_at("tmp", &d, name));
                if let Err(e) = saved {
                    return Ok(format!("saved {i} err:{}", e.name()));
                }
            }
            Ok(format!("saved {n}"))
        }
        ["unmake", dir, name, n] => {
            let d = preopen(dir)?;
            let n: usize = n.parse().map_err(|_| "err:not a number".to_string())?;
            for i in 0..n {
                d.unlink_file_at(&format!("{name}{i}"))
                    .map_err(|e| format!("err:{}", e.name()))?;
            }
            Ok(format!("unmade {n}"))
        }
        ["preopens"] => Ok(get_directories()
            .into_iter()
            .map(|(_, name)| name)
            .collect::<Vec<_>>()
            .join(",")),
        _ => Err(format!("err:unknown step {line:?}")),
    }
}

impl Guest for Linker {
    fn handle(task: Task) -> Outcome {
        let outcomes: Vec<Value> = task
            .text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| Value::from(step(line).unwrap_or_else(|e| e)))
            .collect();
        Outcome::Completed(Value::from(outcomes).to_string())
    }
}

export!(Linker);
