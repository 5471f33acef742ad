//! Test capsule: spins forever in `run`, to exercise epoch deadlines and stop.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let mut counter: u64 = 0;
        loop {
            // black_box keeps the loop (and its epoch check) from being optimised away.
            counter = std::hint::black_box(counter.wrapping_add(1));
        }
    }
}

export!(Capsule);
