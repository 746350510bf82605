//! The journal as the durable backends store it (ST-10): one row per commit, holding that
//! commit's entries.
//!
//! A row is keyed by (instance, `last_seq`), the sequence number of its newest entry, and
//! carries `first_seq`, the oldest entry of it that is still kept, and `entries`, the JSON
//! array of the entries the commit wrote, each `[at, kind, context_id, node_id, detail]`
//! (the detail as the JSON text [`Storage`](super::Storage) encoded, so an undecodable detail
//! still marks one entry only). The entries are numbered from the end: the last one is
//! `last_seq`, so a row of `n` entries starts at `last_seq - n + 1`. Dropping the oldest
//! entries of a row (the journal cap cutting through it, or a compaction) raises its
//! `first_seq` without rewriting its entries; the entries below `first_seq` are never read.
//!
//! Why: a transition journals several entries; one row (and one index entry) per commit
//! instead of one per entry is most of what a durable commit writes, and the cap deletes a
//! whole row where it deleted an entry's.

use super::error::{StoreError, StoreResult};
use super::rows::{JournalRecord, NewJournalRecord};
use crate::base::Micros;

/// One stored entry: `[at, kind, context_id, node_id, detail]`.
type Stored = (Micros, String, Option<u64>, Option<String>, String);

/// [`Stored`] borrowed from the entry it is written from.
type StoredRef<'a> = (Micros, &'a str, Option<u64>, Option<&'a str>, &'a str);

/// The `entries` text of a row holding `entries`, in order.
///
/// # Errors
///
/// [`StoreError::Invalid`] naming the journal if the entries do not serialise (a tuple of
/// numbers and strings always does): nothing is written rather than an empty row.
pub(crate) fn encode(entries: &[NewJournalRecord<String>]) -> StoreResult<String> {
    let stored: Vec<StoredRef<'_>> = entries
        .iter()
        .map(|e| {
            (
                e.at,
                e.kind.as_str(),
                e.context_id,
                e.node_id.as_deref(),
                e.detail.as_str(),
            )
        })
        .collect();
    serde_json::to_string(&stored).map_err(|error| StoreError::Invalid {
        what: "journal",
        reason: format!("the journal entries do not serialise: {error}"),
    })
}

/// One stored row as read: `first_seq`, `last_seq`, `entries`.
pub(crate) struct StoredRow {
    /// The oldest entry still kept.
    pub(crate) first_seq: i64,
    /// The newest entry, the row's key.
    pub(crate) last_seq: i64,
    /// The entries' JSON text.
    pub(crate) entries: String,
}

/// The `Decode` error of a row whose entries do not decode: it names the instance and the
/// row (its key and the range it holds), so a reader can page past it.
fn undecodable(instance: &str, row: &StoredRow, message: String) -> StoreError {
    StoreError::Decode {
        what: "journal row",
        id: format!("{instance} (entries {} to {})", row.first_seq, row.last_seq),
        path: "entries".to_owned(),
        message,
    }
}

/// The entries of `row` with `seq >= from_seq`, at most `limit`, appended to `out`.
fn decode_into(
    instance: &str,
    row: &StoredRow,
    from_seq: i64,
    limit: usize,
    out: &mut Vec<JournalRecord<String>>,
) -> StoreResult<()> {
    let stored: Vec<Stored> = serde_json::from_str(&row.entries)
        .map_err(|error| undecodable(instance, row, error.to_string()))?;
    let count = i64::try_from(stored.len()).unwrap_or(i64::MAX);
    let base = row.last_seq.saturating_sub(count).saturating_add(1);
    if count == 0 || base > row.first_seq {
        return Err(undecodable(
            instance,
            row,
            format!("{count} entries cannot end at {}", row.last_seq),
        ));
    }
    let start = from_seq.max(row.first_seq);
    let skip = usize::try_from(start - base).unwrap_or(usize::MAX);
    let room = limit.saturating_sub(out.len());
    for (seq, (at, kind, context_id, node_id, detail)) in
        (start..).zip(stored.into_iter().skip(skip).take(room))
    {
        out.push(JournalRecord {
            seq: u64::try_from(seq).unwrap_or(0),
            at,
            kind,
            context_id,
            node_id,
            detail,
        });
    }
    Ok(())
}

/// A page of entries from rows in key order (those with `last_seq >= from_seq`): at most
/// `limit` entries with `seq >= from_seq`. `next` yields the rows and is not called again
/// once the page is full. A row whose entries do not decode ends the page before it: it is
/// the page's error only when it would be its first row, so the rows before it still read,
/// and a reader paging on from its `last_seq + 1` (named in the error) reads the rows after
/// it. One damaged row hides no other row's entries.
pub(crate) fn page(
    instance: &str,
    from_seq: i64,
    limit: usize,
    next: impl FnMut() -> StoreResult<Option<StoredRow>>,
) -> StoreResult<Vec<JournalRecord<String>>> {
    let mut out = Vec::new();
    page_into(instance, from_seq, limit, &mut out, next)?;
    Ok(out)
}

/// [`page`] appending to `out` (already part of the same page): `true` when `next` ran out
/// with the page not yet full, so a caller reading the rows in parts may read on.
pub(crate) fn page_into(
    instance: &str,
    from_seq: i64,
    limit: usize,
    out: &mut Vec<JournalRecord<String>>,
    mut next: impl FnMut() -> StoreResult<Option<StoredRow>>,
) -> StoreResult<bool> {
    while out.len() < limit {
        let Some(row) = next()? else { return Ok(true) };
        if let Err(error) = decode_into(instance, &row, from_seq, limit, out) {
            if out.is_empty() {
                return Err(error);
            }
            tracing::warn!(instance, %error, "journal row does not decode; the page ends before it");
            return Ok(false);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: i64) -> NewJournalRecord<String> {
        NewJournalRecord {
            at: n,
            kind: format!("k{n}"),
            context_id: Some(u64::try_from(n).unwrap()),
            node_id: (n % 2 == 0).then(|| "root".to_owned()),
            detail: format!("{{\"n\":{n}}}"),
        }
    }

    fn rows(list: Vec<(i64, i64, String)>) -> impl FnMut() -> StoreResult<Option<StoredRow>> {
        let mut rows = list.into_iter();
        move || {
            Ok(rows.next().map(|(first_seq, last_seq, entries)| StoredRow {
                first_seq,
                last_seq,
                entries,
            }))
        }
    }

    #[test]
    fn a_row_reads_from_its_first_kept_entry_numbered_from_its_end() {
        let text = encode(&(1..=4).map(entry).collect::<Vec<_>>()).unwrap();
        // Entries 7..=10, the two oldest dropped.
        let got = page("wf", 0, 10, rows(vec![(9, 10, text.clone())])).unwrap();
        let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [9, 10]);
        assert_eq!(got[0].kind, "k3");
        assert_eq!(got[0].detail, "{\"n\":3}");
        assert_eq!(got[1].node_id.as_deref(), Some("root"));
        // Paging into the middle and a limit.
        let got = page("wf", 8, 1, rows(vec![(7, 10, text)])).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].seq, got[0].kind.as_str()), (8, "k2"));
    }

    #[test]
    fn a_damaged_row_fails_alone_and_names_its_range() {
        let good = encode(&[entry(1)]).unwrap();
        let got = page(
            "wf",
            0,
            10,
            rows(vec![
                (1, 1, good.clone()),
                (2, 3, "[[1,".to_owned()),
                (4, 4, good),
            ]),
        )
        .unwrap();
        assert_eq!(got.len(), 1, "the page ends before the damaged row");
        let error = page("wf", 2, 10, rows(vec![(2, 3, "[[1,".to_owned())])).unwrap_err();
        assert!(!error.is_transient());
        let text = error.to_string();
        assert!(text.contains("wf (entries 2 to 3)"), "{text}");
        // A row claiming more entries than it holds is damaged too.
        let short = encode(&[entry(1)]).unwrap();
        assert!(page("wf", 0, 10, rows(vec![(2, 3, short)])).is_err());
    }
}
