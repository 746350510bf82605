//! Why a command failed, as the command line prints it.

use std::fmt;

use workflow_runtime::store::StoreError;

use crate::target::OpenError;

/// Why a command failed; printed after `error: `.
#[derive(Debug)]
pub(crate) enum CliError {
    Open(OpenError),
    Store(StoreError),
    NotFound(String),
    Input(String),
    Send(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(error) => error.fmt(f),
            Self::Store(error) => write!(f, "the store failed: {error}"),
            Self::NotFound(id) => write!(f, "no instance `{id}` in this store"),
            Self::Input(message) | Self::Send(message) => f.write_str(message),
        }
    }
}

impl From<OpenError> for CliError {
    fn from(error: OpenError) -> Self {
        Self::Open(error)
    }
}

impl From<StoreError> for CliError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound { id, .. } => Self::NotFound(id),
            other => Self::Store(other),
        }
    }
}
