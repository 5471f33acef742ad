//! Test capsule: allocates and touches 1 MiB blocks forever, to hit the memory limit.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

const BLOCK: usize = 1 << 20;
const PAGE: usize = 4096;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut block = vec![0u8; BLOCK];
            for (i, page) in block.chunks_mut(PAGE).enumerate() {
                page[0] = (i as u8) | 1;
            }
            hoard.push(std::hint::black_box(block));
            std::hint::black_box(&hoard);
        }
    }
}

export!(Capsule);
