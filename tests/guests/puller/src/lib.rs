//! Test capsule: pulls the artifact `./pull.txt` names (`NAME VERSION`) at
//! run time through `murmur:artifact-manager/manage`, then calls it, and
//! writes what happened to `./pulled.txt` (`ok: <output>` or `error: <why>`).

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

use murmur::artifact_manager::manage;
use murmur::tool::run::ToolInput;
use murmur::tool_registry::invoke::invoke;

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let wanted = std::fs::read_to_string("pull.txt").expect("pull.txt");
        let mut words = wanted.split_whitespace();
        let (name, version) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
        let outcome = match manage::pull(name, version) {
            Err(e) => format!("error: {e}"),
            Ok(_) => {
                let input = ToolInput { data: Some("pulled".into()), log_path: None };
                match invoke(name, &input) {
                    Ok(r) => format!("ok: {}", r.data.unwrap_or_default()),
                    Err(e) => format!("error: {e}"),
                }
            }
        };
        std::fs::write("pulled.txt", outcome).expect("write pulled.txt");
    }
}

export!(Capsule);
