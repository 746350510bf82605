//! `workflow console`: serves the operator console over the store until Ctrl-C.

use std::net::SocketAddr;

use crate::error::CliError;
use crate::operator::operator_runtime;
use crate::target::Target;
use workflow_console::Console;

/// Serves the console on `listen`: actions go through a runtime without the application's
/// workflows, so each is a request the process running the instance honours (as the
/// command line's own), unless `read_only`.
pub(crate) async fn serve(
    target: &Target,
    listen: SocketAddr,
    read_only: bool,
    allow_non_loopback: bool,
) -> Result<String, CliError> {
    if !listen.ip().is_loopback() {
        if !allow_non_loopback {
            return Err(CliError::Input(format!(
                "`{listen}` is not a loopback address: the console has no authentication of \
                 its own, so listening there needs `--allow-non-loopback` (or put it behind \
                 your own authenticating proxy on 127.0.0.1)"
            )));
        }
        eprintln!(
            "warning: the console listens on {listen} and has NO authentication of its own: \
             anyone who reaches this address can see every instance{}",
            if read_only {
                ""
            } else {
                " and retry, cancel, suspend, resume or purge them"
            }
        );
    }
    let store = if read_only {
        target.open_read().await?
    } else {
        target.open_write().await?
    };
    let runtime = operator_runtime(store.storage(), "workflow console")?;
    let router = Console::new(runtime).read_only(read_only).router();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CliError::Input(format!("cannot listen on {listen}: {e}")))?;
    let bound = listener.local_addr().unwrap_or(listen);
    eprintln!(
        "console: http://{bound}/{} (Ctrl-C stops it)",
        if read_only { " read-only" } else { "" }
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| CliError::Input(format!("the console stopped: {e}")))?;
    Ok(String::new())
}
