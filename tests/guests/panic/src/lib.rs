//! Test capsule: panics in `run`, so the host sees a trap and the message on stderr.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        panic!("capsule exploded on purpose");
    }
}

export!(Capsule);
