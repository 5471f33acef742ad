//! Test capsule: writes `./probe.json` describing the env, args and filesystem it sees.

use serde_json::{Map, Value, json};

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

fn names(path: &str) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(path) {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn outcome<T>(r: std::io::Result<T>) -> Value {
    match r {
        Ok(_) => Value::from("ok"),
        Err(e) => Value::from(format!("err:{e}")),
    }
}

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let env: Map<String, Value> = std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    Value::from(v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        let args: Vec<String> = std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let probe = json!({
            "env": env,
            "args": args,
            "preopens": names("."),
            "read_root": outcome(std::fs::read_dir("/")),
            // wasi-libc resolves absolute paths against the preopens, so "/"
            // may succeed while showing only the sandbox: list what it shows.
            "root_entries": names("/"),
            "read_etc_passwd": outcome(std::fs::read_to_string("/etc/passwd")),
            "read_parent": outcome(std::fs::read_dir("..")),
        });
        let text = serde_json::to_string_pretty(&probe).expect("serialise probe");
        std::fs::write("probe.json", text).expect("write ./probe.json");
        println!("probe written");
        eprintln!("probe stderr line");
    }
}

export!(Capsule);
