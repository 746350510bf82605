//! Which store a command talks to: a URL (`sqlite:PATH` or `postgres://...`) opened for
//! reading or for operator writes.

use std::fmt;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

#[cfg(feature = "postgres")]
use workflow_runtime::store::{MigrateMode, PostgresOptions, PostgresStore};
use workflow_runtime::store::{QueueItem, SqliteStore, Storage, StoreError};

/// The schema of a PostgreSQL store when neither `--schema` nor `?schema=` names one.
const DEFAULT_SCHEMA: &str = "workflow";

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL server: the URL given to the driver (without a `schema` parameter) and
    /// the schema holding the tables.
    Postgres {
        /// The connection URL.
        url: String,
        /// The schema.
        schema: String,
    },
}

/// Why a store could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The URL is neither `sqlite:PATH` nor `postgres://...`.
    BadUrl(String),
    /// The SQLite file does not exist (reads never create one).
    NoSuchFile(PathBuf),
    /// `--schema` (or `?schema=`) with a SQLite store, or two different schemas.
    BadSchema(String),
    /// The PostgreSQL schema holds no workflow tables (the command never creates them).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    NoSchema {
        /// The server, without credentials.
        server: String,
        /// The schema looked in.
        schema: String,
    },
    /// This build has no PostgreSQL support.
    #[cfg_attr(feature = "postgres", allow(dead_code))]
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
            Self::BadSchema(message) => f.write_str(message),
            Self::NoSchema { server, schema } => write!(
                f,
                "no workflow tables in schema `{schema}` of `{server}`: no application has \
                 run on it yet, or its tables are in another schema (`--schema NAME`)"
            ),
            Self::NoPostgres => write!(
                f,
                "this `workflow` was built without PostgreSQL support: rebuild it with \
                 `--features postgres`"
            ),
            Self::Store(url, error) => write!(f, "cannot open `{url}`: {error}"),
        }
    }
}

/// `url` without its password, for messages.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            let hidden = if credentials.contains(':') {
                ":***"
            } else {
                ""
            };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// Takes a `schema=NAME` query parameter out of a PostgreSQL URL: the driver does not know
/// it. Returns the URL without it and the name.
fn take_schema_parameter(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut schema = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("schema=") {
            Some(name) => {
                schema = Some(name.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    if kept.is_empty() {
        (base.to_owned(), schema)
    } else {
        (format!("{base}?{}", kept.join("&")), schema)
    }
}

/// An opened store: the policy layer every command uses, and the backend for the few reads
/// only a backend offers.
pub(crate) struct Opened {
    storage: Storage,
    backend: Backend,
}

enum Backend {
    Sqlite(Arc<SqliteStore>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PostgresStore>),
}

impl Deref for Opened {
    type Target = Storage;

    fn deref(&self) -> &Storage {
        &self.storage
    }
}

impl Opened {
    fn sqlite(store: SqliteStore) -> Self {
        let store = Arc::new(store);
        Self {
            storage: Storage::new(store.clone()),
            backend: Backend::Sqlite(store),
        }
    }

    #[cfg(feature = "postgres")]
    fn postgres(store: PostgresStore) -> Self {
        let store = Arc::new(store);
        Self {
            storage: Storage::new(store.clone()),
            backend: Backend::Postgres(store),
        }
    }

    /// The policy layer over the store.
    pub(crate) fn storage(&self) -> Storage {
        self.storage.clone()
    }

    /// The stimuli waiting in the store's inbox, oldest first, at most `limit`; nothing is
    /// claimed.
    pub(crate) async fn queued(&self, limit: usize) -> Result<Vec<QueueItem>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.queued(limit).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.queued(limit).await,
        }
    }
}

impl Target {
    /// Parses `sqlite:PATH`, `sqlite://PATH`, `postgres://...`, `postgresql://...`, or a
    /// bare path to a SQLite file. A PostgreSQL store's schema is `schema` (from `--schema`),
    /// else the URL's `schema=NAME` parameter, else `workflow`.
    pub(crate) fn parse(url: &str, schema: Option<&str>) -> Result<Self, OpenError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let (url, in_url) = take_schema_parameter(url);
            let schema = match (schema, in_url) {
                (Some(flag), Some(param)) if flag != param => {
                    return Err(OpenError::BadSchema(format!(
                        "two schemas given: `--schema {flag}` and `schema={param}` in the URL"
                    )));
                }
                (Some(flag), _) => flag.to_owned(),
                (None, Some(param)) => param,
                (None, None) => DEFAULT_SCHEMA.to_owned(),
            };
            return Ok(Self::Postgres { url, schema });
        }
        if schema.is_some() {
            return Err(OpenError::BadSchema(
                "`--schema` names a PostgreSQL schema: a SQLite store has none".to_owned(),
            ));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(OpenError::BadUrl(url.to_owned()));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if !url.contains("://") && !url.is_empty() {
            return Ok(Self::Sqlite(PathBuf::from(url)));
        }
        Err(OpenError::BadUrl(url.to_owned()))
    }

    fn url(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite:{}", path.display()),
            Self::Postgres { url, .. } => redacted(url),
        }
    }

    /// Opens the store for reading: beside running applications, never creating or
    /// migrating anything.
    pub(crate) async fn open_read(&self) -> Result<Opened, OpenError> {
        match self {
            Self::Sqlite(path) => {
                if !path.exists() {
                    return Err(OpenError::NoSuchFile(path.clone()));
                }
                let store = SqliteStore::open_read_only(path)
                    .map_err(|e| OpenError::Store(self.url(), e))?;
                Ok(Opened::sqlite(store))
            }
            Self::Postgres { url, schema } => self.open_postgres(url, schema).await,
        }
    }

    /// Opens the store for an operator's request, which the owning process picks up: beside
    /// a running application too.
    pub(crate) async fn open_write(&self) -> Result<Opened, OpenError> {
        match self {
            Self::Sqlite(path) => {
                if !path.exists() {
                    return Err(OpenError::NoSuchFile(path.clone()));
                }
                let store = SqliteStore::open_operator(path)
                    .map_err(|e| OpenError::Store(self.url(), e))?;
                Ok(Opened::sqlite(store))
            }
            // Many processes share a PostgreSQL store: the operator's one is one more.
            Self::Postgres { url, schema } => self.open_postgres(url, schema).await,
        }
    }

    /// A PostgreSQL store whose schema must be current: the command leaves migrations to
    /// the application. It listens for nobody's wake-ups and holds two connections at most.
    #[cfg(feature = "postgres")]
    async fn open_postgres(&self, url: &str, schema: &str) -> Result<Opened, OpenError> {
        let options = PostgresOptions {
            migrate: MigrateMode::CheckOnly,
            listen: false,
            max_connections: 2,
            acquire_timeout: std::time::Duration::from_secs(15),
            ..PostgresOptions::default().schema(schema)
        };
        match PostgresStore::connect_with(url, &options).await {
            Ok(store) => Ok(Opened::postgres(store)),
            Err(StoreError::SchemaOutdated { found: 0, .. }) => Err(OpenError::NoSchema {
                server: self.url(),
                schema: schema.to_owned(),
            }),
            Err(error) => Err(OpenError::Store(self.url(), error)),
        }
    }

    #[cfg(not(feature = "postgres"))]
    #[allow(clippy::unused_async)]
    async fn open_postgres(&self, _url: &str, _schema: &str) -> Result<Opened, OpenError> {
        Err(OpenError::NoPostgres)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_backend_or_are_refused_with_the_expected_forms() {
        assert_eq!(
            Target::parse("sqlite:app.db", None).ok(),
            Some(Target::Sqlite("app.db".into()))
        );
        assert_eq!(
            Target::parse("sqlite:///tmp/a.db", None).ok(),
            Some(Target::Sqlite("/tmp/a.db".into()))
        );
        assert_eq!(
            Target::parse("data/app.db", None).ok(),
            Some(Target::Sqlite("data/app.db".into()))
        );
        assert!(matches!(
            Target::parse("postgres://u@h/db", None),
            Ok(Target::Postgres { schema, .. }) if schema == "workflow"
        ));
        let error = Target::parse("mysql://h/db", None)
            .err()
            .map(|e| e.to_string());
        assert!(error.is_some_and(|e| e.contains("expected `sqlite:PATH`")));
        assert!(Target::parse("sqlite:", None).is_err());
    }

    #[test]
    fn the_schema_comes_from_the_flag_or_the_url_and_is_not_passed_to_the_driver() {
        assert_eq!(
            Target::parse("postgres://u@h/db?schema=orders&sslmode=disable", None).ok(),
            Some(Target::Postgres {
                url: "postgres://u@h/db?sslmode=disable".to_owned(),
                schema: "orders".to_owned()
            })
        );
        assert_eq!(
            Target::parse("postgresql://u@h/db?schema=orders", Some("orders")).ok(),
            Some(Target::Postgres {
                url: "postgresql://u@h/db".to_owned(),
                schema: "orders".to_owned()
            })
        );
        assert_eq!(
            Target::parse("postgres://u@h/db", Some("billing")).ok(),
            Some(Target::Postgres {
                url: "postgres://u@h/db".to_owned(),
                schema: "billing".to_owned()
            })
        );
        let two = Target::parse("postgres://u@h/db?schema=a", Some("b")).err();
        assert!(two.is_some_and(|e| e.to_string().contains("two schemas given")));
        let sqlite = Target::parse("sqlite:app.db", Some("a")).err();
        assert!(sqlite.is_some_and(|e| e.to_string().contains("a SQLite store has none")));
    }

    #[test]
    fn messages_never_show_a_password() {
        assert_eq!(
            redacted("postgres://app:s3cret@db:5432/prod"),
            "postgres://app:***@db:5432/prod"
        );
        assert_eq!(redacted("postgres://app@db/prod"), "postgres://app@db/prod");
        assert_eq!(redacted("postgres://db/prod"), "postgres://db/prod");
    }
}
