//! Test capsule: `run` returns at once; the trivial capsule the benchmarks start.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {}
}

export!(Capsule);
