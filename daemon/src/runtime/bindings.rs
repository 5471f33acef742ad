//! Host-side bindings of the murmur interfaces roostd provides to guests,
//! generated from `wit/` (versioned names only), and their registration on the
//! one Linker.

use wasmtime::component::{HasSelf, Linker};

use super::GuestState;

wasmtime::component::bindgen!({
    path: "../wit",
    inline: "
        package roost:host@0.1.0;

        /// Everything roostd provides beyond WASI: capsules import invoke,
        /// manage and send; tools and A2A handlers chunks, task and artifacts.
        world host {
            import murmur:tool-registry/invoke@0.1.0;
            import murmur:artifact-manager/manage@0.1.0;
            import murmur:message/send@0.1.0;
            import murmur:peer/call@0.1.0;
            import murmur:peer/call@0.2.0;
            import murmur:text/chunks@0.1.0;
            import murmur:task/task@0.1.0;
            import murmur:a2a/io@0.1.0;
            import murmur:a2a/io@0.2.0;
        }
    ",
    world: "roost:host/host@0.1.0",
    imports: {
        "murmur:task/task.request-input": async | trappable,
        "murmur:a2a/io@0.1.0.request-input": async | trappable,
        "murmur:a2a/io@0.2.0.request-input": async | trappable,
        default: async,
    },
});

pub(crate) use murmur::artifact_manager::manage;
pub(crate) use murmur::tool::run::{Status, ToolInput, ToolResult};

/// Adds the murmur host interfaces to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    murmur::tool_registry::invoke::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    manage::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::text::chunks::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::task::task::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::message::send::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::peer0_1_0::call::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::peer0_2_0::call::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::a2a0_1_0::io::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::a2a0_2_0::types::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    murmur::a2a0_2_0::io::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)?;
    Ok(())
}

/// One `bindgen!` world per role a guest plays, exporting that role's
/// interface only.
macro_rules! guest_world {
    ($(#[$doc:meta])* $module:ident, $world:literal, $inline:literal $(, with: $with:tt)?) => {
        $(#[$doc])*
        pub(crate) mod $module {
            wasmtime::component::bindgen!({
                path: "../wit",
                inline: $inline,
                world: $world,
                exports: { default: async },
                $(with: $with,)?
            });
        }
    };
}

/// Typed calls of what guests export, one world per role; each `*Indices`
/// checks a component's exports once, when it is prepared.
pub(crate) mod guest {
    guest_world!(
        /// A script capsule: `murmur:capsule/run@0.1.0`.
        capsule,
        "roost:guest/capsule@0.1.0",
        "package roost:guest@0.1.0; world capsule { export murmur:capsule/run@0.1.0; }"
    );
    guest_world!(
        /// A script capsule that serves A2A tasks: `murmur:a2a/handler@0.1.0`.
        agent,
        "roost:guest/agent@0.1.0",
        "package roost:guest@0.1.0; world agent { export murmur:a2a/handler@0.1.0; }"
    );
    guest_world!(
        /// A script capsule that serves A2A tasks with every part in and
        /// out: `murmur:a2a/handler@0.2.0`.
        agent2,
        "roost:guest/agent2@0.1.0",
        "package roost:guest@0.1.0; world agent2 { export murmur:a2a/handler@0.2.0; }",
        with: { "murmur:a2a/types@0.2.0": crate::runtime::bindings::murmur::a2a0_2_0::types }
    );
    guest_world!(
        /// A tool or driver: `murmur:tool/run@0.1.0`.
        tool,
        "roost:guest/tool@0.1.0",
        "package roost:guest@0.1.0; world tool { export murmur:tool/run@0.1.0; }"
    );
    guest_world!(
        /// A hook: `murmur:hook/handler@0.1.0`.
        hook,
        "roost:guest/hook@0.1.0",
        "package roost:guest@0.1.0; world hook { export murmur:hook/handler@0.1.0; }"
    );
}
