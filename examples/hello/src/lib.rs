//! The demo script capsule: greets, counts its runs in `./runs.txt`, and lists its workdir.

wit_bindgen::generate!({
    path: "../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Hello;

impl exports::murmur::capsule::run::Guest for Hello {
    fn run() {
        let name = std::env::var("MURMUR_CAPSULE_NAME").unwrap_or_default();
        let session = std::env::var("MURMUR_SESSION_ID").unwrap_or_default();
        let url = std::env::var("MURMUR_CAPSULE_URL").unwrap_or_default();
        println!("hello from capsule {name}, session {session}");
        println!("my A2A base URL would be {url}");
        let runs = std::fs::read_to_string("runs.txt")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        std::fs::write("runs.txt", format!("{runs}\n")).expect("write ./runs.txt");
        println!("this workdir has seen {runs} run(s)");
    }
}

export!(Hello);
