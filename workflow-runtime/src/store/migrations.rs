//! Migrations of the SQL stores (ST-27, ST-28): what opening one does with pending
//! migrations, and the check of the migrations a store records against the embedded ones.
// Built without either SQL backend (`default-features = false`), the check is not used.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

use super::error::{StoreError, StoreResult};

/// What opening a SQL store does with pending migrations (ST-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrateMode {
    /// Apply pending migrations (the default).
    #[default]
    Apply,
    /// Refuse to open with `SchemaOutdated` when migrations are pending.
    CheckOnly,
}

/// Checks the migrations a store records, `(version, checksum)`, against the embedded ones,
/// `(version, name, sql)`, whose checksums `checksum` computes (ST-27, ST-28): a version newer
/// than the newest embedded one is `SchemaTooNew`; a recorded version that is not embedded or
/// whose checksum differs is `MigrationChecksumMismatch`. Returns the newest recorded version
/// (0 for none).
pub(crate) fn check_recorded_migrations(
    recorded: &[(i64, String)],
    embedded: &[(u32, &str, &str)],
    checksum: impl Fn(&str) -> String,
) -> StoreResult<u32> {
    let latest = embedded.iter().map(|(v, _, _)| *v).max().unwrap_or(0);
    let found = newest_recorded(recorded.iter().map(|(v, _)| *v), latest)?;
    for (version, sum) in recorded {
        let version = u32::try_from(*version).unwrap_or(u32::MAX);
        let known = embedded.iter().find(|(v, _, _)| *v == version);
        if known.is_none_or(|(_, _, sql)| checksum(sql) != *sum) {
            return Err(StoreError::MigrationChecksumMismatch { version });
        }
    }
    Ok(found)
}

/// The newest of the migration versions a store records (0 for none).
///
/// # Errors
///
/// `SchemaTooNew` when it is newer than `latest`, the newest this library embeds (ST-29).
pub(crate) fn newest_recorded(
    recorded: impl IntoIterator<Item = i64>,
    latest: u32,
) -> StoreResult<u32> {
    let found = recorded
        .into_iter()
        .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
        .max()
        .unwrap_or(0);
    if found > latest {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: latest,
        });
    }
    Ok(found)
}
