//! Putting it together: the stores the program opened, where we may listen, serving until told
//! to stop.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use engram_core::store::claims::ClaimStore;
use engram_core::store::graph::GraphStore;
use engram_core::store::tokens::TokenStore;
use engram_core::{Backend, MemoryStore};
use engram_memory::Searcher;
use engram_memory::session::SessionStore;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{AppState, BodyLimits, router};
use crate::auth::Authenticator;
use crate::config::ServerSettings;
use crate::connections::{ConnectionLimits, raise_open_file_limit};
use crate::knowledge::KnowledgeBase;
use crate::mcp::{HttpOptions, http_router};
use crate::service::{Extraction, MemoryService, default_concurrency};

/// How long in-flight requests may take to finish after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Why the server cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address is reachable from other machines and there is no token to guard it.
    #[error(
        "refusing to listen on {0}: it is reachable from other machines and no token is configured; create one with `engram token create --user NAME` (or list one under [server] tokens in config.toml), or listen on 127.0.0.1"
    )]
    NoTokens(SocketAddr),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// A store could not be opened.
    #[error("{0}")]
    Store(String),
    /// Serving failed.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The stores a server works on, all of one backend.
#[derive(Clone)]
pub struct Stores {
    /// The memories.
    pub memories: Arc<dyn MemoryStore>,
    /// How to search them (the CLI builds it, lexical or hybrid).
    pub searcher: Searcher,
    /// The API tokens.
    pub tokens: Arc<dyn TokenStore>,
    /// The knowledge graphs.
    pub graph: Arc<dyn GraphStore>,
    /// Claims on the messages extraction works on (`infer: true`).
    pub claims: Arc<dyn ClaimStore>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

impl Stores {
    /// The stores of `backend`, searched by `searcher` (which must search its memories).
    pub fn new(backend: &Backend, searcher: Searcher) -> Self {
        Self {
            memories: backend.memories.clone(),
            searcher,
            tokens: backend.tokens.clone(),
            graph: backend.graph.clone(),
            claims: backend.claims.clone(),
        }
    }

    /// The stores of `backend`, searched by the plain (lexical) searcher.
    pub fn lexical(backend: &Backend) -> Self {
        Self::new(backend, Searcher::new(backend.memories.clone()))
    }

    /// The memory service over these stores.
    pub fn service(&self, concurrency: usize) -> MemoryService {
        let knowledge = KnowledgeBase::new(
            self.graph.clone(),
            self.memories.clone(),
            self.searcher.clone(),
        );
        MemoryService::new(
            self.memories.clone(),
            self.claims.clone(),
            self.searcher.clone(),
            self.tokens.clone(),
            knowledge,
            concurrency,
        )
    }
}

/// What `engram serve` is asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// `[server]` from config.toml.
    pub settings: ServerSettings,
    /// The user MCP tools act for when nothing else names one.
    pub default_user: Option<String>,
    /// Store operations that may run at once.
    pub concurrency: usize,
    /// Extraction from messages (`infer: true`); `None` answers such requests 501.
    pub extraction: Option<Extraction>,
    /// The agent's conversations (`ENGRAM_HOME/sessions`), whose transcripts the sessions
    /// routes show; `None` shows sessions through their memories only.
    pub transcripts: Option<SessionStore>,
}

impl ServeOptions {
    /// Options for `listen` with the settings' defaults.
    pub fn new(listen: SocketAddr, settings: ServerSettings) -> Self {
        Self {
            default_user: settings.user.clone(),
            listen,
            settings,
            concurrency: default_concurrency(),
            extraction: None,
            transcripts: None,
        }
    }
}

/// A server ready to accept connections.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
}

impl Server {
    /// Binds the address and builds the application, refusing an address beyond this machine
    /// when no token exists.
    pub async fn bind(stores: &Stores, options: ServeOptions) -> Result<Self, ServeError> {
        let loopback = options.listen.ip().is_loopback();
        let auth = Arc::new(Authenticator::new(
            stores.tokens.clone(),
            options.settings.tokens.clone(),
            loopback,
        ));
        if !loopback {
            let configured = auth
                .tokens_configured()
                .await
                .map_err(|e| ServeError::Store(e.message))?;
            if !configured {
                return Err(ServeError::NoTokens(options.listen));
            }
        }
        let service = stores
            .service(options.concurrency)
            .with_extraction(options.extraction.clone())
            .with_transcripts(options.transcripts.clone());
        let shutdown = CancellationToken::new();
        let mcp = http_router(
            service.clone(),
            HttpOptions {
                default_user: options.default_user.clone(),
                shutdown: shutdown.clone(),
                max_body_bytes: options.settings.max_batch_body_bytes(),
                loopback,
            },
        );
        let state = AppState { service, auth };
        let mem0 = crate::mem0::router(crate::mem0::Mem0State {
            app: state.clone(),
            default_user: options.default_user.clone(),
            events: Arc::default(),
        });
        let app = router(
            state,
            BodyLimits {
                default: options.settings.max_body_bytes(),
                batch: options.settings.max_batch_body_bytes(),
            },
            Some(mcp),
            Some(mem0),
        );
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: options.listen,
                    source,
                })?;
        let limits = options.settings.connection_limits(raise_open_file_limit());
        Ok(Self {
            listener,
            app,
            shutdown,
            limits,
        })
    }

    /// The whole application, to serve requests in process (without the socket's timeouts
    /// and cap): for tests and fuzzing.
    pub fn router(&self) -> Router {
        self.app.clone()
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        Ok(self.listener.local_addr()?)
    }

    /// Serves until `stop` completes, then lets in-flight requests finish (up to
    /// [`SHUTDOWN_GRACE`]) and ends every MCP stream. Clients that stall are cut off and
    /// connections over the cap are answered `503` (see [`crate::connections`]).
    pub async fn run(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let streams = self.shutdown.clone();
        let stop = async move {
            stop.await;
            tracing::info!("shutting down: finishing requests in flight");
        };
        crate::connections::serve(
            self.listener,
            self.app,
            self.limits,
            stop,
            SHUTDOWN_GRACE,
            // MCP streams stay open until told; without this they would hold shutdown forever.
            move || streams.cancel(),
        )
        .await;
        Ok(())
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
