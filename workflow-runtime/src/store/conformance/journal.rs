//! The journal and its compaction.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::{T0, create_leased, journal_entry, waiting};
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
    c.journal = (1..=5).map(journal_entry).collect();
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
    c.journal = vec![journal_entry(6)];
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
        c.journal = entries.map(journal_entry).collect();
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

/// C-22: what a reader sees is the journal as one entry per seq, whatever a backend stores:
/// pages from any seq (the middle of a commit's entries included) and of any size agree
/// with a model of the entries, as commits append several entries at once, compactions and
/// the cap (ENG-42) cut through a commit's entries, and a summary lies below a gap.
pub async fn c22_journal_pages(backend: Arc<dyn TestBackend>) {
    /// One step: entries appended (their count), a compaction through a seq, the cap.
    struct Step {
        append: u64,
        compact: Option<u64>,
        cap: Option<u64>,
    }
    let step = |append, compact, cap| Step {
        append,
        compact,
        cap,
    };
    let steps = [
        step(4, None, Some(10)),
        step(4, None, Some(10)),
        // Through the middle of the second commit's entries.
        step(0, Some(6), None),
        // The cap cuts through the second commit's entries.
        step(3, None, Some(4)),
        // A summary below the gap the cap left.
        step(0, Some(3), None),
        // The cap takes the summary and an entry.
        step(2, None, Some(5)),
        // The cap cuts through the commit's own entries.
        step(5, None, Some(3)),
        // A compaction past every entry; appends go on after its summary.
        step(0, Some(20), None),
        step(2, None, None),
        step(6, None, Some(5)),
    ];
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut model: Vec<(u64, String)> = Vec::new();
    for (version, (n, step)) in (1..).zip(steps.iter().enumerate()) {
        let mut c = waiting("wf-1", version, lease.token, version as i64);
        let next = model.last().map_or(1, |(seq, _)| seq + 1);
        if let Some(through) = step.compact {
            model.retain(|(seq, _)| *seq > through);
            model.insert(0, (through, format!("summary{n}")));
            c.journal_compaction = Some(JournalCompaction {
                through_seq: through,
                summary: NewJournalRecord {
                    at: T0,
                    kind: format!("summary{n}"),
                    context_id: None,
                    node_id: None,
                    detail: json!({ "through": through }),
                },
            });
        }
        let next = if step.compact.is_some() {
            model.last().map_or(next, |(seq, _)| seq + 1)
        } else {
            next
        };
        c.journal = (0..step.append).map(|k| journal_entry(next + k)).collect();
        model.extend((0..step.append).map(|k| (next + k, format!("k{}", next + k))));
        if let Some(max) = step.cap {
            c.max_journal_entries = Some(max);
            let excess = model.len().saturating_sub(max as usize);
            model.drain(..excess);
        }
        store.commit(c).await.unwrap();
        let all = store.read_journal("wf-1", 0, 1000).await.unwrap();
        let got: Vec<(u64, String)> = all.iter().map(|e| (e.seq, e.kind.clone())).collect();
        assert_eq!(got, model, "step {n}");
        for e in &all {
            if e.kind.starts_with('k') {
                assert_eq!(e.detail, json!(e.seq), "step {n}: entry {}", e.seq);
            }
        }
        let newest = model.last().map_or(0, |(seq, _)| *seq);
        for from in 0..=newest + 1 {
            for limit in [1, 2, 5] {
                let page = store.read_journal("wf-1", from, limit).await.unwrap();
                let got: Vec<(u64, String)> =
                    page.iter().map(|e| (e.seq, e.kind.clone())).collect();
                let want: Vec<(u64, String)> = model
                    .iter()
                    .filter(|(seq, _)| *seq >= from)
                    .take(limit)
                    .cloned()
                    .collect();
                assert_eq!(got, want, "step {n}: from {from}, limit {limit}");
            }
        }
    }
}
