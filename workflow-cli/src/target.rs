//! Which store a command talks to: a URL (`sqlite:PATH` or `postgres://...`) opened for
//! reading or for operator writes.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use workflow_runtime::store::{SqliteStore, Storage, StoreError};

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL server.
    Postgres(String),
}

/// Why a store could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The URL is neither `sqlite:PATH` nor `postgres://...`.
    BadUrl(String),
    /// The SQLite file does not exist (reads never create one).
    NoSuchFile(PathBuf),
    /// This build has no PostgreSQL support.
    NoPostgres,
    /// The store refused.
    Store(String, StoreError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadUrl(url) => write!(
                f,
                "`{url}` is not a store URL: expected `sqlite:PATH` (or a path ending in `.db`) \
                 or `postgres://USER@HOST:PORT/DATABASE`"
            ),
            Self::NoSuchFile(path) => write!(f, "no SQLite file at `{}`", path.display()),
            Self::NoPostgres => write!(
                f,
                "this `workflow` was built without PostgreSQL support: rebuild it with \
                 `--features postgres`"
            ),
            Self::Store(url, error) => write!(f, "cannot open `{url}`: {error}"),
        }
    }
}

impl Target {
    /// Parses `sqlite:PATH`, `sqlite://PATH`, `postgres://...`, `postgresql://...`, or a
    /// bare path to a SQLite file.
    pub(crate) fn parse(url: &str) -> Result<Self, OpenError> {
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(OpenError::BadUrl(url.to_owned()));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        if !url.contains("://") && !url.is_empty() {
            return Ok(Self::Sqlite(PathBuf::from(url)));
        }
        Err(OpenError::BadUrl(url.to_owned()))
    }

    fn url(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite:{}", path.display()),
            Self::Postgres(url) => url.clone(),
        }
    }

    /// Opens the store for reading: beside a running application that holds the file.
    pub(crate) fn open_read(&self) -> Result<Storage, OpenError> {
        match self {
            Self::Sqlite(path) => {
                if !path.exists() {
                    return Err(OpenError::NoSuchFile(path.clone()));
                }
                let store = SqliteStore::open_read_only(path)
                    .map_err(|e| OpenError::Store(self.url(), e))?;
                Ok(Storage::new(Arc::new(store)))
            }
            Self::Postgres(_) => Err(OpenError::NoPostgres),
        }
    }

    /// The stimuli waiting in the store's queue, oldest first, at most `limit`.
    pub(crate) async fn queued(
        &self,
        limit: usize,
    ) -> Result<Vec<workflow_runtime::store::QueueItem>, crate::commands::CliError> {
        match self {
            Self::Sqlite(path) => {
                let store = SqliteStore::open_read_only(path)
                    .map_err(|e| OpenError::Store(self.url(), e))?;
                Ok(store.queued(limit).await?)
            }
            Self::Postgres(_) => Err(OpenError::NoPostgres.into()),
        }
    }

    /// Opens the store for an operator's request, which the owning process picks up: beside
    /// a running application too.
    pub(crate) fn open_write(&self) -> Result<Storage, OpenError> {
        match self {
            Self::Sqlite(path) => {
                if !path.exists() {
                    return Err(OpenError::NoSuchFile(path.clone()));
                }
                let store = SqliteStore::open_operator(path)
                    .map_err(|e| OpenError::Store(self.url(), e))?;
                Ok(Storage::new(Arc::new(store)))
            }
            Self::Postgres(_) => Err(OpenError::NoPostgres),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_backend_or_are_refused_with_the_expected_forms() {
        assert_eq!(
            Target::parse("sqlite:app.db").ok(),
            Some(Target::Sqlite("app.db".into()))
        );
        assert_eq!(
            Target::parse("sqlite:///tmp/a.db").ok(),
            Some(Target::Sqlite("/tmp/a.db".into()))
        );
        assert_eq!(
            Target::parse("data/app.db").ok(),
            Some(Target::Sqlite("data/app.db".into()))
        );
        assert!(matches!(
            Target::parse("postgres://u@h/db"),
            Ok(Target::Postgres(_))
        ));
        let error = Target::parse("mysql://h/db").err().map(|e| e.to_string());
        assert!(error.is_some_and(|e| e.contains("expected `sqlite:PATH`")));
        assert!(Target::parse("sqlite:").is_err());
    }
}
