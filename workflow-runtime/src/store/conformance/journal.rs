//! The journal and its compaction.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::{T0, create_leased, waiting};
use super::harness::{Harness, TestBackend};
use crate::store::{JournalCompaction, Micros, NewJournalRecord};

/// C-22: journal: append order, range reads, truncation of huge details.
pub async fn c22_journal(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let entry = |n: u64| NewJournalRecord {
        at: T0 + n as Micros,
        kind: format!("k{n}"),
        context_id: Some(n),
        node_id: Some("root".to_owned()),
        detail: json!({ "n": n }),
    };
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.journal = (1..=3).map(entry).collect();
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.journal = (4..=5).map(entry).collect();
    c.journal.push(NewJournalRecord {
        at: T0,
        kind: "big".to_owned(),
        context_id: None,
        node_id: None,
        detail: json!({ "blob": "x".repeat(crate::store::MAX_JOURNAL_DETAIL_BYTES) }),
    });
    store.commit(c).await.unwrap();
    let all = store.read_journal("wf-1", 0, 100).await.unwrap();
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(all[3].kind, "k4");
    assert_eq!(all[3].detail, json!({ "n": 4 }));
    assert_eq!(all[3].context_id, Some(4));
    assert_eq!(all[3].node_id.as_deref(), Some("root"));
    assert_eq!(all[5].detail["truncated"], json!(true));
    let range = store.read_journal("wf-1", 2, 2).await.unwrap();
    let seqs: Vec<u64> = range.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [2, 3]);
    assert!(store.read_journal("wf-2", 0, 10).await.unwrap().is_empty());
}

/// C-22: compaction in the same commit: a range replaced by its summary, order kept.
pub async fn c22_journal_compaction(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.journal = (1..=5).map(plain_entry).collect();
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.journal_compaction = Some(JournalCompaction {
        through_seq: 4,
        summary: NewJournalRecord {
            at: T0 + 4,
            kind: "compacted".to_owned(),
            context_id: None,
            node_id: None,
            detail: json!({ "entries": 4 }),
        },
    });
    c.journal = vec![plain_entry(6)];
    // A rejected compaction changes nothing.
    let mut stale = c.clone();
    stale.expected_version = 1;
    assert!(store.commit(stale).await.is_err());
    assert_eq!(store.read_journal("wf-1", 0, 100).await.unwrap().len(), 5);
    store.commit(c).await.unwrap();
    let all = store.read_journal("wf-1", 0, 100).await.unwrap();
    let got: Vec<(u64, String)> = all.iter().map(|e| (e.seq, e.kind.clone())).collect();
    assert_eq!(
        got,
        [
            (4, "compacted".to_owned()),
            (5, "k5".to_owned()),
            (6, "k6".to_owned())
        ]
    );
}

/// C-22: the cap keeps the newest entries (ENG-42), a compaction summary included, also when
/// the summary lies below entries the cap removed before.
pub async fn c22_journal_cap(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let kept = |journal: Vec<crate::store::JournalRecord>| -> Vec<u64> {
        journal.iter().map(|e| e.seq).collect()
    };
    let mut version = 1;
    let mut commit = |entries: std::ops::RangeInclusive<u64>, max: u64| {
        let mut c = waiting("wf-1", version, lease.token, version as i64);
        version += 1;
        c.journal = entries.map(plain_entry).collect();
        c.max_journal_entries = Some(max);
        c
    };
    store.commit(commit(1..=5, 3)).await.unwrap();
    assert_eq!(
        kept(store.read_journal("wf-1", 0, 100).await.unwrap()),
        [3, 4, 5]
    );
    store.commit(commit(6..=7, 3)).await.unwrap();
    assert_eq!(
        kept(store.read_journal("wf-1", 0, 100).await.unwrap()),
        [5, 6, 7]
    );
    // A summary of entries the cap removed already lies below the oldest entry kept.
    let mut c = commit(8..=8, 5);
    c.journal_compaction = Some(JournalCompaction {
        through_seq: 2,
        summary: NewJournalRecord {
            at: T0 + 2,
            kind: "compacted".to_owned(),
            context_id: None,
            node_id: None,
            detail: json!({ "entries": 2 }),
        },
    });
    store.commit(c).await.unwrap();
    assert_eq!(
        kept(store.read_journal("wf-1", 0, 100).await.unwrap()),
        [2, 5, 6, 7, 8]
    );
    // Over the cap by three: the summary and the two oldest entries after it go.
    store.commit(commit(9..=10, 4)).await.unwrap();
    assert_eq!(
        kept(store.read_journal("wf-1", 0, 100).await.unwrap()),
        [7, 8, 9, 10]
    );
    store.commit(commit(11..=11, 4)).await.unwrap();
    assert_eq!(
        kept(store.read_journal("wf-1", 0, 100).await.unwrap()),
        [8, 9, 10, 11]
    );
}

/// Journal entry `n` of the compaction and cap cases: kind `k{n}`, at `T0 + n`, no context.
fn plain_entry(n: u64) -> NewJournalRecord {
    NewJournalRecord {
        at: T0 + n as Micros,
        kind: format!("k{n}"),
        context_id: None,
        node_id: None,
        detail: json!(n),
    }
}
