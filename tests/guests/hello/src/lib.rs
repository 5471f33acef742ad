//! Test capsule: greets with its capsule name and session id, writes `./hello.txt`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let name = std::env::var("MURMUR_CAPSULE_NAME").unwrap_or_default();
        let session = std::env::var("MURMUR_SESSION_ID").unwrap_or_default();
        println!("hello from {name} session {session}");
        std::fs::write("hello.txt", "hello\n").expect("write ./hello.txt");
    }
}

export!(Capsule);
