//! `workflow`: see and operate the workflow instances of a store, beside a running
//! application or without one.
//!
//! ```text
//! workflow --store sqlite:app.db list --status suspended
//! workflow --store sqlite:app.db show order-1
//! workflow --store sqlite:app.db why order-1
//! workflow --store sqlite:app.db send payment --key '"o-1"' --payload '{"amount": 30}'
//! workflow --store sqlite:app.db suspend order-1
//! workflow --store sqlite:app.db retry job-7
//! workflow --store postgres://app@db:5432/app --schema orders list
//! workflow --store sqlite:app.db console --listen 127.0.0.1:8080
//! ```
//!
//! Reads never need the application's code and never block it: a SQLite file in use is read
//! through a read-only connection. A sent event goes to the store's inbox, and the inbox
//! worker of the process running its workflows delivers it (`send` says which instances wait for
//! it now, or that none does); `cancel`, `suspend`, `resume` and
//! `retry` record a control request that the process running the instance honours at its
//! next step (the command waits for that, `--wait`, 15 s by default); `dead-letters replay`
//! and `purge` write beside a running application too.
//!
//! The store comes from `--store` or the environment variable `WORKFLOW_STORE`; a PostgreSQL
//! store's schema from `--schema`, `WORKFLOW_SCHEMA` or the URL's `schema=NAME` (default
//! `workflow`). On PostgreSQL every command works as on SQLite, beside the running processes;
//! the command never creates or migrates a schema.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod commands;
mod console;
mod error;
mod explain;
mod inspect;
mod operator;
mod render;
mod target;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

/// See and operate the workflow instances of a store.
#[derive(Debug, Parser)]
#[command(name = "workflow", version, about, long_about = None)]
pub(crate) struct Cli {
    /// The store: `sqlite:PATH` (or a path to a SQLite file) or
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME]`.
    #[arg(long, short, env = "WORKFLOW_STORE", global = true)]
    store: Option<String>,
    /// The PostgreSQL schema holding the workflow tables (default `workflow`, or the URL's
    /// `schema=NAME`). The command never creates or migrates it.
    #[arg(long, env = "WORKFLOW_SCHEMA", global = true)]
    schema: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Lists instances, newest change last.
    List {
        /// Only this status.
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// Only instances of this definition.
        #[arg(long)]
        definition: Option<String>,
        /// Only instances unchanged for at least this long (`30s`, `15m`, `2h`, `7d`).
        #[arg(long, value_parser = parse_duration)]
        older_than: Option<Duration>,
        /// Only instances created within this long.
        #[arg(long, value_parser = parse_duration)]
        newer_than: Option<Duration>,
        /// At most this many instances.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Shows one instance: status, state or nodes, bookmarks, timers, incidents, journal.
    Show {
        /// The instance id.
        id: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The journal entries to print, newest last: the last N, or `all`. Without it, the
        /// text shows the last 20 and the JSON every entry.
        #[arg(long, value_name = "N|all", value_parser = commands::parse_journal_shown)]
        journal: Option<commands::JournalShown>,
    },
    /// Explains why an instance is not moving.
    Why {
        /// The instance id.
        id: String,
    },
    /// Sends an event: it goes to the store's inbox and the owning process delivers it.
    Send {
        /// The event name.
        name: String,
        /// The key, as JSON (`'"o-1"'`, `42`) or a plain string.
        #[arg(long)]
        key: Option<String>,
        /// The payload, as JSON.
        #[arg(long)]
        payload: Option<String>,
        /// Only this instance.
        #[arg(long)]
        instance: Option<String>,
        /// Only instances with this correlation id.
        #[arg(long)]
        correlation: Option<String>,
        /// Makes a repeated send act once.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Cancels an instance: the process running it cancels it at its next step (a task it
    /// is running has its cancellation token fired).
    Cancel {
        /// The instance id.
        id: String,
        /// Why, for the journal.
        #[arg(long)]
        reason: Option<String>,
        /// How long to wait for the owning process to apply it (`0` returns at once).
        #[arg(long, value_parser = parse_duration, default_value = "15s")]
        wait: Duration,
    },
    /// Suspends (pauses) an instance: a task it is running finishes its attempt, then nothing
    /// of it runs until `resume`; events sent to it meanwhile are held.
    Suspend {
        /// The instance id.
        id: String,
        /// How long to wait for the owning process to apply it (`0` returns at once).
        #[arg(long, value_parser = parse_duration, default_value = "15s")]
        wait: Duration,
    },
    /// Resumes a suspended instance: its timers and held events are released.
    Resume {
        /// The instance id.
        id: String,
        /// How long to wait for the owning process to apply it (`0` returns at once).
        #[arg(long, value_parser = parse_duration, default_value = "15s")]
        wait: Duration,
    },
    /// Retries a faulted instance: the failed activity runs again with a fresh attempt budget.
    Retry {
        /// The instance id.
        id: String,
        /// How long to wait for the owning process to apply it (`0` returns at once).
        #[arg(long, value_parser = parse_duration, default_value = "15s")]
        wait: Duration,
    },
    /// Moves the waiting instances of one version of a state machine, a flowchart or a
    /// sequence to another, both as recorded in the store: states (or waiting nodes) are
    /// mapped by name, data is kept. Anything unmapped refuses the whole migration; a running
    /// instance is refused (run it again later).
    Migrate {
        /// The definition name.
        name: String,
        /// The version the instances are on (a fingerprint, or a unique prefix of one).
        #[arg(long)]
        from: String,
        /// The version to move them to (a fingerprint, or a unique prefix of one).
        #[arg(long)]
        to: String,
        /// Report what would happen to each instance; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Removes finished and cancelled instances older than a duration.
    Purge {
        /// Finished at least this long ago (`7d`, `12h`).
        #[arg(long, value_parser = parse_duration)]
        older_than: Duration,
        /// Only instances of this definition.
        #[arg(long)]
        definition: Option<String>,
    },
    /// Lists dead letters, or replays one.
    DeadLetters {
        #[command(subcommand)]
        action: Option<DeadLetterAction>,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Lists the flow-control queues: limits, running, waiting, oldest wait, rate used.
    Queues {
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Lists incidents across instances.
    Incidents {
        /// Resolved ones too.
        #[arg(long)]
        all: bool,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Draws a definition, with an instance's current state or nodes highlighted.
    Diagram {
        /// An instance id (its definition is drawn, its position highlighted), a definition
        /// name, or a JSON definition file.
        what: String,
        /// Mermaid or DOT.
        #[arg(long, value_enum, default_value_t = DiagramFormat::Mermaid)]
        format: DiagramFormat,
    },
    /// Serves the operator console (instances, diagrams, journal, actions, `/metrics`) in a
    /// browser until Ctrl-C. It has no authentication of its own.
    Console {
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Shows only: the actions are hidden and refused.
        #[arg(long)]
        read_only: bool,
        /// Allows listening on an address other than loopback (a warning is printed: the
        /// console has no authentication of its own).
        #[arg(long)]
        allow_non_loopback: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeadLetterAction {
    /// Lists them (the default).
    List {
        /// Only this reason.
        #[arg(long, value_enum)]
        reason: Option<ReasonArg>,
    },
    /// Puts a dead letter back in the inbox with a fresh time to live.
    Replay {
        /// The dead letter's item id.
        item_id: String,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum StatusArg {
    Running,
    Suspended,
    Faulted,
    Finished,
    Cancelled,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ReasonArg {
    Expired,
    Failed,
    Rejected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DiagramFormat {
    Mermaid,
    Dot,
}

/// `250ms`, `30s`, `15m`, `2h`, `7d`, or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| {
        format!("`{text}` is not a duration: expected e.g. `30s`, `15m`, `2h`, `7d`")
    })?;
    let secs = |k: u64| {
        n.checked_mul(k)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("`{text}` is too long a duration"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        other => Err(format!(
            "unknown unit `{other}` in `{text}`: expected `ms`, `s`, `m`, `h` or `d`"
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(store) = cli.store.clone() else {
        eprintln!("error: no store given: pass `--store sqlite:PATH` or set WORKFLOW_STORE");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(&store, cli.schema.as_deref(), cli.command)) {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_units_people_type() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert!(parse_duration("7w").is_err_and(|e| e.contains("unknown unit `w`")));
        assert!(parse_duration("soon").is_err_and(|e| e.contains("not a duration")));
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
