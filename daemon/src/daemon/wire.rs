//! Wiring what sessions share, once at start-up: the registry, the tool
//! jail, the checkpoint key, the task broker, the route table and the
//! runtime's way out for guests' A2A messages.

use std::sync::Arc;

/// The gateway as guests' messages meet it: its address, what roostd
/// presents to peers (`a2a.peers`), and the tokens its routes take (a
/// message to a route of this daemon is checked against them).
pub struct Gateway {
    pub a2a_base: String,
    pub peer_tokens: Vec<Arc<crate::a2a::client::PeerCredential>>,
    pub access: Arc<crate::a2a::access::Access>,
}

/// What sessions share, wired once: the registry artifacts come from, the
/// tool jail this host gives, the checkpoint key, the task broker, and the
/// runtime's way out for guests' A2A messages.
pub fn wire(
    config: crate::config::DaemonConfig,
    store: crate::store::Store,
    runtime: crate::runtime::Runtime,
    metrics: Arc<crate::metrics::Metrics>,
    gateway: Gateway,
    log: Arc<dyn crate::tasks::log::TaskLog>,
) -> (
    crate::supervisor::SharedParts,
    Arc<crate::a2a::client::Peers>,
) {
    let Gateway {
        a2a_base,
        peer_tokens,
        access,
    } = gateway;
    let location = config.registry_location();
    let registry = crate::registry::open(&location).unwrap_or_else(|error| {
        // The config was validated, so this is unreachable in practice.
        tracing::error!(%error, "cannot open the registry; artifacts will not resolve");
        Arc::new(crate::registry::DirRegistry(
            roost_wire::artifact::LocalRegistry::new(&location),
        ))
    });
    let host_jail = crate::sandbox::HostJail::detect(
        config.sandbox.jail_tools,
        config.sandbox.jail_helper.as_deref(),
        config.sandbox.tool_uids,
    );
    let checkpoint_key =
        match crate::agent::checkpoint::CheckpointKey::load_or_create(&config.state_dir) {
            Ok(key) => Some(key),
            Err(error) => {
                tracing::error!(%error, "checkpoints will be neither signed nor verified");
                None
            }
        };
    let tasks = Arc::new(crate::tasks::Broker::new(log, Arc::clone(&metrics)));
    tasks.set_max_awake(
        config
            .hibernation
            .max_awake
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    );
    let routes = Arc::new(crate::supervisor::Routes::default());
    let outbox = Arc::new(crate::a2a::client::Peers::new(
        a2a_base.clone(),
        Arc::clone(&routes),
        Arc::clone(&tasks),
        crate::a2a::client::LocalGateway {
            access,
            dedupe: config.a2a.dedupe_message_ids,
        },
        peer_tokens,
    ));
    runtime.set_outbox(Arc::clone(&outbox) as Arc<dyn crate::runtime::Outbox>);
    let parts = crate::supervisor::SharedParts {
        config,
        store,
        runtime,
        metrics,
        registry,
        host_jail,
        a2a_base,
        tasks,
        checkpoint_key,
        routes,
        claims: None,
        schedules_changed: Arc::default(),
    };
    (parts, outbox)
}
