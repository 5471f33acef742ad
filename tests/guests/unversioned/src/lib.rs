//! Test capsule: exports only the unversioned `murmur:capsule/run` interface.

wit_bindgen::generate!({
    inline: "
        package murmur:capsule;

        interface run {
            run: func();
        }

        world capsule {
            export run;
        }
    ",
    world: "capsule",
});

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        println!("hello from an unversioned capsule");
    }
}

export!(Capsule);
